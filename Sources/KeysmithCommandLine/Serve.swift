import ArgumentParser
import Dispatch
import FoundationEssentials
import Keysmith
import KeysmithCredentials
import KeysmithCrypto
import KeysmithSystem
import KeysmithVault
import Synchronization

/// The agent of `keysmith serve`: where it listens for a vault, and the one-line JSON requests a
/// command sends it (docs/serve.md, "The agent protocol").
package enum Agent {
    /// A request: one JSON object on one line.
    struct Request: Codable {
        /// `status`, `get`, `lock` or `unlock`.
        var op: String
        /// For `get`: the item, as `secret list --json` names it.
        var item: ItemDocument?
        /// For `unlock` of a serve opened with a passphrase: the passphrase's bytes, base64.
        var passphraseBase64: String?
    }

    /// An answer: one JSON object on one line.
    struct Answer: Codable {
        var ok: Bool
        /// The serve's process id.
        var pid: Int32
        /// Whether the serve is locked (its key gone from memory) after the request.
        var locked: Bool
        /// For `get`: the secret, base64.
        var secretBase64: String?
        /// For a failure: the error's kind (`KeysmithError.Code`'s name) and its message.
        var code: String?
        var message: String?
    }

    /// The directory of the agents' sockets: `$XDG_RUNTIME_DIR/keysmith`, else
    /// `/tmp/keysmith-UID`; made 0700 when `create`, and refused unless this user owns it with
    /// no permission for others (a directory someone else made could hold a false agent).
    static func directory(create: Bool) throws -> String {
        let base: String
        if let runtime = System.environment("XDG_RUNTIME_DIR"), runtime.hasPrefix("/") {
            base = runtime + "/keysmith"
        } else {
            base = "/tmp/keysmith-\(System.userID)"
        }
        if create { try System.mkdir(base, mode: 0o700) }
        guard System.isRealDirectory(base), let status = try System.status(base), status.isDirectory, status.owner == System.userID,
              status.mode & 0o077 == 0
        else {
            throw KeysmithError(.storeUnavailable, "\(base) must be a directory of this user's with mode 0700 (it holds the agent's socket); "
                                + "fix or remove it")
        }
        return base
    }

    /// The socket and the lock file of the agent serving the vault at `vault` (named by a
    /// digest of its canonical path, so two spellings of one vault meet one agent).
    static func paths(vault: String, create: Bool = false) throws -> (socket: String, lock: String) {
        let canonical = System.canonicalPath(vault) ?? vault
        let name = "agent-" + Array(SHA256.hash(Array(canonical.utf8)).prefix(8)).hexString
        let directory = try directory(create: create)
        return (directory + "/" + name + ".sock", directory + "/" + name + ".lock")
    }

    /// Sends `request` to the agent serving `vault` and returns its answer; `nil` when no
    /// agent serves it (no socket, or one left by a serve that is gone).
    static func ask(vault: String, _ request: Request) throws -> Answer? {
        // No agent directory of this user's (none, a symbolic link, or one that is not private),
        // or a socket path the kernel cannot take: no agent.
        guard let socket = try? paths(vault: vault).socket else { return nil }
        let connection: UnixConnection
        do {
            guard let connected = try UnixConnection.connect(socket, timeout: .seconds(5)) else { return nil }
            connection = connected
        } catch let error as SystemError where error.isTimedOut {
            throw KeysmithError(.timedOut, "the keysmith serve for \(vault) did not take the connection within 5 s (is it stopped?)")
        } catch {
            return nil
        }
        // Only an agent of this user's is believed (the directory is private, and the kernel
        // says who listens): a false agent could hand out secrets of its choosing, or be sent
        // the passphrase by `keysmith unlock`.
        guard let server = connection.peer(), server.uid == System.userID else {
            throw KeysmithError(.storeUnavailable, "the agent socket \(socket) is not served by this user: refusing it; remove it")
        }
        var line = Array(try JSONEncoder().encode(request))
        defer { cleanse(&line) }
        guard connection.writeLine(line), var reply = connection.readLine(limit: 64 << 20, timeout: .seconds(30)) else {
            throw KeysmithError(.storeUnavailable, "the keysmith serve for \(vault) did not answer; stop it, or try again")
        }
        defer { cleanse(&reply) }
        guard let answer = try? JSONDecoder().decode(Answer.self, from: Data(reply)) else {
            throw KeysmithError(.storeUnavailable, "the keysmith serve for \(vault) answered something that is not an agent's answer")
        }
        return answer
    }

    /// The error an answer that failed carries, with its kind.
    static func error(_ answer: Answer) -> KeysmithError {
        let code = codes.first { $0.description == answer.code } ?? .ioFailure
        return KeysmithError(code, answer.message ?? "the agent failed")
    }

    /// Every kind an answer may name (by ``KeysmithError/Code/description``).
    static let codes: [KeysmithError.Code] = [
        .duplicateItem, .itemNotFound, .authenticationFailed, .corruptData, .storeLocked, .storeUnavailable, .invalidArgument,
        .ioFailure, .timedOut, .invalidScope, .malformedData, .writeConflict, .limitExceeded, .partiallyApplied,
    ]
}

extension KeysmithCommand {
    /// Opens the vault once and answers the `keysmith` command's reads through a private Unix
    /// socket, so a passphrase vault costs one unlock per session.
    struct Serve: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "serve",
            abstract: "Unlock the vault once and answer `keysmith secret get` for it (an agent), until stopped.",
            discussion: """
                The vault is opened with the usual credential (--keyfile, KEYSMITH_KEYFILE, --passphrase-fd, \
                KEYSMITH_PASSPHRASE, the terminal) or a systemd credential ($CREDENTIALS_DIRECTORY/keysmith.key, \
                else keysmith.passphrase). The agent listens on $XDG_RUNTIME_DIR/keysmith/agent-HASH.sock \
                (else /tmp/keysmith-UID/), mode 0600, and answers only processes of this user. `keysmith secret get` \
                for this vault asks it instead of unlocking again; `keysmith lock` drops the key from memory, \
                `keysmith unlock` brings it back. SIGINT or SIGTERM stops it. See docs/serve.md.
                """)

        @OptionGroup var store: StoreOptions

        @Option(name: .customLong("idle-lock"), help: ArgumentHelp("Lock (drop the key from memory) after this long without a request (default: never).", valueName: "duration"))
        var idleLock: String?

        func validate() throws {
            if let idleLock { _ = try parseDuration(idleLock) }
        }

        func run() throws {
            guard try store.choice() == .vault else {
                throw KeysmithError.invalidArgument("keysmith serve serves the file vault only so far (docs/serve.md); "
                                                    + "the Secret Service and PostgreSQL are not served yet")
            }
            let path = store.vaultPath
            guard (try? System.status(path))??.isDirectory == true else {
                throw KeysmithError(.storeUnavailable, "there is no vault at \(path); create one with `keysmith init`")
            }
            let (socketPath, lockPath) = try Agent.paths(vault: path, create: true)
            // One serve per vault: the lock file is held for the serve's life.
            let lockFD = try System.open(lockPath, flags: OpenFlags.readWrite | OpenFlags.create | OpenFlags.noFollow, mode: 0o600)
            guard try System.tryLockExclusive(lockFD, path: lockPath) else {
                let holder = System.lockHolder(lockFD).map { " (process \($0))" } ?? ""
                throw KeysmithError(.duplicateItem, "another keysmith serve\(holder) already serves \(path); stop it first")
            }
            var (credential, passphrase) = try serveCredential()
            let agent = AgentState(path: path, credential: credential, lockWait: try store.lockWait(),
                                   idleLock: try idleLock.map { .milliseconds(Int64(try parseDuration($0) * 1000)) })
            defer { if passphrase != nil { cleanse(&passphrase!) } }
            try agent.unlock(passphrase: passphrase)
            if passphrase != nil { cleanse(&passphrase!) }
            let listener = try UnixSocketListener(path: socketPath)
            // SIGINT and SIGTERM stop the serve: the socket is removed, the key dropped.
            for signal in [System.interruptSignal, System.terminateSignal] { System.ignoreSignal(signal) }
            let stop = { (_: Int32) in
                listener.close()
                agent.lock()
            }
            // Their own queue: a pool busy with connections must not delay a stop.
            let signalQueue = DispatchQueue(label: "keysmith serve signals")
            let sources = [System.interruptSignal, System.terminateSignal].map { signal in
                let source = DispatchSource.makeSignalSource(signal: signal, queue: signalQueue)
                source.setEventHandler { stop(signal) }
                source.resume()
                return source
            }
            Terminal.write(Array("keysmith: serving \(path) on \(socketPath) (process \(System.processID))\n".utf8), to: .standardError)
            agent.startIdleTimer()
            // At most 64 requests at a time: more connections wait in the listen queue.
            let slots = DispatchSemaphore(value: 64)
            while let connection = try listener.accept() {
                slots.wait()
                DispatchQueue.global().async {
                    agent.handle(connection)
                    slots.signal()
                }
            }
            _ = sources
            System.close(lockFD)
        }

        /// The credential, and the passphrase for the first unlock when it is one: a systemd
        /// credential when `$CREDENTIALS_DIRECTORY` holds one, else the usual sources (prompting
        /// on the terminal).
        func serveCredential() throws -> (AgentState.Credential, [UInt8]?) {
            if let directory = System.environment("CREDENTIALS_DIRECTORY"), !directory.isEmpty {
                if (try? System.status(directory + "/keysmith.key")) ?? nil != nil { return (.keyfile(directory + "/keysmith.key"), nil) }
                if var bytes = try System.readFile(directory + "/keysmith.passphrase", atMost: 1 << 20) {
                    while let last = bytes.last, last == 10 || last == 13 { bytes.removeLast() }
                    return (.passphrase, bytes)
                }
            }
            guard var source = try store.keySources(prompt: "Vault passphrase: ").resolve() else {
                throw KeysmithError(.storeLocked, "no credential for the vault: use --keyfile, --passphrase-fd, KEYSMITH_PASSPHRASE or a terminal")
            }
            defer { source.wipe() }
            switch source {
            case .keyfile(let path): return (.keyfile(path), nil)
            case .passphrase(let bytes, _): return (.passphrase, bytes)
            }
        }
    }

    /// Drops the key of the agent serving the vault.
    struct Lock: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "lock", abstract: "Lock the keysmith serve for the vault: its key is dropped from memory until `keysmith unlock`.")

        @OptionGroup var store: StoreOptions

        func run() throws {
            guard let answer = try Agent.ask(vault: store.vaultPath, Agent.Request(op: "lock")) else {
                throw KeysmithError(.storeUnavailable, "no keysmith serve serves \(store.vaultPath)")
            }
            guard answer.ok else { throw Agent.error(answer) }
            print("Locked the keysmith serve for \(store.vaultPath) (process \(answer.pid)).")
        }
    }

    /// Gives the agent serving the vault its key again.
    struct Unlock: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "unlock",
            abstract: "Unlock the keysmith serve for the vault: the passphrase (from --passphrase-fd, KEYSMITH_PASSPHRASE or the terminal) goes to it over its private socket; a serve opened with a keyfile reads it again.")

        @OptionGroup var store: StoreOptions

        func run() throws {
            guard let status = try Agent.ask(vault: store.vaultPath, Agent.Request(op: "status")) else {
                throw KeysmithError(.storeUnavailable, "no keysmith serve serves \(store.vaultPath)")
            }
            var request = Agent.Request(op: "unlock")
            if status.message == "passphrase" {
                guard var source = try store.keySources(prompt: "Vault passphrase: ").resolve(), case .passphrase(let bytes, _) = source else {
                    throw KeysmithError(.storeLocked, "the serve was opened with a passphrase: give it with --passphrase-fd, KEYSMITH_PASSPHRASE or on a terminal")
                }
                defer { source.wipe() }
                request.passphraseBase64 = Data(bytes).base64EncodedString()
            }
            guard let answer = try Agent.ask(vault: store.vaultPath, request) else {
                throw KeysmithError(.storeUnavailable, "no keysmith serve serves \(store.vaultPath)")
            }
            guard answer.ok else { throw Agent.error(answer) }
            print("Unlocked the keysmith serve for \(store.vaultPath) (process \(answer.pid)).")
        }
    }
}

/// What a serve holds: the vault while unlocked, how to open it again, and when it was last used.
final class AgentState: Sendable {
    /// How the serve opens the vault (again, at `unlock`).
    enum Credential: Sendable {
        /// A keyfile, read again at each unlock.
        case keyfile(String)
        /// A passphrase: never kept; each unlock is given it, and derives the key again (a
        /// wrong one fails as an open with it does).
        case passphrase
    }

    let path: String
    let credential: Credential
    let lockWait: VaultLockWait
    let idleLock: Duration?
    private let state = Mutex<(vault: FileVault?, lastUse: ContinuousClock.Instant)>((nil, .now))

    init(path: String, credential: Credential, lockWait: VaultLockWait, idleLock: Duration?) {
        self.path = path
        self.credential = credential
        self.lockWait = lockWait
        self.idleLock = idleLock
    }

    /// Opens the vault: with the serve's keyfile, or with `passphrase` (a serve opened with a
    /// passphrase keeps none: it is given at each unlock).
    func unlock(passphrase: [UInt8]?) throws {
        let vaultCredential: VaultCredential
        switch credential {
        case .keyfile(let keyfile):
            vaultCredential = .keyfile(at: keyfile)
        case .passphrase:
            guard let passphrase else {
                throw KeysmithError(.storeLocked, "this serve was opened with a passphrase: `keysmith unlock` asks for it")
            }
            vaultCredential = .passphrase(bytes: passphrase)
        }
        let vault = try FileVault.open(at: path, credential: vaultCredential)
        vault.lockWait = lockWait
        state.withLock { $0 = (vault, .now) }
    }

    /// Drops the vault (and with it the keys it derived).
    func lock() {
        state.withLock { $0.vault = nil }
    }

    var isLocked: Bool { state.withLock { $0.vault == nil } }

    /// Locks after `idleLock` without a request.
    func startIdleTimer() {
        guard let idleLock else { return }
        DispatchQueue.global().async { [self] in
            while true {
                System.sleep(microseconds: 200_000)
                state.withLock { state in
                    if state.vault != nil, ContinuousClock.now - state.lastUse >= idleLock { state.vault = nil }
                }
            }
        }
    }

    /// Answers one connection: only a process of this user is answered.
    func handle(_ connection: UnixConnection) {
        let pid = System.processID
        func answer(_ value: Agent.Answer) {
            guard var line = try? JSONEncoder().encode(value) else { return }
            connection.writeLine(Array(line))
            line.resetBytes(in: 0..<line.count)
        }
        func failure(_ error: KeysmithError) {
            answer(Agent.Answer(ok: false, pid: pid, locked: isLocked, code: error.code.description, message: error.message))
        }
        guard let peer = connection.peer(), peer.uid == System.userID else {
            return failure(KeysmithError(.authenticationFailed, "this serve answers only processes of its own user"))
        }
        guard var line = connection.readLine(limit: 2 << 20, timeout: .seconds(5)) else {
            return failure(KeysmithError(.malformedData, "no request line came within 5 s (at most 2 MiB)"))
        }
        defer { cleanse(&line) }
        guard var request = try? JSONDecoder().decode(Agent.Request.self, from: Data(line)) else {
            return failure(KeysmithError(.malformedData, "the request is not an agent request (docs/serve.md)"))
        }
        defer { request.passphraseBase64 = nil }
        do {
            switch request.op {
            case "status":
                let kind = { if case .passphrase = credential { return "passphrase" } else { return "keyfile" } }()
                answer(Agent.Answer(ok: true, pid: pid, locked: isLocked, message: kind))
            case "lock":
                lock()
                answer(Agent.Answer(ok: true, pid: pid, locked: true))
            case "unlock":
                var given = request.passphraseBase64.flatMap { Data(base64Encoded: $0) }.map { Array($0) }
                defer { if given != nil { cleanse(&given!) } }
                try unlock(passphrase: given)  // a passphrase serve refuses an unlock without one
                answer(Agent.Answer(ok: true, pid: pid, locked: false))
            case "get":
                guard let document = request.item else { throw KeysmithError(.malformedData, "a get names its item") }
                let key = try document.key()
                let vault = state.withLock { state -> FileVault? in
                    if state.vault != nil { state.lastUse = .now }
                    return state.vault
                }
                guard let vault else {
                    throw KeysmithError(.storeLocked, "the keysmith serve for \(path) (process \(pid)) is locked: run `keysmith unlock`")
                }
                guard let record = try vault.read(key) else { throw KeysmithError(.itemNotFound, "\(key) does not exist") }
                var bytes = Array(record.secret)
                defer { cleanse(&bytes) }
                answer(Agent.Answer(ok: true, pid: pid, locked: false, secretBase64: Data(bytes).base64EncodedString()))
            default:
                throw KeysmithError(.malformedData, "unknown request \(OneLine.unicodeEscaped(String(request.op.prefix(32))))")
            }
        } catch let error as KeysmithError {
            failure(error)
        } catch {
            failure(KeysmithError(.ioFailure, "\(error)"))
        }
    }
}
