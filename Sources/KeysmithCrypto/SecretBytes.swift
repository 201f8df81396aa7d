internal import COpenSSL

/// Key material in memory that is wiped (`OPENSSL_cleanse`) when the last reference goes away.
///
/// The bytes are never exposed as a value: borrow them with ``withUnsafeBytes(_:)``.
/// `description` prints `<redacted>`; `==` is constant-time.
package final class SecretBytes: @unchecked Sendable, Equatable, CustomStringConvertible {
    // Written only in init and deinit; never shared mutably, hence @unchecked Sendable.
    private var storage: [UInt8]

    /// Takes ownership of a buffer and wipes the caller's copy.
    package init(takingOwnershipOf bytes: inout [UInt8]) {
        storage = bytes
        cleanse(&bytes)
    }

    /// Copies bytes; the caller stays responsible for its own copy.
    package init<Bytes: Sequence>(copying bytes: Bytes) where Bytes.Element == UInt8 {
        storage = Array(bytes)
    }

    /// Fresh random bytes from OpenSSL's CSPRNG.
    package static func random(count: Int) throws -> SecretBytes {
        var bytes = try Random.bytes(count: count)
        return SecretBytes(takingOwnershipOf: &bytes)
    }

    deinit { cleanse(&storage) }

    /// The number of bytes.
    package var count: Int { storage.count }

    /// Borrows the bytes.
    package func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try storage.withUnsafeBytes(body)
    }

    /// A copy of the bytes as an array, for writing wrapped keys; wipe it after use.
    package func copyBytes() -> [UInt8] { storage }

    package static func == (lhs: SecretBytes, rhs: SecretBytes) -> Bool {
        guard lhs.count == rhs.count else { return false }
        return lhs.withUnsafeBytes { l in
            rhs.withUnsafeBytes { r in
                CRYPTO_memcmp(l.baseAddress, r.baseAddress, l.count) == 0
            }
        }
    }

    package var description: String { "<redacted>" }
}

/// Whether two byte strings are equal, in time that depends only on their lengths: every MAC,
/// tag and verifier in Keysmith is compared through this one function. The corresponding C
/// function is `CRYPTO_memcmp`.
package func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    guard !a.isEmpty else { return true }
    return a.withUnsafeBytes { l in b.withUnsafeBytes { r in CRYPTO_memcmp(l.baseAddress, r.baseAddress, l.count) == 0 } }
}

/// Overwrites a buffer with zeros in a way the compiler may not optimise away.
/// The corresponding C function is `OPENSSL_cleanse`.
package func cleanse(_ bytes: inout [UInt8]) {
    let count = bytes.count
    bytes.withUnsafeMutableBytes { buffer in
        if let base = buffer.baseAddress { OPENSSL_cleanse(base, count) }
    }
}

/// Cryptographically secure random bytes.
package enum Random {
    /// Returns `count` random bytes. The corresponding C function is `RAND_bytes`.
    package static func bytes(count: Int) throws -> [UInt8] {
        _ = openSSLReady
        var bytes = [UInt8](repeating: 0, count: count)
        let ok = bytes.withUnsafeMutableBytes { buffer in
            count == 0 ? 1 : RAND_bytes(buffer.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(count))
        }
        guard ok == 1 else { throw CryptoError.library("RAND_bytes") }
        return bytes
    }
}
