import Keysmith
import Testing

@Suite("Duration in seconds and nanoseconds: the one conversion")
struct DurationUnitsTests {
    @Test("seconds keep the fraction; nanoseconds round down, are 0 for a negative duration and Int.max past it (never a trap)")
    func conversions() {
        #expect(Duration.milliseconds(1_500).inSeconds == 1.5)
        #expect(Duration.seconds(-2).inSeconds == -2)
        #expect(Duration.nanoseconds(1_234_567_891).inNanoseconds == 1_234_567_891)
        #expect(Duration.seconds(3).inNanoseconds == 3_000_000_000)
        #expect(Duration.seconds(-3).inNanoseconds == 0 && Duration.zero.inNanoseconds == 0)
        #expect(Duration.seconds(Int64.max).inNanoseconds == .max)
        #expect(Duration.seconds(9_223_372_036).inNanoseconds == 9_223_372_036_000_000_000)
        #expect(Duration.seconds(9_223_372_037).inNanoseconds == .max)
    }
}

@Suite("Duration(parsing:): the command's durations, in the library")
struct DurationTextTests {
    @Test("a whole number of seconds, or with s, m, h, d or w, up to 100 years")
    func accepted() throws {
        #expect(try Duration(parsing: "0") == .zero)
        #expect(try Duration(parsing: "45") == .seconds(45))
        #expect(try Duration(parsing: "90s") == .seconds(90))
        #expect(try Duration(parsing: "30m") == .seconds(1_800))
        #expect(try Duration(parsing: "12h") == .seconds(43_200))
        #expect(try Duration(parsing: "1d") == .seconds(86_400))
        #expect(try Duration(parsing: "2w") == .seconds(1_209_600))
        #expect(try Duration(parsing: "36500d") == .seconds(3_153_600_000))
        #expect(try Duration(parsing: "3153600000") == .seconds(3_153_600_000))
    }

    @Test("anything else is refused as an invalid argument naming the text, escaped and cut short",
          arguments: ["", "h", "1.5h", "-1s", "+5", "-0", " 5", "5 s", "5y", "5H", "1dd", "36501d", "5218w", "99999999999999999999",
                      "\u{1B}[31m5x", String(repeating: "9", count: 500)])
    func refused(text: String) throws {
        let error = #expect(throws: KeysmithError.self) { try Duration(parsing: text) }
        #expect(error?.code == .invalidArgument)
        let message = error?.message ?? ""
        #expect(message.contains("is not a duration") && !message.contains("\u{1B}") && message.count < 250, "\(message)")
    }
}
