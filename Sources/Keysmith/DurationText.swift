extension Duration {
    /// A duration as the `keysmith` command takes one: a whole number of seconds, or a whole
    /// number with a unit, `s`, `m`, `h`, `d` or `w` (`90s`, `30m`, `12h`, `1d`, `2w`); at most
    /// 100 years. A token's expiry horizon (`TokenSelection`), a refresh's minimum validity and
    /// a wait's limit are written this way.
    ///
    /// ```swift
    /// let horizon = try Duration(parsing: "1d")    // .seconds(86_400)
    /// try Duration(parsing: "1.5h")                 // throws: whole numbers only
    /// ```
    ///
    /// - Throws: `KeysmithError.Code.invalidArgument` naming the text, for anything else (a
    ///   fraction, a sign, a space, another unit, more than 100 years).
    public init(parsing text: String) throws {
        let units: [Character: Int64] = ["s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800]
        var number = Substring(text)
        var unit: Int64 = 1
        if let last = text.last, let factor = units[last] {
            number = number.dropLast()
            unit = factor
        }
        // Digits only: Int("+5") and Int("-0") would be taken.
        guard !number.isEmpty, number.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }), let value = Int64(number),
              value <= Self.longest / unit else {
            throw KeysmithError.invalidArgument(
                "'\(OneLine.unicodeEscaped(String(text.prefix(64))))' is not a duration: give a whole number with s, m, h, d or w (such as 12h or 1d), at most 100 years")
        }
        self = .seconds(value * unit)
    }

    /// 100 years of 365 days, in seconds: the longest duration ``init(parsing:)`` takes.
    private static let longest: Int64 = 100 * 365 * 86_400
}
