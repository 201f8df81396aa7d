public import Keysmith
import KeysmithCrypto

extension SecureRecord {
    /// Whether `presented` (an API key or password a caller sent) is this record's secret,
    /// compared in a time that depends only on the lengths: a comparison that stops at the first
    /// differing byte tells an attacker, by its timing, how much of a guess was right. It is the
    /// comparison Keysmith uses for its own MACs and verifiers (OpenSSL's `CRYPTO_memcmp`). An
    /// empty kept secret matches nothing: a caller that sends no key (`Authorization: Bearer `)
    /// is never let in by an item stored empty.
    ///
    /// ```swift
    /// let presented = Array(authorization.utf8.dropFirst("Bearer ".count))
    /// guard let kept = try await store.read(.genericPassword(service: "api-keys", account: client)),
    ///       kept.secretMatches(presented) else { throw Unauthorized() }
    /// ```
    public func secretMatches(_ presented: [UInt8]) -> Bool {
        guard !secret.isEmpty else { return false }
        var kept = Array(secret)
        defer { cleanse(&kept) }
        return constantTimeEqual(kept, presented)
    }
}
