import Keysmith
public import KeysmithCredentials
import KeysmithCrypto
import KeysmithSystem

/// What unlocks a vault: a passphrase (stretched with scrypt) or a 256-bit keyfile.
///
/// A vault is created with one kind of credential and is unlocked by that kind only;
/// ``FileVault/changeCredential(to:scrypt:)`` switches between them.
///
/// ```swift
/// let vault = try FileVault.open(at: path, credential: .passphrase("correct horse battery staple"))
/// let unattended = try FileVault.open(at: path, credential: .keyfile(at: "/etc/keysmith/key"))
/// ```
///
/// A passphrase given as a `String` cannot be wiped from memory by Keysmith (Swift strings are
/// immutable and may be copied); give bytes with ``passphrase(bytes:)`` when that matters.
/// Keysmith wipes its own copies as soon as the key is derived.
public struct VaultCredential: Sendable, CustomStringConvertible {
    enum Source: Sendable {
        case passphrase(SecretBytes)
        case keyfile(path: String)
        case key(SecretBytes)
    }

    let source: Source

    /// A passphrase, from a string.
    ///
    /// - Parameter passphrase: The passphrase; its UTF-8 bytes are used.
    /// - Returns: The credential.
    public static func passphrase(_ passphrase: String) -> VaultCredential {
        VaultCredential(source: .passphrase(SecretBytes(copying: passphrase.utf8)))
    }

    /// Whether this is a passphrase of no bytes: it protects nothing, so no vault is created
    /// with one nor changed to one (a script whose `$PASSPHRASE` is unset would make one).
    var isEmptyPassphrase: Bool {
        if case .passphrase(let bytes) = source { return bytes.count == 0 }
        return false
    }

    /// A passphrase, from bytes that the caller wipes after this call.
    ///
    /// - Parameter bytes: The passphrase bytes.
    /// - Returns: The credential.
    public static func passphrase(bytes: [UInt8]) -> VaultCredential {
        VaultCredential(source: .passphrase(SecretBytes(copying: bytes)))
    }

    /// A keyfile: 64 hexadecimal digits (256 bits), optionally followed by a newline, read when
    /// the vault is unlocked. Make one with ``generateKeyfile(at:)``.
    ///
    /// - Parameter path: The keyfile's path.
    /// - Returns: The credential.
    public static func keyfile(at path: String) -> VaultCredential {
        VaultCredential(source: .keyfile(path: path))
    }

    /// A raw 256-bit key, as a keyfile holds it.
    ///
    /// - Parameter bytes: Exactly 32 bytes.
    /// - Returns: The credential.
    public static func key(_ bytes: [UInt8]) -> VaultCredential {
        VaultCredential(source: .key(SecretBytes(copying: bytes)))
    }

    /// The credential that the environment names: `KEYSMITH_KEYFILE` (a keyfile's path) or,
    /// failing that, `KEYSMITH_PASSPHRASE`.
    ///
    /// - Returns: The credential.
    /// - Throws: `KeysmithError.Code.storeLocked` when neither variable is set.
    public static func fromEnvironment() throws -> VaultCredential {
        if var source = try KeySources().resolve() {
            defer { source.wipe() }
            return VaultCredential(source)
        }
        throw KeysmithError(
            .storeLocked, "no credential was given for the vault: set KEYSMITH_KEYFILE to a keyfile or KEYSMITH_PASSPHRASE to its passphrase")
    }

    /// Writes a new random keyfile with mode 0600. Refuses to overwrite an existing file. The same
    /// as `Keyfile.generate(at:)` (module KeysmithCredentials), for programs that use the vault.
    ///
    /// - Parameter path: Where to write it.
    /// - Throws: `KeysmithError.Code.duplicateItem` if the file exists;
    ///   `KeysmithError.Code.ioFailure` if it cannot be written.
    public static func generateKeyfile(at path: String) throws {
        try Keyfile.generate(at: path)
    }

    /// Whether this is a passphrase (as opposed to a keyfile or a key).
    var isPassphrase: Bool {
        if case .passphrase = source { return true }
        return false
    }

    /// Reads the 32-byte key of a keyfile or key credential.
    func keyMaterial() throws -> SecretBytes {
        switch source {
        case .passphrase:
            preconditionFailure("a passphrase has no key material of its own")
        case .key(let key):
            guard key.count == 32 else {
                throw KeysmithError.invalidArgument("a vault key is 32 bytes (256 bits); this one is \(key.count)")
            }
            return key
        case .keyfile(let path):
            var key = try Keyfile.read(at: path)
            return SecretBytes(takingOwnershipOf: &key)
        }
    }

    /// `passphrase`, `keyfile at PATH` or `key`; never the secret.
    public var description: String {
        switch source {
        case .passphrase: "passphrase"
        case .keyfile(let path): "keyfile at \(path)"
        case .key: "key"
        }
    }
}

/// scrypt's cost parameters for deriving the key-encryption key from a passphrase.
///
/// The defaults (N = 2¹⁷, r = 8, p = 1: 128 MiB of memory) follow OWASP's 2026 guidance for
/// scrypt; docs/threat-model.md gives the measured unlock time. Lower them only for tests.
public struct ScryptParameters: Sendable, Hashable {
    /// The CPU and memory cost; a power of two.
    public var n: UInt64
    /// The block size.
    public var r: UInt64
    /// The parallelism.
    public var p: UInt64

    /// Creates parameters.
    ///
    /// - Parameters:
    ///   - n: The cost, a power of two from 2¹⁴ to 2²⁰.
    ///   - r: The block size: 8.
    ///   - p: The parallelism, 1 to 4.
    public init(n: UInt64, r: UInt64 = 8, p: UInt64 = 1) {
        self.n = n
        self.r = r
        self.p = p
    }

    /// N = 2¹⁷, r = 8, p = 1.
    public static let `default` = ScryptParameters(n: 1 << 17, r: 8, p: 1)

    /// The cheapest parameters a vault accepts (N = 2¹⁴, 16 MiB), for tests only: never for
    /// real secrets.
    public static let testing = ScryptParameters(n: 1 << 14, r: 8, p: 1)

    /// The bounds of format 2, which every new vault and credential change must meet, so that
    /// an unlock never costs more than 1 GiB of memory and 4 passes, and never less than 16 MiB.
    func validate() throws {
        guard isWithinBounds else {
            throw KeysmithError.invalidArgument(
                "scrypt parameters N=\(n) r=\(r) p=\(p) are out of range (N a power of two from 2^14 to 2^20, r 8, p 1...4)")
        }
    }

    /// Whether the parameters meet format 2's bounds: the one check behind creating a vault,
    /// changing its credential, and reading a header (`HeaderFormat.kdfProblem`).
    var isWithinBounds: Bool {
        n >= Format.scryptMinimumN && n <= Format.scryptMaximumN && n & (n - 1) == 0 && r == Format.scryptR
            && (1...Format.scryptMaximumP).contains(p)
    }

    /// The looser bounds format 1 vaults were written with (N from 2 to 2²², r 1...32, p 1...16).
    func validateFormat1() throws {
        guard n >= 2, n <= 1 << 22, n & (n - 1) == 0, (1...32).contains(r), (1...16).contains(p) else {
            throw KeysmithError.invalidArgument("scrypt parameters N=\(n) r=\(r) p=\(p) are out of range")
        }
    }
}

extension VaultCredential {
    /// The credential a key source found (`KeySources.resolve()`): a keyfile, or a passphrase
    /// whose bytes are used as they are. The passphrase's bytes are copied: wipe the source's.
    ///
    /// ```swift
    /// if let source = try KeySources(passphraseDescriptor: 3).resolve() {
    ///     let vault = try FileVault.open(at: path, credential: VaultCredential(source))
    /// }
    /// ```
    public init(_ source: KeySource) {
        switch source {
        case .keyfile(let path): self = .keyfile(at: path)
        case .passphrase(let bytes, _): self = .passphrase(bytes: bytes)
        }
    }
}
