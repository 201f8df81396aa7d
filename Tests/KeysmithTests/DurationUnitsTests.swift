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
