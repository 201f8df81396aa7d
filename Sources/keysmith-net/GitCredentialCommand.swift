import ArgumentParser
import Foundation
import Keysmith
import KeysmithCommandLine
import KeysmithStores
import KeysmithProvider
import KeysmithSystem
import KeysmithTokens

extension KeysmithCommand {
    /// git's credential helper (git-credential(1)); installed as `git-credential-keysmith`.
    struct GitCredentialCommand: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "git-credential",
            abstract: "Keep git's credentials in Keysmith: git's credential helper protocol (get, store, erase).",
            discussion: """
                Reads a credential description (key=value lines up to an empty line) on standard input, as git \
                writes it. get prints username= and password= for the host (protocol, host and port, and path \
                with credential.useHttpPath), or nothing; store keeps what git approved as an internet password \
                item of that user (never another user's); erase removes that user's item after the server \
                rejected it, only while it still holds the rejected password. Set it up with \
                `git config --global credential.helper keysmith` (git runs git-credential-keysmith, a link to \
                this command). The store is the one the usual options, the environment and the config file \
                choose. When the store cannot be opened or unlocked, the helper says why on standard error, prints \
                nothing and exits 0, so git asks its next helper or prompts. Other actions are ignored, as git requires.
                """
        )

        @OptionGroup var store: StoreOptions

        @Argument(help: "get, store or erase (others are ignored).")
        var action: String

        func run() throws {
            guard ["get", "store", "erase"].contains(action) else { return }
            let input = try InputLimit.read(limit: GitCredential.maximumSize, what: "the credential description")
            do {
                let request = try GitCredential(parsing: input)
                // Nothing Keysmith can name (another protocol, no host): not ours, and no store is opened.
                guard request.isKeepable else { return }
                let opened = try store.openStore()
                if let locking = opened as? any ExclusiveLocking, let host = request.host,
                   try oauth(request, host: host, git: GitTokenCredentials(tokens: ProviderTokens(keeper: makeKeeper(locking))))
                {
                    return
                }
                switch action {
                case "get":
                    let now = Int64(Date().timeIntervalSince1970)
                    if let answer = try GitCredential.get(request, in: opened, now: now) {
                        Terminal.write(answer.encoded(), to: .standardOutput)
                    }
                case "store":
                    try GitCredential.store(request, in: opened)
                default:
                    try GitCredential.erase(request, in: opened)
                }
            } catch let error as KeysmithError {
                // git goes on without us (its next helper, or the prompt): say why, print nothing.
                Terminal.write(Array("keysmith: git-credential \(action): \(error.message)\n".utf8), to: .standardError)
            } catch let error as ProviderError {
                Terminal.write(Array("keysmith: git-credential \(action): \(error.description)\n".utf8), to: .standardError)
            }
        }

        /// A host bound to a provider (`provider add --git-host`): its credential is a token.
        /// `get` gives a fresh access token (signing in with the device flow on git's terminal
        /// when there is no token and git may prompt); `erase` after a rejection refreshes
        /// once and never deletes the grant; `store` keeps nothing (the password is the token).
        ///
        /// - Returns: `false` when the host is not a provider's (its credential is a plain one).
        func oauth(_ request: GitCredential, host: String, git: GitTokenCredentials) throws -> Bool {
            guard let provider = try git.provider(protocol: request.protocol, host: host) else { return false }
            let (scheme, username, password) = (request.protocol, request.username, request.password)
            switch action {
            case "get":
                var answer = try runAsync { try await git.credential(protocol: scheme, host: host, username: username) }
                if answer == nil, let signedIn = try signIn(at: provider, account: username ?? "git", git: git) {
                    answer = try runAsync { try await git.credential(protocol: scheme, host: host, username: signedIn) }
                }
                guard let answer else {
                    let account = username.map { " for \(OneLine.unicodeEscaped($0))" } ?? ""
                    Terminal.write(Array("keysmith: git-credential get: the provider \(OneLine.unicodeEscaped(provider.name)) keeps no token\(account); sign in with `keysmith token login --provider \(OneLine.unicodeEscaped(provider.name)) --account \(OneLine.unicodeEscaped(username ?? "ACCOUNT"))`\n".utf8), to: .standardError)
                    return true
                }
                let credential = GitCredential(username: answer.username, password: answer.password,
                                               passwordExpiry: answer.expiry.map { Int64($0.timeIntervalSince1970) })
                Terminal.write(credential.encoded(), to: .standardOutput)
            case "erase":
                _ = try runAsync { try await git.rejected(protocol: scheme, host: host, username: username, password: password) }
            default:
                break  // store: the password git approved is the token Keysmith keeps already.
            }
            return true
        }

        /// The longest a sign-in started by git waits for its approval (or for another git
        /// process's sign-in at the same provider and account).
        static let signInLimit: TimeInterval = 15 * 60

        /// The device flow on git's terminal, when git may prompt (`GIT_TERMINAL_PROMPT` is not
        /// off) and there is a terminal to prompt on (`/dev/tty`): the code and where to enter it
        /// go to the terminal, never to git. Returns the account signed in, or `nil` when no
        /// sign-in could start here.
        func signIn(at provider: OAuthProvider, account: String, git: GitTokenCredentials) throws -> String? {
            // Unset: git may prompt; set, git's own reading (empty, 0, false, no, off: it may not).
            if let prompt = ProcessInfo.processInfo.environment["GIT_TERMINAL_PROMPT"]?.lowercased(),
               ["", "0", "false", "no", "off"].contains(prompt) { return nil }
            guard provider.deviceAuthorizationEndpoint != nil, let terminal = FileHandle(forWritingAtPath: "/dev/tty") else { return nil }
            defer { try? terminal.close() }
            // One sign-in at a time per provider and account: git processes started together
            // (submodules, `fetch --all`) wait for the first one's, and then use its token.
            guard let locks = git.tokens.keeper.store as? any ExclusiveLocking else { return nil }
            let waitUntil = Date().addingTimeInterval(Self.signInLimit)
            var held = try locks.tryExclusiveLock(named: "sign-in \(provider.name)\u{0}\(account)")
            while held == nil, Date() < waitUntil {
                Thread.sleep(forTimeInterval: 0.2)
                held = try locks.tryExclusiveLock(named: "sign-in \(provider.name)\u{0}\(account)")
            }
            guard let lock = held else { return nil }
            defer { lock.release() }
            if try git.tokens.keeper.token(service: provider.name, account: account) != nil { return account }
            let scopes = Set(try parseScopes(provider.gitScope.map { [$0] } ?? []))
            let signIn = try ProviderSignIn(keeper: git.tokens.keeper, provider: provider.name)
            var started = try runAsync { try await signIn.startDevice(scopes: scopes) }
            // git waits for this helper: a sign-in nobody approves ends after 15 minutes at most,
            // whatever the provider's device code allows (it may allow a day).
            started.expiresAt = min(started.expiresAt, Date().addingTimeInterval(Self.signInLimit))
            var text = "keysmith: git needs a token from \(OneLine.unicodeEscaped(provider.name)): open \(OneLine.unicodeEscaped(started.verificationURI)) and enter the code "
                + "\(OneLine.unicodeEscaped(started.userCode))"
            if let complete = started.verificationURIComplete { text += " (or open \(OneLine.unicodeEscaped(complete)))" }
            try? terminal.write(contentsOf: Data((text + ". Waiting for the approval (at most 15 minutes; Ctrl-C stops it)…\n").utf8))
            let authorization = started
            _ = try runAsync { try await signIn.completeDevice(authorization, account: account) }
            try? terminal.write(contentsOf: Data("keysmith: signed in; the token for \(OneLine.unicodeEscaped(account)) at \(OneLine.unicodeEscaped(provider.name)) is kept.\n".utf8))
            return account
        }
    }
}
