@testable import KeysmithCrypto
import Testing

func hex(_ text: String) -> [UInt8] {
    var bytes: [UInt8] = []
    var index = text.startIndex
    while index < text.endIndex {
        let next = text.index(index, offsetBy: 2)
        bytes.append(UInt8(text[index..<next], radix: 16)!)
        index = next
    }
    return bytes
}

@Suite("OpenSSL wrappers")
struct CryptoTests {
    // The GCM specification's test case 16 (AES-256, 96-bit IV, associated data).
    static let key = SecretBytes(copying: hex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308"))
    static let nonce = hex("cafebabefacedbaddecaf888")
    static let plaintext = hex(
        "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39")
    static let aad = hex("feedfacedeadbeeffeedfacedeadbeefabaddad2")
    static let ciphertext = hex(
        "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662")
    static let tag = hex("76fc6ece0f4e1768cddf8853bb2d551b")

    @Test("AES-256-GCM matches the GCM specification's test case 16")
    func gcmVector() throws {
        let sealed = try AESGCM.seal(Self.plaintext, key: Self.key, nonce: Self.nonce, associatedData: Self.aad)
        #expect(sealed.ciphertext == Self.ciphertext)
        #expect(sealed.tag == Self.tag)
        let opened = try AESGCM.open(
            ciphertext: Self.ciphertext, tag: Self.tag, key: Self.key, nonce: Self.nonce, associatedData: Self.aad)
        #expect(opened == Self.plaintext)
    }

    @Test("a changed byte of ciphertext, tag, nonce or associated data fails authentication")
    func gcmTamper() throws {
        func opens(_ ciphertext: [UInt8], _ tag: [UInt8], _ nonce: [UInt8], _ aad: [UInt8]) -> Bool {
            (try? AESGCM.open(ciphertext: ciphertext, tag: tag, key: Self.key, nonce: nonce, associatedData: aad)) != nil
        }
        var c = Self.ciphertext; c[5] ^= 1
        var t = Self.tag; t[15] ^= 0x80
        var n = Self.nonce; n[0] ^= 1
        var a = Self.aad; a[19] ^= 4
        #expect(opens(Self.ciphertext, Self.tag, Self.nonce, Self.aad))
        #expect(!opens(c, Self.tag, Self.nonce, Self.aad))
        #expect(!opens(Self.ciphertext, t, Self.nonce, Self.aad))
        #expect(!opens(Self.ciphertext, Self.tag, n, Self.aad))
        #expect(!opens(Self.ciphertext, Self.tag, Self.nonce, a))
        let wrongKey = SecretBytes(copying: [UInt8](repeating: 7, count: 32))
        let error = #expect(throws: CryptoError.self) {
            try AESGCM.open(ciphertext: Self.ciphertext, tag: Self.tag, key: wrongKey, nonce: Self.nonce, associatedData: Self.aad)
        }
        #expect(error?.kind == .authenticationFailed)
    }

    @Test("every seal without a nonce draws a fresh random one")
    func freshNonces() throws {
        let nonces = try (0..<64).map { _ in try AESGCM.seal([1, 2, 3], key: Self.key, associatedData: []).nonce }
        #expect(Set(nonces).count == 64)
        #expect(nonces.allSatisfy { $0.count == 12 })
    }

    @Test("an empty plaintext seals and opens")
    func emptyPlaintext() throws {
        let sealed = try AESGCM.seal([], key: Self.key, associatedData: [9])
        #expect(sealed.ciphertext.isEmpty)
        #expect(try AESGCM.open(ciphertext: [], tag: sealed.tag, key: Self.key, nonce: sealed.nonce, associatedData: [9]) == [])
    }

    @Test("scrypt matches RFC 7914's test vector")
    func scryptVector() throws {
        let derived = try Scrypt.derive(
            passphrase: SecretBytes(copying: Array("password".utf8)), salt: Array("NaCl".utf8),
            n: 1024, r: 8, p: 16, length: 64)
        let expected = hex(
            "fdbabe1c9d3472007856e7190d01e9fe7c6ad7cbc8237830e77376634b3731622eaf30d92e22a3886ff109279d9830dac727afb94a83ee6d8360cbdfa2cc0640")
        #expect(derived.copyBytes() == expected)
        #expect(throws: CryptoError.self) {
            try Scrypt.derive(passphrase: SecretBytes(copying: []), salt: [], n: 1000, r: 8, p: 1, length: 32)
        }
    }

    @Test("SHA-256 and HMAC-SHA-256 match their standard vectors")
    func digests() {
        #expect(SHA256.hash(Array("abc".utf8)) == hex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"))
        // RFC 4231 test case 2.
        let mac = SHA256.hmac(key: SecretBytes(copying: Array("Jefe".utf8)), Array("what do ya want for nothing?".utf8))
        #expect(mac == hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"))
    }

    @Test("a keyed HMAC context gives RFC 4231's MAC, the same for parts as for the whole, again and again")
    func keyedHMAC() throws {
        let key = try HMACSHA256Key(SecretBytes(copying: Array("Jefe".utf8)))
        let expected = hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        for _ in 0..<3 {
            #expect(key.mac(Array("what do ya want for nothing?".utf8)) == expected)
            #expect(key.mac(Array("what do ya ".utf8), [], Array("want for nothing?".utf8)) == expected)
        }
        // Another message under the same key agrees with the one-shot HMAC; and another key differs.
        let other = Array("a different message".utf8)
        #expect(key.mac(other) == SHA256.hmac(key: SecretBytes(copying: Array("Jefe".utf8)), other))
        #expect(try HMACSHA256Key(SecretBytes(copying: Array("Jeff".utf8))).mac(other) != key.mac(other))
    }

    @Test("a keyed GCM context matches test case 16, and keeps working after a failed open")
    func gcmContextReuse() throws {
        let context = try AESGCM.Context(key: Self.key)
        for _ in 0..<3 {
            let sealed = try context.seal(Self.plaintext, nonce: Self.nonce, associatedData: Self.aad)
            #expect(sealed.ciphertext == Self.ciphertext)
            #expect(sealed.tag == Self.tag)
            var badTag = Self.tag
            badTag[0] ^= 1
            #expect(throws: CryptoError.self) {
                try context.open(ciphertext: Self.ciphertext, tag: badTag, nonce: Self.nonce, associatedData: Self.aad)
            }
            #expect(try context.open(ciphertext: Self.ciphertext, tag: Self.tag, nonce: Self.nonce, associatedData: Self.aad) == Self.plaintext)
        }
        // Fresh nonces by default, and what one context seals another opens.
        let first = try context.seal([1, 2, 3], associatedData: [])
        let second = try context.seal([1, 2, 3], associatedData: [])
        #expect(first.nonce != second.nonce)
        #expect(try AESGCM.Context(key: Self.key).open(ciphertext: first.ciphertext, tag: first.tag, nonce: first.nonce, associatedData: []) == [1, 2, 3])
        #expect(throws: CryptoError.self) { try AESGCM.Context(key: SecretBytes(copying: [1, 2, 3])) }
    }

    @Test("secret bytes print redacted and compare by content")
    func secretBytes() throws {
        var raw: [UInt8] = [1, 2, 3]
        let secret = SecretBytes(takingOwnershipOf: &raw)
        #expect(raw == [0, 0, 0])
        #expect("\(secret)" == "<redacted>")
        #expect(secret == SecretBytes(copying: [1, 2, 3]))
        #expect(secret != SecretBytes(copying: [1, 2, 4]))
        #expect(try SecretBytes.random(count: 32).count == 32)
    }
}
