internal import COpenSSL

/// A failure inside OpenSSL, with the library's own reason drained from its error queue.
package struct CryptoError: Error, Sendable, Equatable, CustomStringConvertible {
    package enum Kind: Sendable, Equatable {
        /// An AEAD tag did not verify: wrong key, or the data was changed.
        case authenticationFailed
        /// OpenSSL refused an operation (out of memory, bad parameters).
        case library
        /// A caller passed a bad argument (a key of the wrong size, say).
        case invalidArgument
    }

    package let kind: Kind
    package let reason: String

    package var description: String { reason }

    static func authenticationFailed() -> CryptoError {
        drainErrorQueue()
        return CryptoError(kind: .authenticationFailed, reason: "the authentication tag did not verify")
    }

    static func invalidArgument(_ reason: String) -> CryptoError {
        CryptoError(kind: .invalidArgument, reason: reason)
    }

    /// Turns OpenSSL's error queue into an error naming the failed call and OpenSSL's reasons.
    static func library(_ function: String) -> CryptoError {
        let reasons = drainErrorQueue()
        let detail = reasons.isEmpty ? "no reason given" : reasons.joined(separator: "; ")
        return CryptoError(kind: .library, reason: "OpenSSL \(function) failed: \(detail)")
    }

    @discardableResult
    private static func drainErrorQueue() -> [String] {
        var reasons: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            if let text = ERR_reason_error_string(code) {
                reasons.append(String(cString: text))
            } else {
                reasons.append("error \(code)")
            }
        }
        return reasons
    }
}

/// Initialises OpenSSL once, without its configuration file, before the first call into it.
/// Every entry point that calls OpenSSL touches `openSSLReady` first.
let openSSLReady: Bool = COpenSSL_init_without_config() == 1

/// AES-256-GCM fetched once from the default provider. OpenSSL 3 fetches implicitly on every
/// `EVP_aes_256_gcm()` initialisation otherwise, which costs more than sealing a small record.
/// Fetched algorithm objects are immutable and safe to share between threads; this one lives
/// for the process.
nonisolated(unsafe) let fetchedAES256GCM: OpaquePointer? = {
    _ = openSSLReady
    return EVP_CIPHER_fetch(nil, "AES-256-GCM", nil)
}()
