internal import COpenSSL
import Synchronization

/// SHA-256 and HMAC-SHA-256 through OpenSSL.
package enum SHA256 {
    /// The digest size in bytes.
    package static let size = 32

    /// The SHA-256 digest of `data`. The corresponding C function is `EVP_Digest`.
    package static func hash(_ data: [UInt8]) -> [UInt8] {
        _ = openSSLReady
        var digest = [UInt8](repeating: 0, count: size)
        var length: UInt32 = 0
        let ok = data.withUnsafeBufferPointer { input in
            digest.withUnsafeMutableBufferPointer { output in
                EVP_Digest(input.baseAddress, input.count, output.baseAddress, &length, EVP_sha256(), nil)
            }
        }
        // EVP_Digest with a built-in digest fails only when out of memory.
        precondition(ok == 1 && length == UInt32(size), "OpenSSL EVP_Digest(SHA-256) failed")
        return digest
    }

    /// HMAC-SHA-256 of `data` under `key`. The corresponding C function is `HMAC`.
    package static func hmac(key: SecretBytes, _ data: [UInt8]) -> [UInt8] {
        _ = openSSLReady
        var mac = [UInt8](repeating: 0, count: size)
        var length: UInt32 = 0
        let result = key.withUnsafeBytes { keyBytes in
            data.withUnsafeBufferPointer { input in
                mac.withUnsafeMutableBufferPointer { output in
                    HMAC(EVP_sha256(), keyBytes.baseAddress, Int32(keyBytes.count),
                         input.baseAddress, input.count, output.baseAddress, &length)
                }
            }
        }
        precondition(result != nil && length == UInt32(size), "OpenSSL HMAC(SHA-256) failed")
        return mac
    }
}

/// HMAC-SHA-256 under one key for many messages: the key is set up once, so each MAC costs
/// only its hashing (a vault computes one per record it names). Safe to share between threads.
///
/// ```swift
/// let key = try HMACSHA256Key(secret)
/// let mac = key.mac(label, message)   // HMAC(secret, label ‖ message)
/// ```
package final class HMACSHA256Key: @unchecked Sendable {
    /// The keyed EVP_MAC context, never updated: each MAC works on a copy (made under `lock`).
    private let context: OpaquePointer
    private let lock = Mutex(())

    /// Sets up the key. Throws ``CryptoError`` when OpenSSL cannot (out of memory).
    package init(_ key: SecretBytes) throws {
        _ = openSSLReady
        let made = key.withUnsafeBytes { bytes in
            COpenSSL_hmac_sha256_new(bytes.bindMemory(to: UInt8.self).baseAddress, bytes.count)
        }
        guard let made else { throw CryptoError.library("EVP_MAC_CTX_new(HMAC)") }
        context = made
    }

    deinit { EVP_MAC_CTX_free(context) }  // frees and wipes the keyed state

    /// HMAC-SHA-256 of the parts one after another (no copy joins them).
    package func mac(_ parts: [UInt8]...) -> [UInt8] {
        var mac = [UInt8](repeating: 0, count: SHA256.size)
        var length = 0
        // Each MAC works on a copy of the keyed context: re-initialising one with a NULL key
        // does not reset it before OpenSSL 3.0.3, and a copy is correct on every version.
        guard let working = lock.withLock({ _ in EVP_MAC_CTX_dup(context) }) else {
            preconditionFailure("OpenSSL EVP_MAC_CTX_dup failed (out of memory)")
        }
        defer { EVP_MAC_CTX_free(working) }
        var ok = true
        for part in parts where ok {
            ok = part.withUnsafeBufferPointer { EVP_MAC_update(working, $0.baseAddress, $0.count) } == 1
        }
        ok = ok && mac.withUnsafeMutableBufferPointer { EVP_MAC_final(working, $0.baseAddress, &length, $0.count) } == 1
        // As for `SHA256.hmac`: with a built-in digest this fails only when out of memory.
        precondition(ok && length == SHA256.size, "OpenSSL EVP_MAC(HMAC-SHA-256) failed")
        return mac
    }
}

/// The scrypt password-based key derivation function (RFC 7914) through OpenSSL.
package enum Scrypt {
    /// Derives `length` bytes from a passphrase.
    ///
    /// - Parameters:
    ///   - passphrase: The passphrase bytes.
    ///   - salt: A random salt.
    ///   - n: The CPU/memory cost, a power of two.
    ///   - r: The block size.
    ///   - p: The parallelism.
    ///   - length: How many bytes to derive.
    /// - Returns: The derived key, wiped when released.
    /// - Throws: ``CryptoError`` when OpenSSL refuses the parameters.
    ///
    /// The corresponding C function is `EVP_PBE_scrypt`.
    package static func derive(
        passphrase: SecretBytes, salt: [UInt8], n: UInt64, r: UInt64, p: UInt64, length: Int
    ) throws -> SecretBytes {
        _ = openSSLReady
        guard n > 1, n & (n - 1) == 0 else { throw CryptoError.invalidArgument("scrypt N must be a power of two above 1") }
        // scrypt needs 128·r·N bytes (plus 128·r·p); allow that with room to spare.
        let needed = 128 * r * (n + p + 2)
        var output = [UInt8](repeating: 0, count: length)
        let ok = passphrase.withUnsafeBytes { pass in
            salt.withUnsafeBufferPointer { saltBytes in
                output.withUnsafeMutableBufferPointer { out in
                    EVP_PBE_scrypt(
                        pass.baseAddress?.assumingMemoryBound(to: CChar.self), pass.count,
                        saltBytes.baseAddress, saltBytes.count, n, r, p, needed + (1 << 20),
                        out.baseAddress, length)
                }
            }
        }
        guard ok == 1 else {
            cleanse(&output)
            throw CryptoError.library("EVP_PBE_scrypt")
        }
        return SecretBytes(takingOwnershipOf: &output)
    }
}

/// The linked OpenSSL's version text, such as `OpenSSL 3.0.19 27 Jan 2026`.
package var openSSLVersion: String { String(cString: COpenSSL_version_text()) }
