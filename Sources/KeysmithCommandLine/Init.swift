import ArgumentParser
import Keysmith
import KeysmithCredentials
import KeysmithCrypto
import KeysmithSystem
import KeysmithTokens
import KeysmithVault

extension KeysmithCommand {
    /// Creates a vault.
    struct Init: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "init", 
            abstract: "Create a new, empty vault.",
            discussion: """
                With --keyfile FILE the vault is unlocked by that keyfile, which is created (mode 0600, \
                256 random bits) when it does not exist. Otherwise it is unlocked by a passphrase, from \
                --passphrase-fd, $KEYSMITH_PASSPHRASE, or typed twice at a prompt.
                """
        )

        @OptionGroup var store: StoreOptions

        @Option(name: .customLong("scrypt-log-n"), help: "scrypt's cost as log2(N), 14 to 20.")
        var scryptLogN: Int = 17

        func validate() throws {
            guard (14...20).contains(scryptLogN) else { throw ValidationError("--scrypt-log-n must be between 14 and 20") }
        }

        func run() throws {
            let credential: VaultCredential
            var createdKeyfile = false
            if let keyfile = store.keyfilePath {
                if try System.status(keyfile) == nil {
                    try VaultCredential.generateKeyfile(at: keyfile)
                    createdKeyfile = true
                }
                credential = .keyfile(at: keyfile)
            } else if store.passphraseFD != nil {
                credential = try store.credential()
            } else if let passphrase = try KeySources.newPassphrase(fromEnvironment: "KEYSMITH_PASSPHRASE") {
                credential = .passphrase(passphrase)
            } else {
                guard var first = try Terminal.readHidden(prompt: "New vault passphrase: ") else {
                    throw KeysmithError(.storeLocked, "no passphrase: use --keyfile, --passphrase-fd or KEYSMITH_PASSPHRASE, or run on a terminal")
                }
                defer { cleanse(&first) }
                var second = try Terminal.readHidden(prompt: "Repeat the passphrase: ") ?? []
                defer { cleanse(&second) }
                guard first == second else { throw KeysmithError.invalidArgument("the two passphrases differ; nothing was created") }
                guard !first.isEmpty else { throw KeysmithError.invalidArgument("the passphrase is empty; nothing was created") }
                credential = .passphrase(bytes: first)
            }
            let vault = try FileVault.create(at: store.vaultPath, credential: credential, scrypt: ScryptParameters(n: 1 << UInt64(scryptLogN)))
            // A new vault at this path starts a new audit log: forget the head an earlier vault
            // here had (the anchor knows a store by its path).
            AuditAnchor.standard.forget(vault)
            if createdKeyfile { print("Created keyfile \(store.keyfilePath ?? "")") }
            print("Created vault at \(store.vaultPath)")
        }
    }
}
