import ArgumentParser
package import Keysmith
package import KeysmithCredentials
import KeysmithCrypto
import KeysmithSecretService
package import KeysmithStores
package import KeysmithSystem
import KeysmithVault

/// Where the vault is and how to unlock it; shared by every command that opens a store.
package struct StoreOptions: ParsableArguments {
    package init() {}

    @Option(name: .long, help: ArgumentHelp("The vault directory (default: $KEYSMITH_VAULT, else $XDG_DATA_HOME/keysmith).", valueName: "dir"))
    var vault: String?

    @Option(name: .long, help: ArgumentHelp("Unlock with this keyfile (default: $KEYSMITH_KEYFILE).", valueName: "file"))
    var keyfile: String?

    @Option(name: .customLong("passphrase-fd"), help: ArgumentHelp("Read the passphrase from this file descriptor.", valueName: "n"))
    var passphraseFD: Int32?

    @Option(help: ArgumentHelp("The store: vault, secret-service, postgres or auto (default: $KEYSMITH_BACKEND, else the config file, else vault).", valueName: "backend"))
    var backend: String?

    @Option(help: ArgumentHelp("The PostgreSQL store's namespace (tenant) (default: $KEYSMITH_NAMESPACE, else the config file, else default).", valueName: "name"))
    var namespace: String?

    @Option(help: "The Secret Service collection: an alias or a label.")
    var collection: String = "default"

    @Option(help: "Seconds to wait for the Secret Service before giving up.")
    var timeout: Double = 5

    @Option(name: .customLong("wait-lock"), help: ArgumentHelp(
        "How long a write waits for the vault's lock while another process holds it, saying so after 1s (default 30s; then exit 12, nothing changed).",
        valueName: "duration"))
    var waitLock: String?

    @Flag(name: .customLong("no-wait"), help: "Fail at once (exit 12) when another process holds the vault's lock.")
    var noWait = false

    /// How a write waits for the vault's lock: --no-wait, --wait-lock, else 30 s; a line on
    /// standard error after 1 s says what it waits for.
    func lockWait() throws -> VaultLockWait {
        if noWait && waitLock != nil { throw ValidationError("--no-wait and --wait-lock are exclusive") }
        let timeout: Duration
        if noWait {
            timeout = .zero
        } else if let waitLock {
            timeout = .milliseconds(Int64((try parseDuration(waitLock) * 1000).rounded()))
        } else {
            timeout = .seconds(30)
        }
        return VaultLockWait(timeout: timeout, noticeAfter: .seconds(1)) { message in
            Terminal.write(Array(("keysmith: " + message + "\n").utf8), to: .standardError)
        }
    }

    /// A vault opened by this command waits for its lock as ``lockWait()`` says.
    func configured(_ store: any SecureStore) throws -> any SecureStore {
        if let vault = store as? FileVault { vault.lockWait = try lockWait() }
        return store
    }

    var vaultPath: String { vault ?? FileVault.defaultPath }

    /// The backend given by --backend, $KEYSMITH_BACKEND or the config file; `nil` when none
    /// is (then commands that have one store, such as `watch`, use it).
    package func givenChoice() throws -> StoreChoice? {
        if let backend { return try StoreChoice.parse(backend, source: "--backend") }
        return try StoreChoice.given()
    }

    /// The backend chosen by --backend, else $KEYSMITH_BACKEND or the config file, else the vault.
    func choice() throws -> StoreChoice {
        try givenChoice() ?? .vault
    }

    /// Opens the chosen store: the vault (unlocked as for `openVault`) or the Secret Service.
    package func openStore() throws -> any SecureStore {
        try configured(openChosen().store)
    }

    func openChosen() throws -> StoreChoice.Opened {
        let chosen = try choice()
        // --namespace names a PostgreSQL namespace: given with another store it would be ignored.
        if namespace != nil, chosen != .postgres, chosen != .auto {
            throw ValidationError("--namespace names a PostgreSQL namespace; the \(chosen.rawValue) backend has none")
        }
        return try chosen.open(vaultPath: vaultPath, vaultCredential: { try vaultCredential() }, collection: collection,
                          timeout: .milliseconds(Int(max(timeout, 0.1) * 1000)), postgres: { try openPostgres() },
                          databaseConfigured: (try? databaseURL()) != nil)
    }

    /// The database URL: $KEYSMITH_DATABASE_URL, else the config file's `database_url`. Never an
    /// option: a URL may hold a password, and the command line is visible to every user.
    package func databaseURL() throws -> String {
        if let url = System.environment("KEYSMITH_DATABASE_URL"), !url.isEmpty { return url }
        if let url = try StoreChoice.configFile().databaseURL { return url }
        throw KeysmithError(.storeUnavailable, "no database is configured: set KEYSMITH_DATABASE_URL or database_url in the config file")
    }

    /// The PostgreSQL namespace: --namespace, $KEYSMITH_NAMESPACE, the config file, `default`.
    package func postgresNamespace() throws -> String {
        if let namespace { return namespace }
        if let value = System.environment("KEYSMITH_NAMESPACE"), !value.isEmpty { return value }
        return try StoreChoice.configFile().namespace ?? "default"
    }

    /// Opens the PostgreSQL store (`keysmith-net`; the lean command hands over to it).
    func openPostgres() throws -> any SecureStore {
        try networkParts().openPostgres(self)
    }

    /// The keyfile --keyfile or $KEYSMITH_KEYFILE names.
    var keyfilePath: String? { keySources(prompt: nil).keyfilePath }

    /// Where this command's key comes from: --keyfile, $KEYSMITH_KEYFILE, --passphrase-fd,
    /// $KEYSMITH_PASSPHRASE, then the terminal with `prompt` (the library's one order).
    package func keySources(prompt: String?) -> KeySources {
        KeySources(keyfile: keyfile, passphraseDescriptor: passphraseFD, prompt: prompt)
    }

    /// The vault's credential, from the first source that has one (``keySources(prompt:)``).
    func credential(prompt: String = "Vault passphrase: ") throws -> VaultCredential {
        guard var source = try keySources(prompt: prompt).resolve() else {
            throw KeysmithError(
                .storeLocked,
                "no credential was given for the vault, and there is no terminal to ask for its passphrase; use --keyfile, "
                    + "KEYSMITH_KEYFILE, --passphrase-fd or KEYSMITH_PASSPHRASE")
        }
        defer { source.wipe() }
        return VaultCredential(source)
    }

    func openVault() throws -> FileVault {
        let vault = try FileVault.open(at: vaultPath, credential: vaultCredential())
        vault.lockWait = try lockWait()
        return vault
    }

    /// The credential for an existing vault: when there is no vault, say so (and how to make
    /// one) before asking for a passphrase or complaining that none was given.
    func vaultCredential() throws -> VaultCredential {
        guard (try? System.status(vaultPath))??.isDirectory == true else {
            throw KeysmithError(.storeUnavailable, "there is no vault at \(vaultPath); create one with `keysmith init`")
        }
        return try credential()
    }
}

/// How much of standard input (or a descriptor) each command reads at most: more is refused
/// with exit 64 and nothing is changed, so an input that never ends cannot exhaust memory.
package enum InputLimit {
    /// A secret (`secret set`): the largest a store takes (the vault's 32 MiB), and room for
    /// the trailing `\r\n` that is removed.
    package static let secret = StoreLimits.standard.maximumSecretSize + 2
    /// JSON lines of `batch` and `token import --batch`.
    package static let batch = 256 << 20
    /// One token response (`token import`).
    package static let tokenResponse = 1 << 20

    /// Reads `fd` to its end, at most `limit` bytes; more is a usage error naming `what`.
    package static func read(fd: Descriptor = .standardInput, limit: Int, what: String) throws -> [UInt8] {
        do {
            return try Terminal.readAll(fd: fd, atMost: limit)
        } catch let error as SystemError where error.isOverLimit {
            throw KeysmithError.invalidArgument("\(what) is over \(limit >> 20) MiB, the most this command reads; nothing was changed")
        }
    }
}

extension StoreOptions {
    /// For a command that reads its data from standard input: `--passphrase-fd 0` would take
    /// the passphrase from that same input (after the data was read, as a wrong passphrase),
    /// so it is a usage error.
    func requireStandardInputFree(for what: String) throws {
        if passphraseFD == 0 {
            throw ValidationError("--passphrase-fd 0 is standard input, which holds \(what); give the passphrase on another descriptor (--passphrase-fd 3 3<file)")
        }
    }
}

/// Identifies one item: a generic password (--service, --account) or an internet password
/// (--server, --protocol, --account, with optional --port, --auth-type, --security-domain, --path).
struct ItemOptions: ParsableArguments {
    @Option(help: "The service of a generic password.")
    var service: String?

    @Option(help: "The account.")
    var account: String

    @Option(help: "The server of an internet password.")
    var server: String?

    @Option(help: "The port of an internet password (0: unspecified).")
    var port: Int = 0

    @Option(name: .customLong("protocol"), help: "The protocol of an internet password, such as https or ssh.")
    var internetProtocol: String?

    @Option(name: .customLong("auth-type"), help: "The authentication type of an internet password.")
    var authenticationType: String = "default"

    @Option(name: .customLong("security-domain"), help: "The security domain of an internet password.")
    var securityDomain: String = ""

    @Option(help: "The path of an internet password.")
    var path: String = ""

    func validate() throws {
        guard (0...65535).contains(port) else { throw ValidationError("--port must be between 0 and 65535") }
        if service != nil && server != nil {
            throw ValidationError("give --service (a generic password) or --server (an internet password), not both")
        }
        if service == nil && server == nil {
            throw ValidationError("give --service for a generic password, or --server and --protocol for an internet password")
        }
        if server != nil {
            guard let internetProtocol else { throw ValidationError("an internet password needs --protocol (such as https)") }
            guard InternetProtocol(rawValue: internetProtocol) != nil else {
                throw ValidationError("unknown protocol '\(internetProtocol)'; one of: \(InternetProtocol.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            guard InternetAuthenticationType(rawValue: authenticationType) != nil else {
                throw ValidationError("unknown authentication type '\(authenticationType)'; one of: \(InternetAuthenticationType.allCases.map(\.rawValue).joined(separator: ", "))")
            }
        }
    }

    var key: ItemKey {
        if let service { return .genericPassword(service: service, account: account) }
        return .internetPassword(InternetPasswordKey(
            server: server ?? "", port: port, internetProtocol: InternetProtocol(rawValue: internetProtocol ?? "") ?? .https,
            authenticationType: InternetAuthenticationType(rawValue: authenticationType) ?? .default,
            securityDomain: securityDomain, path: path, account: account))
    }
}
