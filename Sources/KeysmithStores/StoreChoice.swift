public import Keysmith
import KeysmithSecretService
public import KeysmithVault
import KeysmithSystem

/// Which store to use: the file vault, the Secret Service, or whichever answers.
///
/// Chosen in code, by the environment variable `KEYSMITH_BACKEND` (`vault`, `secret-service`,
/// `auto`), or by a config file (`$XDG_CONFIG_HOME/keysmith/config`, else
/// `~/.config/keysmith/config`, a line `backend = auto`); in that order of precedence.
///
/// ```swift
/// let opened = try StoreChoice.fromEnvironment().open(vaultCredential: { try .fromEnvironment() })
/// print("using", opened.store.storeDescription)     // auto says which it chose
/// ```
public enum StoreChoice: String, Sendable, CaseIterable {
    /// The file vault (the default).
    case vault
    /// The freedesktop Secret Service.
    case secretService = "secret-service"
    /// The shared store on PostgreSQL (module `KeysmithPostgres`, opened by the caller: this
    /// module does not link the database driver).
    case postgres
    /// PostgreSQL when a database URL is configured, else the Secret Service when one answers
    /// within a second, else the file vault.
    case auto

    /// The choice named by `KEYSMITH_BACKEND`, else the config file, else ``vault``.
    ///
    /// The config file holds `key = value` lines, blank lines and `#` comments; `backend` is the
    /// one key. A config file that exists but cannot be read, or holds anything else, is an error,
    /// never silently ignored.
    ///
    /// - Throws: `KeysmithError.Code.invalidArgument` naming the bad value or line and where it
    ///   came from; `KeysmithError.Code.ioFailure` when the config file exists but cannot be read.
    public static func fromEnvironment() throws -> StoreChoice {
        try given() ?? .vault
    }

    /// The backend `KEYSMITH_BACKEND` or the config file names, `nil` when neither does (then
    /// ``fromEnvironment()`` is the vault, and a command that has one store uses it).
    ///
    /// - Throws: As ``fromEnvironment()``.
    public static func given() throws -> StoreChoice? {
        if let value = System.environment("KEYSMITH_BACKEND"), !value.isEmpty {
            return try parse(value, source: "KEYSMITH_BACKEND")
        }
        return try configFile().backend
    }

    /// What the config file (`$XDG_CONFIG_HOME/keysmith/config`) says: `backend`,
    /// `database_url` and `namespace` (the PostgreSQL store's). Each key at most once.
    public struct ConfigFile: Sendable {
        /// `backend = vault|secret-service|postgres|auto`.
        public var backend: StoreChoice?
        /// `database_url = postgresql://…` (the file should be readable by its owner only when
        /// the URL holds a password).
        public var databaseURL: String?
        /// `namespace = NAME`.
        public var namespace: String?
        /// The largest config file read (1 MiB); a larger one, or one that is not a regular
        /// file, is refused with `ioFailure`.
        public static let maximumSize = 1 << 20
    }

    /// Reads the config file; a missing file says nothing.
    ///
    /// - Throws: `KeysmithError.Code.invalidArgument` naming the bad line;
    ///   `KeysmithError.Code.ioFailure` when it exists but cannot be read.
    public static func configFile() throws -> ConfigFile {
        let base = System.environment("XDG_CONFIG_HOME").flatMap { $0.hasPrefix("/") ? $0 : nil }
            ?? ((System.environment("HOME") ?? "") + "/.config")
        let path = base + "/keysmith/config"
        let bytes: [UInt8]?
        do {
            // A regular file (a link to one is fine) of at most 1 MiB: a FIFO or a device there
            // would hold up, or fill the memory of, every command that reads it.
            if let (fd, _) = try System.openRegularFile(path, maximumSize: ConfigFile.maximumSize, followingLinks: true) {
                defer { System.close(fd) }
                bytes = try System.readAll(fd, path: path, atMost: ConfigFile.maximumSize)
            } else {
                bytes = nil
            }
        } catch let error as SystemError {
            throw KeysmithError(.ioFailure, "cannot read the config file \(path) (\(error)); fix it or remove it")
        }
        var config = ConfigFile()
        guard let bytes else { return config }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw KeysmithError.invalidArgument("the config file \(path) is not UTF-8 text")
        }
        var seen: Set<String> = []
        for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let trimmed = line.filter { $0 != " " && $0 != "\t" && $0 != "\r" }
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            let parts = trimmed.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            let place = "the config file \(path), line \(number + 1)"
            guard parts.count == 2, ["backend", "database_url", "namespace"].contains(parts[0]) else {
                throw KeysmithError.invalidArgument("\(place): expected `backend = vault|secret-service|postgres|auto`, `database_url = …` or `namespace = …`")
            }
            guard seen.insert(parts[0]).inserted else { throw KeysmithError.invalidArgument("\(place): \(parts[0]) is given twice") }
            switch parts[0] {
            case "backend": config.backend = try parse(parts[1], source: "\(path), line \(number + 1),")
            case "database_url": config.databaseURL = parts[1]
            default: config.namespace = parts[1]
            }
        }
        return config
    }

    /// Parses `vault`, `secret-service`, `postgres` or `auto`.
    public static func parse(_ value: String, source: String) throws -> StoreChoice {
        guard let choice = StoreChoice(rawValue: value) else {
            throw KeysmithError.invalidArgument(
                "\(source) names no backend (its value is not repeated: it could be a secret typed in the wrong place); "
                    + "the backend is one of: \(allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return choice
    }

    /// An opened store and what was chosen.
    public struct Opened: Sendable {
        /// The store.
        public var store: any SecureStore
        /// The backend it is (never ``auto``).
        public var backend: StoreChoice
        /// Why: for `auto`, whether a Secret Service answered.
        public var reason: String
    }

    /// Opens the chosen store.
    ///
    /// - Parameters:
    ///   - vaultPath: The vault directory; `FileVault.defaultPath` if omitted.
    ///   - vaultCredential: Produces the vault's credential, only when the vault is chosen.
    ///   - collection: The Secret Service collection.
    ///   - timeout: The Secret Service's deadline per call (for `auto`, at most one second to answer).
    ///   - postgres: Opens the PostgreSQL store, when the caller links `KeysmithPostgres`;
    ///     `nil` when it does not (choosing `postgres` is then an error). `auto` calls it only
    ///     when `databaseConfigured`.
    ///   - databaseConfigured: Whether a database URL is configured (for `auto`).
    /// - Returns: The store, the backend used, and why.
    public func open(
        vaultPath: String = FileVault.defaultPath, vaultCredential: () throws -> VaultCredential,
        collection: String = "default", timeout: Duration = .seconds(5),
        postgres: (() throws -> any SecureStore)? = nil, databaseConfigured: Bool = false
    ) throws -> Opened {
        switch self {
        case .postgres:
            guard let postgres else {
                throw KeysmithError.invalidArgument("the postgres backend is opened through KeysmithPostgres (PostgresStore), which this program does not link")
            }
            return Opened(store: try postgres(), backend: .postgres, reason: "PostgreSQL was chosen")
        case .auto where databaseConfigured && postgres != nil:
            return Opened(store: try postgres!(), backend: .postgres, reason: "auto: a database URL is configured")
        case .vault:
            return Opened(store: try FileVault.open(at: vaultPath, credential: vaultCredential()), backend: .vault,
                          reason: "the file vault was chosen")
        case .secretService:
            return Opened(store: try SecretServiceStore(collection: collection, timeout: timeout), backend: .secretService,
                          reason: "the Secret Service was chosen")
        case .auto:
            do {
                let store = try SecretServiceStore(collection: collection, timeout: min(timeout, .seconds(1)))
                return Opened(store: store, backend: .secretService, reason: "auto: a Secret Service answered")
            } catch let error as KeysmithError {
                return Opened(store: try FileVault.open(at: vaultPath, credential: vaultCredential()), backend: .vault,
                              reason: "auto: no Secret Service (\(error.code)), so the file vault")
            }
        }
    }
}
