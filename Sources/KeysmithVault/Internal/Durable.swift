import FoundationEssentials
import Keysmith
import KeysmithCredentials
import KeysmithCrypto
import KeysmithSystem
import Synchronization

/// Where a vault keeps its files (docs/format.md, "Directory layout").
struct VaultPaths: Sendable {
    let root: String
    var header: String { root + "/" + VaultHeader.primaryName }
    var headerBackup: String { root + "/" + VaultHeader.backupName }
    var lock: String { root + "/lock" }
    var snapshot: String { root + "/snapshot" }
    var logDirectory: String { root + "/log" }

    func logName(_ sequence: UInt64) -> String { "log/" + Self.hex16(sequence) }
    func log(_ sequence: UInt64) -> String { root + "/" + logName(sequence) }

    static func hex16(_ value: UInt64) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: max(0, 16 - digits.count)) + digits
    }

    /// The sequence number a log's file name gives, when the name is exactly how ``hex16(_:)``
    /// writes one and the number is one a log can have (1 or more): `UInt64(_:radix:)` alone
    /// also reads `+00000000000000a` and upper-case digits, and no log is numbered 0 — names no
    /// writer makes (a stray file, kept for `verify` to report, never taken for a log).
    static func logSequence(_ name: String) -> UInt64? {
        guard name.utf8.count == 16, let number = UInt64(name, radix: 16), number >= 1, hex16(number) == name else { return nil }
        return number
    }
}

/// Atomic, durable file replacement: temporary file (mode 0600, created exclusively), write,
/// fsync, rename over the target, fsync of the directory. Readers see the old file or the new
/// one, never a mix; after `write` returns, the new file survives a crash.
enum Durable {
    static let temporaryPrefix = ".tmp-"

    /// Replaces `path` atomically and durably.
    /// With `sync: false` nothing is flushed: atomic but not durable (the rollback anchor,
    /// which a crash may only set back).
    static func write(_ bytes: [UInt8], to path: String, directory: String, sync: Bool = true) throws {
        let temporary = try writeTemporary(bytes, directory: directory, sync: sync)
        try io {
            try FaultInjection.step()
            do {
                try System.rename(temporary, path)
            } catch {
                try? System.unlink(temporary)
                throw error
            }
            if sync {
                try FaultInjection.step()
                try System.fsyncDirectory(directory)
            }
        }
    }

    /// Creates `path` atomically and durably; fails with `EEXIST` if it exists (a hard link,
    /// unlike a rename, never replaces a file another writer made).
    static func create(_ bytes: [UInt8], at path: String, directory: String) throws {
        try create(at: path, directory: directory) { fd, temporary in try System.writeAll(fd, bytes, path: temporary) }
    }

    /// The same, for a file that `fill` writes into the temporary file's descriptor, in any
    /// order (a large commit is written in pieces rather than built whole in memory); the file
    /// is synced and linked only after `fill` returns.
    static func create(at path: String, directory: String, _ fill: (_ fd: Descriptor, _ temporary: String) throws -> Void) throws {
        let temporary = try writeTemporary(directory: directory, sync: true, fill)
        defer { try? System.unlink(temporary) }
        try io {
            try FaultInjection.step()
            try System.link(temporary, path)
            try FaultInjection.step()
            try System.fsyncDirectory(directory)
        }
    }

    /// A new temporary file in `directory` (mode 0600, created exclusively) holding `bytes`, synced.
    static func writeTemporary(_ bytes: [UInt8], directory: String, sync: Bool = true) throws -> String {
        try writeTemporary(directory: directory, sync: sync) { fd, temporary in try System.writeAll(fd, bytes, path: temporary) }
    }

    private static func writeTemporary(
        directory: String, sync: Bool, _ fill: (_ fd: Descriptor, _ temporary: String) throws -> Void
    ) throws -> String {
        let random = (try? Random.bytes(count: 6).hexString) ?? "000000000000"
        let temporary = directory + "/" + temporaryPrefix + "\(System.processID)-" + random
        try io {
            try FaultInjection.step()
            let fd = try System.open(temporary, flags: OpenFlags.writeOnly | OpenFlags.create | OpenFlags.exclusive, mode: 0o600)
            do {
                try FaultInjection.step()
                try fill(fd, temporary)
                if sync {
                    try FaultInjection.step()
                    try System.fsync(fd, path: temporary)
                }
                System.close(fd)
            } catch {
                System.close(fd)
                try? System.unlink(temporary)
                throw error
            }
        }
        return temporary
    }
}

/// Crash injection for the fault tests: once armed (by the `vault-stress` test helper, from its
/// `KEYSMITH_FAULT_EXIT_AT=N`), the process ends (exit status 86, no clean-up, as a SIGKILL
/// would) just before the Nth file-system step of the vault's durable writes. Package-only and
/// never armed by the library itself: no environment variable can make a program that embeds
/// the vault exit.
package enum FaultInjection {
    /// The step to exit at, and the steps taken so far.
    private static let state = Mutex<(exitAt: Int?, count: Int)>((nil, 0))

    /// Arms the crash at step `exitAt` (counting from 1), or disarms it with `nil`.
    package static func arm(exitAt: Int?) {
        state.withLock { $0 = (exitAt, 0) }
    }

    static func step() throws {
        let reached = state.withLock { state -> Bool in
            guard let exitAt = state.exitAt else { return false }
            state.count += 1
            return state.count >= exitAt
        }
        if reached { System.exitImmediately(86) }
    }
}

/// A header with its keys unwrapped.
struct UnlockedHeader {
    let header: VaultHeader
    let kek: SecretBytes
    let idKey: SecretBytes
    let dataKeys: [UInt32: SecretBytes]
}

/// Reading, unlocking and writing the two copies of the header.
enum HeaderStore {
    /// Reads the first intact copy of the header.
    static func read(_ paths: VaultPaths) throws -> VaultHeader {
        var problems: [String] = []
        var found = false
        for (path, name) in [(paths.header, VaultHeader.primaryName), (paths.headerBackup, VaultHeader.backupName)] {
            let read: [UInt8]?
            do {
                read = try System.readRegularFile(path, maximumSize: Format2.maximumHeaderSize)
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
                return try VaultHeader.parse(bytes)
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
    static func intactCopies(_ paths: VaultPaths) -> LazyMapSequence<LazyFilterSequence<LazyMapSequence<[String], VaultHeader?>>, VaultHeader> {
        [paths.header, paths.headerBackup].lazy
            .map { path -> VaultHeader? in
                guard let bytes = (try? System.readRegularFile(path, maximumSize: Format2.maximumHeaderSize)) ?? nil else { return nil }
                return try? VaultHeader.parse(bytes)
            }
            .filter { $0 != nil }
            .map { $0! }
    }

    static func write(_ header: VaultHeader, _ paths: VaultPaths) throws {
        let bytes = try keysmithCrypto { try header.encode() }
        try Durable.write(bytes, to: paths.header, directory: paths.root)
        try Durable.write(bytes, to: paths.headerBackup, directory: paths.root)
    }

    static func deriveKEK(_ kdf: VaultHeader.KDF, credential: VaultCredential) throws -> SecretBytes {
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
            return SecretBytes(copying: SHA256.hmac(key: key, Format.keyfileKEKLabel + salt))
        case ("scrypt", _):
            throw KeysmithError(.authenticationFailed, "this vault is unlocked by a passphrase, not a keyfile")
        case ("keyfile", _):
            throw KeysmithError(.authenticationFailed, "this vault is unlocked by a keyfile, not a passphrase")
        default:
            throw KeysmithError(.corruptData, "the vault header names an unknown key derivation `\(kdf.type)`")
        }
    }

    /// Unlocks a header: derives the KEK and unwraps every key.
    static func unlock(_ header: VaultHeader, credential: VaultCredential) throws -> UnlockedHeader {
        let kek = try deriveKEK(header.kdf, credential: credential)
        let vaultID = header.vaultIDBytes
        let idKey: SecretBytes
        do {
            idKey = try VaultHeader.unwrap(header.idKey, with: kek, vaultID: vaultID, purpose: KeyPurpose.id)
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
                dataKeys[wrapped.epoch] = try VaultHeader.unwrap(wrapped, with: kek, vaultID: vaultID, purpose: KeyPurpose.data)
            } catch {
                throw KeysmithError(.corruptData, "the vault header's data key of epoch \(wrapped.epoch) is damaged")
            }
        }
        return UnlockedHeader(header: header, kek: kek, idKey: idKey, dataKeys: dataKeys)
    }

    static func newKDF(for credential: VaultCredential, scrypt: ScryptParameters) throws -> VaultHeader.KDF {
        let salt = try keysmithCrypto { try Random.bytes(count: 32) }
        let encoded = Data(salt).base64EncodedString()
        if credential.isPassphrase {
            try scrypt.validate()
            return VaultHeader.KDF(type: "scrypt", n: scrypt.n, r: scrypt.r, p: scrypt.p, salt: encoded)
        }
        return VaultHeader.KDF(type: "keyfile", n: nil, r: nil, p: nil, salt: encoded)
    }
}
