/// Cedar's `datetime` and `duration` text forms, read and written without Foundation's locale or
/// calendar (days from the proleptic Gregorian calendar, in UTC).
enum DateTimeText {
    /// Parses `2026-11-22`, `2026-11-22T10:00:00Z`, `2026-11-22T10:00:00.250Z`,
    /// `2026-11-22T10:00:00+0100` or `…00.250-0530` into milliseconds since 1970-01-01T00:00:00Z.
    static func parse(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        var index = 0
        func number(_ count: Int) -> Int64? {
            guard index + count <= bytes.count else { return nil }
            var value: Int64 = 0
            for byte in bytes[index..<index + count] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int64(byte - UInt8(ascii: "0"))
            }
            index += count
            return value
        }
        func literal(_ character: Character) -> Bool {
            guard index < bytes.count, bytes[index] == character.asciiValue else { return false }
            index += 1
            return true
        }
        guard let year = number(4), literal("-"), let month = number(2), literal("-"), let day = number(2),
              (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year)
        else { return nil }
        var milliseconds = daysFromEpoch(year: year, month: month, day: day) * 86_400_000
        if index == bytes.count { return milliseconds }
        guard literal("T"), let hour = number(2), literal(":"), let minute = number(2), literal(":"), let second = number(2),
              hour < 24, minute < 60, second < 60
        else { return nil }
        milliseconds += ((hour * 60 + minute) * 60 + second) * 1000
        if literal(".") {
            guard let fraction = number(3) else { return nil }
            milliseconds += fraction
        }
        if literal("Z") { return index == bytes.count ? milliseconds : nil }
        let sign: Int64
        if literal("+") { sign = 1 } else if literal("-") { sign = -1 } else { return nil }
        guard let offsetHours = number(2), let offsetMinutes = number(2), index == bytes.count,
              offsetHours < 24, offsetMinutes < 60
        else { return nil }
        return milliseconds - sign * (offsetHours * 60 + offsetMinutes) * 60_000
    }

    /// `2026-11-22T10:00:00.000Z`.
    static func format(milliseconds: Int64) -> String {
        let days = floorDivide(milliseconds, 86_400_000)
        let rest = floorModulo(milliseconds, 86_400_000)
        let (year, month, day) = civil(fromDays: days)
        func pad(_ value: Int64, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(rest / 3_600_000, 2)):\(pad(rest / 60_000 % 60, 2)):"
            + "\(pad(rest / 1000 % 60, 2)).\(pad(rest % 1000, 3))Z"
    }

    /// Parses `1d2h30m`, `-90s`, `250ms`: units d, h, m, s, ms, each at most once, in that order.
    static func parseDuration(_ text: String) -> Int64? {
        var rest = Substring(text)
        var negative = false
        if rest.first == "-" {
            negative = true
            rest = rest.dropFirst()
        }
        guard !rest.isEmpty else { return nil }
        let units: [(String, UInt64)] = [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)]
        // The magnitude, up to 2^63 for a negative duration (the lowest Int64) and 2^63 - 1
        // otherwise, so that `-9223372036854775808ms` is a duration as it is in Cedar.
        let largest = negative ? Int64.min.magnitude : Int64.max.magnitude
        var total: UInt64 = 0
        var nextUnit = 0
        while !rest.isEmpty {
            let digits = rest.prefix { $0.isASCII && $0.isNumber }
            guard !digits.isEmpty, let amount = UInt64(digits) else { return nil }
            rest = rest.dropFirst(digits.count)
            let unitText = rest.hasPrefix("ms") ? "ms" : String(rest.prefix { $0.isLetter })
            guard let unitIndex = units.firstIndex(where: { $0.0 == unitText }), unitIndex >= nextUnit else { return nil }
            rest = rest.dropFirst(unitText.count)
            nextUnit = unitIndex + 1
            let (product, overflow) = amount.multipliedReportingOverflow(by: units[unitIndex].1)
            let (sum, sumOverflow) = total.addingReportingOverflow(product)
            guard !overflow, !sumOverflow, sum <= largest else { return nil }
            total = sum
        }
        return negative ? Int64(truncatingIfNeeded: 0 &- total) : Int64(total)
    }

    /// `1d2h30m` (`0ms` for zero).
    static func formatDuration(milliseconds: Int64) -> String {
        if milliseconds == 0 { return "0ms" }
        var rest = milliseconds.magnitude
        var text = milliseconds < 0 ? "-" : ""
        for (unit, size) in [("d", UInt64(86_400_000)), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)] where rest >= size {
            text += "\(rest / size)\(unit)"
            rest %= size
        }
        return text
    }

    static func floorDivide(_ value: Int64, _ divisor: Int64) -> Int64 {
        let quotient = value / divisor
        return value % divisor < 0 ? quotient - 1 : quotient
    }

    /// `value - floorDivide(value, divisor) * divisor` for a positive divisor, in `0..<divisor`,
    /// without the product (which overflows near `Int64.min`).
    static func floorModulo(_ value: Int64, _ divisor: Int64) -> Int64 {
        let rest = value % divisor
        return rest < 0 ? rest + divisor : rest
    }

    private static func isLeap(_ year: Int64) -> Bool { year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) }

    private static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 (Howard Hinnant's algorithm).
    private static func daysFromEpoch(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = floorDivide(y, 400)
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    private static func civil(fromDays days: Int64) -> (Int64, Int64, Int64) {
        let z = days + 719_468
        let era = floorDivide(z, 146_097)
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
