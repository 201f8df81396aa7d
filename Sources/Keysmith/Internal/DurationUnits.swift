/// A `Duration` in the units the system calls and `Date` arithmetic take: the one conversion
/// every module uses.
extension Duration {
    /// In seconds, with the fraction (for `Date` and `TimeInterval` arithmetic).
    package var inSeconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }

    /// In whole nanoseconds, rounded down; a duration past `Int.max` nanoseconds (about 292
    /// years) is `Int.max`, a negative one 0 (for semaphore and poll timeouts).
    package var inNanoseconds: Int {
        guard self > .zero else { return 0 }
        let (seconds, overflow) = Int(clamping: components.seconds).multipliedReportingOverflow(by: 1_000_000_000)
        guard !overflow else { return .max }
        let (total, overflowed) = seconds.addingReportingOverflow(Int(components.attoseconds / 1_000_000_000))
        return overflowed ? .max : total
    }
}
