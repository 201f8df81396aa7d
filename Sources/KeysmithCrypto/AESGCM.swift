internal import COpenSSL

/// AES-256-GCM through OpenSSL EVP, with 96-bit nonces and 128-bit tags.
package enum AESGCM {
    /// Key size in bytes.
    package static let keySize = 32
    /// Nonce size in bytes (96 bits).
    package static let nonceSize = 12
    /// Tag size in bytes (128 bits).
    package static let tagSize = 16

    /// Encrypts and authenticates.
    ///
    /// - Parameters:
    ///   - plaintext: The bytes to encrypt.
    ///   - key: A 32-byte key.
    ///   - nonce: A 12-byte nonce, never reused with the same key; a fresh random one if `nil`.
    ///   - associatedData: Bytes authenticated but not encrypted.
    /// - Returns: The nonce, the ciphertext (as long as the plaintext) and the tag.
    package static func seal(
        _ plaintext: [UInt8], key: SecretBytes, nonce: [UInt8]? = nil, associatedData: [UInt8]
    ) throws -> (nonce: [UInt8], ciphertext: [UInt8], tag: [UInt8]) {
        try Context(key: key).seal(plaintext, nonce: nonce, associatedData: associatedData)
    }

    /// Verifies and decrypts.
    ///
    /// - Returns: The plaintext; the caller wipes it with ``cleanse(_:)`` after use.
    /// - Throws: ``CryptoError`` of kind `.authenticationFailed` when the key is wrong or any
    ///   byte of the nonce, ciphertext, tag or associated data changed.
    package static func open(
        ciphertext: [UInt8], tag: [UInt8], key: SecretBytes, nonce: [UInt8], associatedData: [UInt8]
    ) throws -> [UInt8] {
        try Context(key: key).open(ciphertext: ciphertext, tag: tag, nonce: nonce, associatedData: associatedData)
    }

    /// AES-256-GCM under one key for many messages: the key schedule is set up once, and each
    /// message only sets its nonce (a vault seals or opens one record after another). Not for
    /// concurrent use: one context per thread.
    ///
    /// ```swift
    /// let context = try AESGCM.Context(key: key)
    /// let sealed = try context.seal(record, associatedData: ad)
    /// let opened = try context.open(ciphertext: sealed.ciphertext, tag: sealed.tag, nonce: sealed.nonce, associatedData: ad)
    /// ```
    package final class Context {
        /// The EVP context with the key set; freed (and wiped by OpenSSL) with this object.
        private let context: OpaquePointer

        /// Sets up the key. Throws ``CryptoError`` for a key that is not 32 bytes.
        package init(key: SecretBytes) throws {
            _ = openSSLReady
            guard key.count == keySize else { throw CryptoError.invalidArgument("an AES-256 key is \(keySize) bytes") }
            guard let made = EVP_CIPHER_CTX_new() else { throw CryptoError.library("EVP_CIPHER_CTX_new") }
            context = made
            guard EVP_CipherInit_ex(context, fetchedAES256GCM ?? EVP_aes_256_gcm(), nil, nil, nil, 1) == 1 else {
                throw CryptoError.library("EVP_CipherInit_ex")
            }
            guard EVP_CIPHER_CTX_ctrl(context, COpenSSL_EVP_CTRL_GCM_SET_IVLEN(), Int32(nonceSize), nil) == 1 else {
                throw CryptoError.library("EVP_CTRL_GCM_SET_IVLEN")
            }
            let keyed = key.withUnsafeBytes { keyBytes in
                EVP_CipherInit_ex(context, nil, nil, keyBytes.bindMemory(to: UInt8.self).baseAddress, nil, 1)
            }
            guard keyed == 1 else { throw CryptoError.library("EVP_CipherInit_ex (key)") }
        }

        deinit { EVP_CIPHER_CTX_free(context) }

        /// ``AESGCM/seal(_:key:nonce:associatedData:)`` under this context's key.
        package func seal(
            _ plaintext: [UInt8], nonce: [UInt8]? = nil, associatedData: [UInt8]
        ) throws -> (nonce: [UInt8], ciphertext: [UInt8], tag: [UInt8]) {
            let nonce = try nonce ?? Random.bytes(count: nonceSize)
            guard nonce.count == nonceSize else { throw CryptoError.invalidArgument("a GCM nonce is \(nonceSize) bytes") }
            var ciphertext = [UInt8](repeating: 0, count: plaintext.count)
            var tag = [UInt8](repeating: 0, count: tagSize)
            try run(encrypt: true, nonce: nonce, associatedData: associatedData, input: plaintext, output: &ciphertext, tag: &tag)
            return (nonce, ciphertext, tag)
        }

        /// ``AESGCM/open(ciphertext:tag:key:nonce:associatedData:)`` under this context's key.
        package func open(ciphertext: [UInt8], tag: [UInt8], nonce: [UInt8], associatedData: [UInt8]) throws -> [UInt8] {
            guard nonce.count == nonceSize else { throw CryptoError.invalidArgument("a GCM nonce is \(nonceSize) bytes") }
            guard tag.count == tagSize else { throw CryptoError.invalidArgument("a GCM tag is \(tagSize) bytes") }
            var plaintext = [UInt8](repeating: 0, count: ciphertext.count)
            var tag = tag
            do {
                try run(encrypt: false, nonce: nonce, associatedData: associatedData, input: ciphertext, output: &plaintext, tag: &tag)
            } catch {
                cleanse(&plaintext)
                throw error
            }
            return plaintext
        }

        /// The one place with pointer code for GCM: a new nonce and direction on the keyed
        /// context, then the associated data, the message and the tag.
        private func run(
            encrypt: Bool, nonce: [UInt8], associatedData: [UInt8], input: [UInt8], output: inout [UInt8], tag: inout [UInt8]
        ) throws {
            let direction: Int32 = encrypt ? 1 : 0
            let started = nonce.withUnsafeBufferPointer { EVP_CipherInit_ex(context, nil, nil, nil, $0.baseAddress, direction) }
            guard started == 1 else { throw CryptoError.library("EVP_CipherInit_ex (nonce)") }
            var length: Int32 = 0
            if !associatedData.isEmpty {
                let ok = associatedData.withUnsafeBufferPointer {
                    EVP_CipherUpdate(context, nil, &length, $0.baseAddress, Int32($0.count))
                }
                guard ok == 1 else { throw CryptoError.library("EVP_CipherUpdate (associated data)") }
            }
            if !input.isEmpty {
                let ok = input.withUnsafeBufferPointer { inBytes in
                    output.withUnsafeMutableBufferPointer { outBytes in
                        EVP_CipherUpdate(context, outBytes.baseAddress, &length, inBytes.baseAddress, Int32(inBytes.count))
                    }
                }
                guard ok == 1 else { throw CryptoError.library("EVP_CipherUpdate") }
            }
            if !encrypt {
                let ok = tag.withUnsafeMutableBytes {
                    EVP_CIPHER_CTX_ctrl(context, COpenSSL_EVP_CTRL_GCM_SET_TAG(), Int32(tagSize), $0.baseAddress)
                }
                guard ok == 1 else { throw CryptoError.library("EVP_CTRL_GCM_SET_TAG") }
            }
            // GCM produces no bytes at finalisation; a scratch buffer keeps the pointer valid.
            var scratch = [UInt8](repeating: 0, count: 16)
            let finished = scratch.withUnsafeMutableBufferPointer {
                EVP_CipherFinal_ex(context, $0.baseAddress, &length)
            }
            guard finished == 1 else {
                if encrypt { throw CryptoError.library("EVP_CipherFinal_ex") }
                throw CryptoError.authenticationFailed()
            }
            if encrypt {
                let ok = tag.withUnsafeMutableBytes {
                    EVP_CIPHER_CTX_ctrl(context, COpenSSL_EVP_CTRL_GCM_GET_TAG(), Int32(tagSize), $0.baseAddress)
                }
                guard ok == 1 else { throw CryptoError.library("EVP_CTRL_GCM_GET_TAG") }
            }
        }
    }
}
