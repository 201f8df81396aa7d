/// Whether two byte strings are equal, in a time that depends only on their lengths (an API
/// key compared byte by byte with an early exit tells an attacker how much of a guess was right).
func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    var difference: UInt8 = 0
    for index in a.indices { difference |= a[index] ^ b[index] }
    return difference == 0
}
