import FoundationEssentials
import Keysmith
import KeysmithCredentials
import KeysmithCrypto
import KeysmithSystem

/// The header of format 2 (docs/format.md, "The header (format 2)"): a JSON body, a MAC line
/// under a key derived from the credential, and a SHA-256 line that tells accidental damage
/// from a wrong credential.
struct VaultHeader: Codable, Sendable {
    var format: String
    var version: Int
    var vaultId: String
    var created: String
    /// Incremented by every header write; the primary copy is written first.
    var generation: UInt64
    var kdf: HeaderKDF
    var idKey: WrappedKey
    var dataKeys: [WrappedKey]
    /// The epoch new records are sealed under.
    var currentEpoch: UInt32

    var vaultIDBytes: [UInt8] { [UInt8](hex: vaultId) ?? [] }

    /// Encodes the header, authenticated under `kek`.
    func encode(kek: SecretBytes) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        let body = Array(try encoder.encode(self))
        let withMAC = body + Array("\nmac=\(Self.mac(body, kek: kek).hexString)".utf8)
        return withMAC + Array("\nsha256=\(SHA256.hash(withMAC).hexString)\n".utf8)
    }

    static func mac(_ body: [UInt8], kek: SecretBytes) -> [UInt8] {
        let key = SecretBytes(copying: SHA256.hmac(key: kek, Format.headerMACLabel))
        return SHA256.hmac(key: key, body)
    }

    /// The canonical text of the KDF parameters that the key wraps bind.
    static func kdfDescriptor(_ kdf: HeaderKDF) -> [UInt8] {
        Array("\(kdf.type)|\(kdf.n ?? 0)|\(kdf.r ?? 0)|\(kdf.p ?? 0)|\(kdf.salt)".utf8)
    }

    static func keyWrapAD(vaultID: [UInt8], kdf: HeaderKDF, purpose: UInt8, epoch: UInt32) -> [UInt8] {
        var writer = ByteWriter()
        writer.append(Format.keyWrapLabel)
        writer.append(vaultID)
        writer.append(purpose)
        writer.append(epoch)
        writer.appendField(kdfDescriptor(kdf))
        return writer.bytes
    }

    static func wrap(_ key: SecretBytes, kek: SecretBytes, vaultID: [UInt8], kdf: HeaderKDF, purpose: UInt8, epoch: UInt32) throws -> WrappedKey {
        var plain = key.copyBytes()
        defer { cleanse(&plain) }
        let sealed = try keysmithCrypto {
            try AESGCM.seal(plain, key: kek, associatedData: keyWrapAD(vaultID: vaultID, kdf: kdf, purpose: purpose, epoch: epoch))
        }
        return WrappedKey(
            epoch: epoch, nonce: Data(sealed.nonce).base64EncodedString(),
            ciphertext: Data(sealed.ciphertext).base64EncodedString(), tag: Data(sealed.tag).base64EncodedString())
    }

    static func unwrap(_ wrapped: WrappedKey, kek: SecretBytes, vaultID: [UInt8], kdf: HeaderKDF, purpose: UInt8) -> SecretBytes? {
        guard let nonce = Data(base64Encoded: wrapped.nonce), let ciphertext = Data(base64Encoded: wrapped.ciphertext),
              let tag = Data(base64Encoded: wrapped.tag), nonce.count == 12, ciphertext.count == 32, tag.count == 16,
              var plain = try? AESGCM.open(
                  ciphertext: Array(ciphertext), tag: Array(tag), key: kek, nonce: Array(nonce),
                  associatedData: keyWrapAD(vaultID: vaultID, kdf: kdf, purpose: purpose, epoch: wrapped.epoch))
        else { return nil }
        return SecretBytes(takingOwnershipOf: &plain)
    }
}

/// A header copy as found on disk, before the credential is applied.
struct HeaderCopy {
    let header: VaultHeader
    /// The JSON body the MAC covers.
    let body: [UInt8]
    let mac: [UInt8]
    /// The exact file bytes, to notice when another process rewrote the header.
    let bytes: [UInt8]
}

/// The format version a header file declares, after its checksum is verified.
enum HeaderProbe {
    case version1
    case version2(HeaderCopy)
    case damaged(String)
    case unsupported(Int)
}

enum HeaderFormat {
    /// The `format` field of every header, both versions.
    static let formatName = "keysmith-vault"
    /// A vault id's length in bytes, both versions (32 hex digits in the header).
    static let vaultIDSize = 16
    /// The header copy's file name in the vault directory, both versions.
    static let primaryName = "header"
    /// The second copy's file name.
    static let backupName = "header.backup"

    private struct Peek: Decodable {
        var format: String
        var version: Int
    }

    /// Reads a header copy with every bound checked: a regular file (no link, FIFO or device),
    /// at most 64 KiB. `nil` when it is missing.
    static func readCopy(_ path: String) throws -> [UInt8]? {
        guard let (fd, _) = try System.openRegularFile(path, maximumSize: Format.maximumHeaderSize) else { return nil }
        defer { System.close(fd) }
        return try System.readAll(fd, path: path)
    }

    /// What the two copies of a vault's header say, the primary first: the first copy that
    /// can be read and classified (format 1, format 2, or an unsupported version) is in force;
    /// a missing, unreadable or damaged copy is skipped and named in `problems`.
    struct InForce {
        var probe: HeaderProbe?
        var problems: [String]
        /// Whether either copy exists at all.
        var found: Bool
        /// The copies the system would not let be read (permission denied, an I/O error): not
        /// damage, and never reported as damage.
        var unreadable: [SystemError] = []
    }

    /// What can still be read of a damaged copy: its generation and salt, if its body parses.
    private struct Remnant: Decodable {
        struct KDF: Decodable { var salt: String }
        var generation: UInt64
        var kdf: KDF
    }

    static func inForce(_ root: String) -> InForce {
        var result = InForce(probe: nil, problems: [], found: false)
        var damagedPrimary: Remnant?
        for name in [HeaderFormat.primaryName, HeaderFormat.backupName] {
            let bytes: [UInt8]?
            do {
                bytes = try readCopy(root + "/" + name)
            } catch {
                result.found = true
                result.problems.append("\(name): \(error)")
                if let error = error as? SystemError, !error.isUnusableFile { result.unreadable.append(error) }
                continue
            }
            guard let bytes else {
                result.problems.append("\(name): missing")
                continue
            }
            result.found = true
            let probe = probe(bytes)
            if case .damaged(let why) = probe {
                result.problems.append("\(name): \(why)")
                if name == HeaderFormat.primaryName { damagedPrimary = remnant(of: bytes) }
                continue
            }
            // A backup older than the damaged primary, under another salt: a credential change
            // was interrupted between its two renames and the primary was damaged since. The
            // backup holds the retired credential, which must not open the vault again.
            if case .version2(let copy) = probe, let damagedPrimary, damagedPrimary.generation > copy.header.generation,
               damagedPrimary.kdf.salt != copy.header.kdf.salt
            {
                result.problems.append(
                    "\(name): it is older (generation \(copy.header.generation)) than the damaged primary (generation "
                        + "\(damagedPrimary.generation)) and holds the credential that the primary replaced: the change was interrupted, "
                        + "and the retired credential must not open the vault; restore the header from a backup")
                return result
            }
            result.probe = probe
            return result
        }
        return result
    }

    /// The generation and salt of a copy whose checksum fails, when its body still parses.
    private static func remnant(of bytes: [UInt8]) -> Remnant? {
        let marker = Array("\nmac=".utf8)
        guard bytes.count > marker.count,
              let end = (0...(bytes.count - marker.count)).first(where: { bytes[$0..<($0 + marker.count)].elementsEqual(marker) })
        else { return nil }
        return try? JSONDecoder().decode(Remnant.self, from: Data(bytes[0..<end]))
    }

    /// Classifies header bytes: their checksum, then the version they declare; a format-2
    /// header is parsed and every field bounded (the MAC is checked later, with the credential).
    static func probe(_ bytes: [UInt8]) -> HeaderProbe {
        let shaLine = 8 + 64 + 1
        guard bytes.count > shaLine else { return .damaged("it is too short") }
        let covered = Array(bytes[0..<(bytes.count - shaLine)])
        guard String(decoding: bytes[(bytes.count - shaLine)...], as: UTF8.self) == "\nsha256=\(SHA256.hash(covered).hexString)\n" else {
            return .damaged("its checksum does not match its contents")
        }
        let macLine = 5 + 64
        var body = covered
        var mac: [UInt8]?
        if covered.count > macLine, String(decoding: covered[(covered.count - macLine)..<(covered.count - 64)], as: UTF8.self) == "\nmac=" {
            body = Array(covered[0..<(covered.count - macLine)])
            mac = [UInt8](hex: String(decoding: covered[(covered.count - 64)...], as: UTF8.self))
        }
        // The usual case in one decode: a format-2 document. Anything else is peeked at for
        // the version it declares.
        if let mac, mac.count == 32, let header = try? JSONDecoder().decode(VaultHeader.self, from: Data(body)),
           header.format == HeaderFormat.formatName, header.version == 2
        {
            if let problem = boundsProblem(header) { return .damaged(problem) }
            return .version2(HeaderCopy(header: header, body: body, mac: mac, bytes: bytes))
        }
        guard let peek = try? JSONDecoder().decode(Peek.self, from: Data(body)), peek.format == HeaderFormat.formatName else {
            return .damaged("it is not a valid header document")
        }
        switch peek.version {
        case 1:
            return mac == nil ? .version1 : .damaged("a format 1 header carries a MAC line")
        case 2:
            // With its MAC line, a format-2 document that decodes was taken above: this one does not.
            guard mac?.count == 32 else { return .damaged("a format 2 header has no MAC line") }
            return .damaged("it is not a valid format 2 header document")
        default:
            return .unsupported(peek.version)
        }
    }

    /// Every bound of a format-2 header that can be checked without the credential.
    static func boundsProblem(_ header: VaultHeader) -> String? {
        guard header.vaultIDBytes.count == HeaderFormat.vaultIDSize else { return "its vault id is not 32 hex digits" }
        guard (1...Format.maximumDataKeys).contains(header.dataKeys.count) else {
            return "it holds \(header.dataKeys.count) data keys (1 to \(Format.maximumDataKeys) allowed)"
        }
        guard Set(header.dataKeys.map(\.epoch)).count == header.dataKeys.count,
              header.dataKeys.allSatisfy({ $0.epoch >= 1 && $0.epoch < Format.maximumEpoch }),
              header.dataKeys.contains(where: { $0.epoch == header.currentEpoch })
        else { return "its data key epochs are invalid or do not include the current epoch \(header.currentEpoch)" }
        return kdfProblem(header.kdf)
    }

    /// The KDF bounds: refused before any derivation, so an edited header cannot make an
    /// unlock cost gigabytes or hours.
    static func kdfProblem(_ kdf: HeaderKDF) -> String? {
        guard let salt = Data(base64Encoded: kdf.salt), salt.count == Format.saltSize else {
            return "its KDF salt is not \(Format.saltSize) bytes"
        }
        switch kdf.type {
        case "scrypt":
            guard let n = kdf.n, let r = kdf.r, let p = kdf.p, ScryptParameters(n: n, r: r, p: p).isWithinBounds else {
                return "its scrypt parameters N=\(kdf.n.map(String.init) ?? "-") r=\(kdf.r.map(String.init) ?? "-") "
                    + "p=\(kdf.p.map(String.init) ?? "-") are outside the allowed bounds (N a power of two from 2^14 to 2^20, r=8, p 1...4)"
            }
            return nil
        case "keyfile":
            return kdf.n == nil && kdf.r == nil && kdf.p == nil ? nil : "its keyfile KDF carries scrypt parameters"
        default:
            return "it names an unknown key derivation `\(kdf.type)`"
        }
    }

    /// Derives the key-encryption key of a format-2 header (bounds already checked).
    static func deriveKEK(_ kdf: HeaderKDF, credential: VaultCredential) throws -> SecretBytes {
        guard let salt = Data(base64Encoded: kdf.salt).map(Array.init), salt.count == Format.saltSize else {
            throw KeysmithError(.corruptData, "the vault header's KDF salt is malformed")
        }
        switch (kdf.type, credential.source) {
        case ("scrypt", .passphrase(let passphrase)):
            guard let n = kdf.n, let r = kdf.r, let p = kdf.p else {
                throw KeysmithError(.corruptData, "the vault header's scrypt parameters are missing")
            }
            return try keysmithCrypto { try Scrypt.derive(passphrase: passphrase, salt: salt, n: n, r: r, p: p, length: 32) }
        case ("keyfile", .keyfile), ("keyfile", .key):
            let key = try credential.keyMaterial()
            return SecretBytes(copying: SHA256.hmac(key: key, Format.keyfileKEKLabel + salt))
        case ("scrypt", _):
            throw KeysmithError(.authenticationFailed, "this vault is unlocked by a passphrase, not a keyfile")
        default:
            throw KeysmithError(.authenticationFailed, "this vault is unlocked by a keyfile, not a passphrase")
        }
    }
}

/// A format-2 header opened with a credential: every key unwrapped.
struct UnlockedHeader {
    var copy: HeaderCopy
    var kek: SecretBytes
    var idKey: SecretBytes
    var epochs: [UInt32: EpochKeys]
    /// The data keys themselves, to re-wrap them on a credential change.
    var dataKeys: [UInt32: SecretBytes]

    /// Checks the MAC and unwraps every key.
    ///
    /// - Throws: `.authenticationFailed` when the MAC does not verify (a wrong credential, or
    ///   a header altered by someone without it: the two cannot be told apart).
    static func unlock(_ copy: HeaderCopy, kek: SecretBytes, credential: VaultCredential?) throws -> UnlockedHeader {
        guard constantTimeEqual(VaultHeader.mac(copy.body, kek: kek), copy.mac) else {
            let what = credential.map { $0.isPassphrase ? "wrong passphrase for this vault" : "the key in \($0) does not unlock this vault" }
                ?? "the key this handle holds does not unlock the vault"
            throw KeysmithError(.authenticationFailed, what + " (or its header was altered)")
        }
        let header = copy.header
        let vaultID = header.vaultIDBytes
        guard let idKey = VaultHeader.unwrap(header.idKey, kek: kek, vaultID: vaultID, kdf: header.kdf, purpose: KeyPurpose.id),
              header.idKey.epoch == 0
        else { throw KeysmithError(.corruptData, "the vault header's id key does not unwrap") }
        var epochs: [UInt32: EpochKeys] = [:]
        var dataKeys: [UInt32: SecretBytes] = [:]
        for wrapped in header.dataKeys {
            guard let key = VaultHeader.unwrap(wrapped, kek: kek, vaultID: vaultID, kdf: header.kdf, purpose: KeyPurpose.data) else {
                throw KeysmithError(.corruptData, "the vault header's data key of epoch \(wrapped.epoch) does not unwrap")
            }
            dataKeys[wrapped.epoch] = key
            epochs[wrapped.epoch] = EpochKeys(epoch: wrapped.epoch, dataKey: key)
        }
        return UnlockedHeader(copy: copy, kek: kek, idKey: idKey, epochs: epochs, dataKeys: dataKeys)
    }
}
