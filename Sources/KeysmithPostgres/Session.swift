import Keysmith
import KeysmithSystem
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PostgresNIO
import Synchronization

/// A conflict with a concurrent transaction: the batch is retried from its reads.
struct RetryableConflict: Error {
    let state: String

    /// Runs `body` (a whole transaction), and again, after a short random pause, when it
    /// conflicted with a concurrent transaction (a deadlock, a serialization failure, a unique
    /// violation on a row another made first), up to 20 times; then `failure(state)`. So no
    /// public entry point ever throws this internal error: a reader, a batch and the schema's
    /// installer racing each other's locks all retry.
    /// From async code the pause sleeps the task (`Task.sleep`), never a thread, and ends early
    /// with `CancellationError` when the task is cancelled (``Blocking/pause(_:)``).
    /// `conflicted` is told of each conflict's state.
    static func retrying<T>(_ body: () async throws -> T, failure: (String) -> KeysmithError,
                            conflicted: (String) -> Void = { _ in }) async throws -> T {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await body()
            } catch let error as RetryableConflict where attempt < 20 {
                conflicted(error.state)
                try await Blocking.pause(.microseconds(Int.random(in: 200...2_000) * attempt))
            } catch let error as RetryableConflict {
                throw failure(error.state)
            }
        }
    }
}

/// One connection, used by one operation at a time (a ``SessionPool`` lends it out), awaited
/// without blocking a thread: each statement's answer is awaited on its event loop.
final class Session: @unchecked Sendable {
    // @unchecked: lent to one operation at a time by SessionPool (or used by one caller during
    // set-up); the connection of a handle's advisory locks takes statements from several tasks
    // at once, which PostgresNIO's connection queues and answers in order.
    let connection: PostgresConnection
    let logger: Logger
    let description: String
    /// How long one statement may take before the connection is given up.
    var statementTimeout: Duration = .seconds(120)

    private init(connection: PostgresConnection, logger: Logger, description: String) {
        self.connection = connection
        self.logger = logger
        self.description = description
    }

    /// Connects; `application` names the connection in `pg_stat_activity` (an operator can see
    /// which connections are Keysmith's, and which watcher is which).
    static func connect(_ settings: PostgresConnectionSettings, logger: Logger, application: String = "keysmith") async throws -> Session {
        var configuration: PostgresConnection.Configuration
        if let problem = settings.tlsProblem { throw KeysmithError.invalidArgument(problem) }
        if let socket = settings.socketPath {
            configuration = .init(unixSocketPath: socket, username: settings.user, password: settings.password, database: settings.database)
        } else {
            configuration = .init(host: settings.host ?? "localhost", port: settings.port, username: settings.user,
                                  password: settings.password, database: settings.database, tls: try tls(settings))
        }
        configuration.options.additionalStartupParameters = [("application_name", String(application.prefix(63)))]
        do {
            let connecting: EventLoopFuture<PostgresConnection> = PostgresConnection.connect(
                on: MultiThreadedEventLoopGroup.singleton.any(), configuration: configuration, id: 1, logger: logger)
            do {
                let connection = try await connecting.value(timeout: .seconds(30))
                let session = Session(connection: connection, logger: logger, description: settings.description)
                try await session.checkClientWhileRunning()
                return session
            } catch {
                // Given up (cancelled, or timed out) while the connection may still be made: close
                // it when it is, never leave it open and unowned.
                connecting.whenSuccess { connection in
                    let closing: EventLoopFuture<Void> = connection.close()
                    closing.whenComplete { _ in withExtendedLifetime(connection) {} }
                }
                throw error
            }
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            throw KeysmithError(.storeUnavailable, "cannot connect to PostgreSQL (\(OneLine.escaped(settings.description)), \(settings.protection)): \(Session.reason(error))")
        }
    }

    /// Asks the server to check, every second while a statement of this connection runs,
    /// that the connection is still open (`client_connection_check_interval`, PostgreSQL 14
    /// and later, on systems that can tell). A statement given up by closing its connection (a
    /// cancelled task's: `Transaction.failure`) is then ended within about a second, with the
    /// locks its transaction took, even while it waits for a lock itself; without it, the
    /// backend would wait on, holding them, until it next wrote to the connection. An older
    /// server (no such setting: no row), one that cannot check (the setting refused), or
    /// anything between that refuses the statement keeps its default, and the connection is
    /// used as it is; only a connection lost, timed out or cancelled fails the connect.
    private func checkClientWhileRunning() async throws {
        do {
            try await Transaction(session: self).execute("""
                SELECT set_config(name, '1000', false) FROM pg_settings WHERE name = 'client_connection_check_interval'
                """)
        } catch let error as KeysmithError where !isClosed {
            // Refused as a statement (outside a transaction): nothing is left to undo. (A
            // timeout or a lost connection closes the session, and is thrown below.)
            logger.debug("the server does not check for closed connections while a statement runs", metadata: ["reason": "\(error.message)"])
        } catch {
            close()
            throw error
        }
    }

    /// The TLS of a TCP connection: none for ``PostgresConnectionSettings/TLSMode/disable``;
    /// otherwise required (a server that offers none is refused, never used in plain text),
    /// TLS 1.2 at least, verifying the server as the mode says against `trustedRoots` or the
    /// system's roots.
    private static func tls(_ settings: PostgresConnectionSettings) throws -> PostgresConnection.Configuration.TLS {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv12
        switch settings.tls {
        case .disable: return .disable
        case .require: configuration.certificateVerification = .none
        case .verifyCA: configuration.certificateVerification = .noHostnameVerification
        case .verifyFull: configuration.certificateVerification = .fullVerification
        }
        if let roots = settings.trustedRoots {
            configuration.trustRoots = .certificates(try trustedRoots(roots))
        }
        do {
            return .require(try NIOSSLContext(configuration: configuration))
        } catch {
            throw KeysmithError(.storeUnavailable, "cannot set up TLS for PostgreSQL (\(settings.description)): \(error)")
        }
    }

    /// The certificates of a PEM file of trusted roots, read here (a regular file of at most
    /// 4 MiB; a FIFO or a device is refused, never waited on), so a missing or malformed file is
    /// named now rather than reported as a failed handshake.
    private static func trustedRoots(_ path: String) throws -> [NIOSSLCertificate] {
        let problem: String
        do {
            if let (fd, _) = try System.openRegularFile(path, maximumSize: 4 << 20, followingLinks: true) {
                defer { System.close(fd) }
                let certificates = try? NIOSSLCertificate.fromPEMBytes(try System.readAll(fd, path: path, atMost: 4 << 20))
                if let certificates, !certificates.isEmpty { return certificates }
                problem = "holds no PEM certificate"
            } else {
                problem = "does not exist"
            }
        } catch {
            problem = "cannot be read (\(error))"
        }
        throw KeysmithError.invalidArgument("the trusted roots file \(path) (sslrootcert) \(problem)")
    }

    /// Set by ``close()``: the connection is never used again, even before the driver has
    /// finished closing it.
    private let abandoned = Atomic(false)

    var isClosed: Bool { abandoned.load(ordering: .acquiring) || connection.isClosed }

    /// Closes the connection without waiting for the server to see it go (a `deinit` or a
    /// `defer` cannot wait).
    func close() {
        abandoned.store(true, ordering: .releasing)
        let connection = connection
        let closing: EventLoopFuture<Void> = connection.close()
        // The connection must outlive its closing (the driver checks that it is closed when freed).
        closing.whenComplete { _ in withExtendedLifetime(connection) {} }
    }


    /// The server's reason, without the query text or its bindings (they may hold ciphertext).
    static func reason(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            // The server's words, kept on one line: before TLS (a refusal answering the request
            // for it) they come from whoever answered, unauthenticated, and may hold line breaks
            // or terminal escapes meant to forge output.
            if let message = error.serverInfo?[.message] { return OneLine.escaped(message) }
            if error.code == .sslUnsupported { return "the server does not offer TLS (sslmode asks for it)" }
            if error.code == .authMechanismRequiresPassword {
                return "the server asks for a password and the URL gives none (postgresql://USER:PASSWORD@HOST/DATABASE; docs/postgres.md)"
            }
            if let underlying = error.underlying, let tls = tlsReason(underlying) { return tls }
            if let underlying = error.underlying, let connection = connectionReason(underlying) { return connection }
            if error.code == .serverClosedConnection { return "the server closed the connection" }
            return String(describing: error.code)
        }
        return tlsReason(error) ?? connectionReason(error) ?? String(describing: type(of: error))
    }

    /// Why a connection could not be made, in words: refused, timed out, a name not found, a
    /// socket that is not there.
    private static func connectionReason(_ error: any Error) -> String? {
        if let error = error as? NIOConnectionError {
            if error.dnsAError != nil || error.dnsAAAAError != nil, error.connectionErrors.isEmpty {
                return "the host name \(OneLine.escaped(error.host)) was not found"
            }
            let reasons = Set(error.connectionErrors.compactMap { connectionReason($0.error) })
            if reasons.count == 1, let reason = reasons.first { return reason }
            if !reasons.isEmpty { return reasons.sorted().joined(separator: "; ") }
            return "no address of \(OneLine.escaped(error.host)) accepted a connection"
        }
        if case ChannelError.connectTimeout(let timeout) = error {
            return "the connection timed out (no answer in \(timeout.nanoseconds / 1_000_000_000) s)"
        }
        if error is SocketAddressError { return "the host name was not found" }
        if let error = error as? IOError {
            switch error.errnoCode {
            case ECONNREFUSED: return "the connection was refused (no server listens there)"
            case ENOENT: return "no server socket at that path (is the server running, and the directory right?)"
            case EACCES, EPERM: return "permission denied on the server's socket"
            case ETIMEDOUT: return "the connection timed out"
            case EHOSTUNREACH, ENETUNREACH: return "the host cannot be reached"
            default: return "the connection failed (errno \(error.errnoCode))"
            }
        }
        return nil
    }

    /// A failed TLS handshake, in words: a certificate that did not verify, or a name it does
    /// not carry.
    private static func tlsReason(_ error: any Error) -> String? {
        if let error = error as? NIOSSLExtraError, error == .failedToValidateHostname {
            return "TLS: the server's certificate does not name the host connected to (sslmode=verify-full)"
        }
        if error is NIOSSLError {
            return "TLS: the handshake failed: the server's certificate did not verify against the trusted roots "
                + "(sslrootcert, else the system's), or the server broke off TLS"
        }
        return nil
    }

    static func sqlState(_ error: any Error) -> String? {
        (error as? PSQLError)?.serverInfo?[.sqlState]
    }

    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws.
    /// Serialization failures, deadlocks and unique violations become ``RetryableConflict``; a
    /// lost connection `KeysmithError.Code.storeUnavailable` (whether the commit happened is
    /// then unknown only if the connection dropped during COMMIT itself).
    ///
    /// `snapshot`: a read-only transaction whose statements all see one snapshot (`REPEATABLE
    /// READ`), for a read that asks two questions of the database (the rows, then the change
    /// feed about the rows it did not find) and must not see a writer's commit between them.
    ///
    /// Cancelling the task ends the transaction at its next statement with `CancellationError`,
    /// rolled back; once `COMMIT` is sent it is awaited to its end, so a cancelled write either
    /// committed (and returns normally) or throws and changed nothing.
    func transaction<T>(snapshot: Bool = false, _ body: (Transaction) async throws -> T) async throws -> T {
        try Task.checkCancellation()
        let transaction = Transaction(session: self)
        try await transaction.execute(snapshot ? "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" : "BEGIN ISOLATION LEVEL READ COMMITTED")
        do {
            let result = try await body(transaction)
            // The last point where cancelling rolls the batch back.
            try Task.checkCancellation()
            try await transaction.execute("COMMIT", cancellable: false)
            return result
        } catch {
            // Bounded: after a server crash the connection may not know yet that it is dead, and an
            // unbounded wait here hung a writer for good (found by the server-crash test).
            if !isClosed {
                do {
                    _ = try await connection.query("ROLLBACK", logger: logger).value(timeout: .seconds(5), cancellable: false)
                } catch {
                    // A connection in an unknown state is given up, not lent again.
                    close()
                }
            }
            throw error
        }
    }
}

/// Statements inside a transaction.
struct Transaction {
    let session: Session

    /// Runs a statement and awaits its rows; with `cancellable` (the default), cancelling the
    /// task ends the wait with `CancellationError`.
    @discardableResult
    func execute(_ query: PostgresQuery, cancellable: Bool = true) async throws -> [PostgresRow] {
        // A statement on a connection the server closed may never be answered: fail at once.
        guard !session.isClosed else {
            throw KeysmithError(.storeUnavailable, "PostgreSQL (\(session.description)) closed the connection")
        }
        if cancellable { try Task.checkCancellation() }
        do {
            return try await session.connection.query(query, logger: session.logger)
                .value(timeout: session.statementTimeout, cancellable: cancellable).rows
        } catch {
            throw failure(error)
        }
    }

    /// A statement sent and not answered yet (``send(_:touching:)``).
    struct Pending {
        /// `nil` when the connection was already closed.
        let future: EventLoopFuture<PostgresQueryResult>?
        /// For a statement that answers with a count: the rows it must have touched.
        let touching: Int?
    }

    /// Sends a statement without waiting for its answer: the server runs it while the caller
    /// goes on, and statements on one connection run in the order they were sent. Every
    /// statement sent must be waited for (``wait(_:)``) before the transaction commits.
    func send(_ query: PostgresQuery, touching: Int?) -> Pending {
        guard !session.isClosed else { return Pending(future: nil, touching: touching) }
        return Pending(future: session.connection.query(query, logger: session.logger), touching: touching)
    }

    /// The answer to a statement ``send(_:touching:)`` sent, failing as ``execute(_:)`` does.
    func wait(_ pending: Pending) async throws -> [PostgresRow] {
        guard let future = pending.future else {
            throw KeysmithError(.storeUnavailable, "PostgreSQL (\(session.description)) closed the connection")
        }
        do {
            return try await future.value(timeout: session.statementTimeout).rows
        } catch {
            throw failure(error)
        }
    }

    /// What a statement's failure means to the caller.
    private func failure(_ error: any Error) -> any Error {
        if error is CancellationError {
            // The statement may still be running, or waiting for a lock: the connection is given
            // up, so the server rolls its transaction back and no later statement queues behind it.
            session.close()
            return error
        }
        if error is WaitTimedOut {
            session.close()
            return KeysmithError(.storeUnavailable, "PostgreSQL (\(session.description)) did not answer within \(session.statementTimeout); the connection was closed")
        }
        if let state = Session.sqlState(error), ["40001", "40P01", "23505"].contains(state) {
            return RetryableConflict(state: state)
        }
        let state = Session.sqlState(error)
        // Connection exceptions (08…) and operator intervention (57…: a terminated backend,
        // a server shutting down) mean the server is gone for now, not that the statement was wrong.
        if session.isClosed || !(error is PSQLError) || state == nil || state!.hasPrefix("08") || state!.hasPrefix("57") {
            return KeysmithError(.storeUnavailable, "PostgreSQL (\(session.description)) failed: \(Session.reason(error))")
        }
        // An undefined table or column: no schema, or one older than this version.
        if state == "42P01" || state == "42703" {
            return KeysmithError(.storeUnavailable, "PostgreSQL (\(session.description)) has no Keysmith schema, or an older one; run `keysmith postgres init`")
        }
        return KeysmithError(.ioFailure, "PostgreSQL (\(session.description)) refused a statement: \(Session.reason(error))")
    }

    /// The next version number, from the one sequence all namespaces share, and the namespace's
    /// newest data key id (in the same round trip: a batch seals with the newest key).
    func nextVersion(namespace: [UInt8]) async throws -> (version: Int64, newestKey: Int32) {
        let namespaceBuffer = ByteBuffer(bytes: namespace)
        guard let row = try await execute("""
            SELECT nextval('keysmith_versions'), (SELECT max(key_id) FROM keysmith_data_keys WHERE namespace_id = \(namespaceBuffer))
            """).first else {
            throw KeysmithError(.ioFailure, "PostgreSQL returned no version")
        }
        let (version, newest) = try row.decode((Int64, Int32?).self)
        return (version, newest ?? 1)
    }
}

/// Raw SQL for tests that play the database administrator.
enum PostgresQueryText {
    static func raw(_ text: String) -> PostgresQuery { PostgresQuery(unsafeSQL: text) }
}

extension ByteBuffer {
    var bytes: [UInt8] { Array(readableBytesView) }
}
