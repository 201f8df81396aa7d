import FoundationEssentials
import Keysmith
import KeysmithCredentials
import KeysmithCrypto
import KeysmithSystem

/// How a header's key-encryption key is derived from the credential (both formats): scrypt
/// over a passphrase, or an HMAC of a keyfile's key, with the header's salt.
struct HeaderKDF: Codable, Sendable {
    /// `scrypt` or `keyfile`.
    var type: String
    var n: UInt64?
    var r: UInt64?
    var p: UInt64?
    var salt: String
}

/// A key wrapped under the key-encryption key (both formats): AES-256-GCM, base64 fields.
struct WrappedKey: Codable, Sendable {
    var epoch: UInt32
    var nonce: String
    var ciphertext: String
    var tag: String
}

/// The format-1 vault header (docs/format.md, "The header"): JSON body, then a SHA-256 line.
struct VaultHeader1: Codable, Sendable {
    var format: String
    var version: Int
    var vaultId: String
    var created: String
    var kdf: HeaderKDF
    var idKey: WrappedKey
    var dataKeys: [WrappedKey]

    enum ParseFailure: Error {
        case damaged(String)
        case unsupported(String)
    }

    static func parse(_ bytes: [UInt8]) throws(ParseFailure) -> VaultHeader1 {
        // BODY ‖ "\nsha256=" ‖ 64 hex ‖ "\n"
        let suffixLength = 8 + 64 + 1
        guard bytes.count > suffixLength else { throw .damaged("it is too short") }
        let body = Array(bytes[0..<(bytes.count - suffixLength)])
        let suffix = String(decoding: bytes[(bytes.count - suffixLength)...], as: UTF8.self)
        guard suffix == "\nsha256=\(SHA256.hash(body).hexString)\n" else {
            throw .damaged("its checksum does not match its contents")
        }
        let header: VaultHeader1
        do {
            header = try JSONDecoder().decode(VaultHeader1.self, from: Data(body))
        } catch {
            throw .damaged("it is not a valid header document")
        }
        guard header.format == HeaderFormat.formatName else { throw .damaged("its format is not \(HeaderFormat.formatName)") }
        guard header.version == Int(Format1.version) else {
            throw .unsupported("it is format version \(header.version); this Keysmith reads version \(Format1.version)")
        }
        guard let id = [UInt8](hex: header.vaultId), id.count == HeaderFormat.vaultIDSize else {
            throw .damaged("its vault id is not 32 hex digits")
        }
        guard !header.dataKeys.isEmpty else { throw .damaged("it holds no data key") }
        return header
    }

    var vaultIDBytes: [UInt8] { [UInt8](hex: vaultId) ?? [] }

    static func keyWrapAD(vaultID: [UInt8], purpose: UInt8, epoch: UInt32) -> [UInt8] {
        var writer = ByteWriter()
        writer.append(Format1.keyWrapADLabel)
        writer.append(vaultID)
        writer.append(purpose)
        writer.append(epoch)
        return writer.bytes
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

/// Where a format-1 vault keeps its files (docs/format.md, "Format version 1").
struct Paths1: Sendable {
    let root: String
    var header: String { root + "/" + HeaderFormat.primaryName }
    var headerBackup: String { root + "/" + HeaderFormat.backupName }
    var lock: String { root + "/lock" }
    var snapshot: String { root + "/snapshot" }
    var logDirectory: String { root + "/log" }

    func logName(_ sequence: UInt64) -> String { "log/" + LogName.hex16(sequence) }
    func log(_ sequence: UInt64) -> String { root + "/" + logName(sequence) }
}

/// A format-1 header with its keys unwrapped.
struct UnlockedHeader1 {
    let header: VaultHeader1
    let kek: SecretBytes
    let idKey: SecretBytes
    let dataKeys: [UInt32: SecretBytes]
}

/// Reading and unlocking the two copies of a format-1 header (Keysmith no longer writes one).
enum HeaderStore1 {
    /// Reads the first intact copy of the header.
    static func read(_ paths: Paths1) throws -> VaultHeader1 {
        var problems: [String] = []
        var found = false
        for (path, name) in [(paths.header, HeaderFormat.primaryName), (paths.headerBackup, HeaderFormat.backupName)] {
            let read: [UInt8]?
            do {
                read = try System.readRegularFile(path, maximumSize: Format.maximumHeaderSize)
            } catch let error as SystemError where error.isUnusableFile {
                found = true
                problems.append("\(name): it is not a regular file of at most 64 KiB (\(error))")
                continue
            } catch let error as SystemError {
                throw KeysmithError(.ioFailure, "cannot read the vault header \(name): \(error)")
            }
            guard let bytes = read else { continue }
            found = true
            do {
                return try VaultHeader1.parse(bytes)
            } catch .unsupported(let reason) {
                throw KeysmithError(.corruptData, "the vault header is unsupported: \(reason); upgrade Keysmith")
            } catch .damaged(let reason) {
                problems.append("\(name): \(reason)")
            }
        }
        guard found else {
            throw KeysmithError(
                .storeUnavailable, "\(paths.root) is not a Keysmith vault (it has no header); create one with `keysmith init`")
        }
        throw KeysmithError(.corruptData, "both copies of the vault header are damaged (\(problems.joined(separator: "; "))); restore the vault from a backup")
    }

    /// The intact copies, in order (primary first), parsed only when asked for: opening a vault
    /// usually needs the first one only.
    static func intactCopies(_ paths: Paths1) -> LazyMapSequence<LazyFilterSequence<LazyMapSequence<[String], VaultHeader1?>>, VaultHeader1> {
        [paths.header, paths.headerBackup].lazy
            .map { path -> VaultHeader1? in
                guard let bytes = (try? System.readRegularFile(path, maximumSize: Format.maximumHeaderSize)) ?? nil else { return nil }
                return try? VaultHeader1.parse(bytes)
            }
            .filter { $0 != nil }
            .map { $0! }
    }

    static func deriveKEK(_ kdf: HeaderKDF, credential: VaultCredential) throws -> SecretBytes {
        guard let salt = Data(base64Encoded: kdf.salt).map(Array.init), salt.count >= 16 else {
            throw KeysmithError(.corruptData, "the vault header's KDF salt is malformed")
        }
        switch (kdf.type, credential.source) {
        case ("scrypt", .passphrase(let passphrase)):
            guard let n = kdf.n, let r = kdf.r, let p = kdf.p else {
                throw KeysmithError(.corruptData, "the vault header's scrypt parameters are missing")
            }
            let parameters = ScryptParameters(n: n, r: r, p: p)
            do {
                try parameters.validateFormat1()
            } catch {
                throw KeysmithError(.corruptData, "the vault header's scrypt parameters are out of range: N=\(n) r=\(r) p=\(p)")
            }
            return try keysmithCrypto { try Scrypt.derive(passphrase: passphrase, salt: salt, n: n, r: r, p: p, length: 32) }
        case ("keyfile", .keyfile), ("keyfile", .key):
            let key = try credential.keyMaterial()
            return SecretBytes(copying: SHA256.hmac(key: key, Format1.keyfileKEKLabel + salt))
        case ("scrypt", _):
            throw KeysmithError(.authenticationFailed, "this vault is unlocked by a passphrase, not a keyfile")
        case ("keyfile", _):
            throw KeysmithError(.authenticationFailed, "this vault is unlocked by a keyfile, not a passphrase")
        default:
            throw KeysmithError(.corruptData, "the vault header names an unknown key derivation `\(kdf.type)`")
        }
    }

    /// Unlocks a header: derives the KEK and unwraps every key.
    static func unlock(_ header: VaultHeader1, credential: VaultCredential) throws -> UnlockedHeader1 {
        let kek = try deriveKEK(header.kdf, credential: credential)
        let vaultID = header.vaultIDBytes
        let idKey: SecretBytes
        do {
            idKey = try VaultHeader1.unwrap(header.idKey, with: kek, vaultID: vaultID, purpose: KeyPurpose.id)
        } catch .malformed {
            throw KeysmithError(.corruptData, "the vault header's wrapped id key is malformed")
        } catch .authentication {
            throw KeysmithError(
                .authenticationFailed,
                credential.isPassphrase ? "wrong passphrase for this vault" : "the key in \(credential) does not unlock this vault")
        }
        var dataKeys: [UInt32: SecretBytes] = [:]
        for wrapped in header.dataKeys {
            do {
                dataKeys[wrapped.epoch] = try VaultHeader1.unwrap(wrapped, with: kek, vaultID: vaultID, purpose: KeyPurpose.data)
            } catch {
                throw KeysmithError(.corruptData, "the vault header's data key of epoch \(wrapped.epoch) is damaged")
            }
        }
        return UnlockedHeader1(header: header, kek: kek, idKey: idKey, dataKeys: dataKeys)
    }
}
