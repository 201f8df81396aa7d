import FoundationEssentials
import Keysmith
import KeysmithCrypto

/// The vault header (docs/format.md, "The header"): JSON body, then a SHA-256 line.
struct VaultHeader: Codable, Sendable {
    struct KDF: Codable, Sendable {
        /// `scrypt` or `keyfile`.
        var type: String
        var n: UInt64?
        var r: UInt64?
        var p: UInt64?
        var salt: String
    }

    struct WrappedKey: Codable, Sendable {
        var epoch: UInt32
        var nonce: String
        var ciphertext: String
        var tag: String
    }

    var format: String
    var version: Int
    var vaultId: String
    var created: String
    var kdf: KDF
    var idKey: WrappedKey
    var dataKeys: [WrappedKey]

    static let formatName = "keysmith-vault"
    static let primaryName = "header"
    static let backupName = "header.backup"

    func encode() throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        let body = Array(try encoder.encode(self))
        return body + Array("\nsha256=\(SHA256.hash(body).hexString)\n".utf8)
    }

    enum ParseFailure: Error {
        case damaged(String)
        case unsupported(String)
    }

    static func parse(_ bytes: [UInt8]) throws(ParseFailure) -> VaultHeader {
        // BODY ‖ "\nsha256=" ‖ 64 hex ‖ "\n"
        let suffixLength = 8 + 64 + 1
        guard bytes.count > suffixLength else { throw .damaged("it is too short") }
        let body = Array(bytes[0..<(bytes.count - suffixLength)])
        let suffix = String(decoding: bytes[(bytes.count - suffixLength)...], as: UTF8.self)
        guard suffix == "\nsha256=\(SHA256.hash(body).hexString)\n" else {
            throw .damaged("its checksum does not match its contents")
        }
        let header: VaultHeader
        do {
            header = try JSONDecoder().decode(VaultHeader.self, from: Data(body))
        } catch {
            throw .damaged("it is not a valid header document")
        }
        guard header.format == formatName else { throw .damaged("its format is not \(formatName)") }
        guard header.version == Int(Format.version) else {
            throw .unsupported("it is format version \(header.version); this Keysmith reads version \(Format.version)")
        }
        guard let id = [UInt8](hex: header.vaultId), id.count == Format.vaultIDSize else {
            throw .damaged("its vault id is not 32 hex digits")
        }
        guard !header.dataKeys.isEmpty else { throw .damaged("it holds no data key") }
        return header
    }

    var vaultIDBytes: [UInt8] { [UInt8](hex: vaultId) ?? [] }

    static func keyWrapAD(vaultID: [UInt8], purpose: UInt8, epoch: UInt32) -> [UInt8] {
        var writer = ByteWriter()
        writer.append(Format.keyWrapADLabel)
        writer.append(vaultID)
        writer.append(purpose)
        writer.append(epoch)
        return writer.bytes
    }

    static func wrap(_ key: SecretBytes, with kek: SecretBytes, vaultID: [UInt8], purpose: UInt8, epoch: UInt32) throws -> WrappedKey {
        var plain = key.copyBytes()
        defer { cleanse(&plain) }
        let sealed = try AESGCM.seal(plain, key: kek, associatedData: keyWrapAD(vaultID: vaultID, purpose: purpose, epoch: epoch))
        return WrappedKey(
            epoch: epoch, nonce: Data(sealed.nonce).base64EncodedString(),
            ciphertext: Data(sealed.ciphertext).base64EncodedString(), tag: Data(sealed.tag).base64EncodedString())
    }

    enum UnwrapFailure: Error {
        case malformed
        case authentication
    }

    static func unwrap(_ wrapped: WrappedKey, with kek: SecretBytes, vaultID: [UInt8], purpose: UInt8) throws(UnwrapFailure) -> SecretBytes {
        guard let nonce = Data(base64Encoded: wrapped.nonce), let ciphertext = Data(base64Encoded: wrapped.ciphertext),
              let tag = Data(base64Encoded: wrapped.tag), nonce.count == 12, ciphertext.count == 32, tag.count == 16
        else { throw .malformed }
        do {
            var plain = try AESGCM.open(
                ciphertext: Array(ciphertext), tag: Array(tag), key: kek, nonce: Array(nonce),
                associatedData: keyWrapAD(vaultID: vaultID, purpose: purpose, epoch: wrapped.epoch))
            return SecretBytes(takingOwnershipOf: &plain)
        } catch {
            throw .authentication
        }
    }
}

