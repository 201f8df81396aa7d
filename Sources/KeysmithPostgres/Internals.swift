import Keysmith
import KeysmithCrypto
import KeysmithSystem
import KeysmithCredentials
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PostgresNIO
import Dispatch
import Synchronization

/// The schema (docs/postgres.md). Every statement is idempotent.
enum PostgresSchema {
    /// The advisory lock that serializes `initialize`.
    static let initializationLock: Int64 = 0x6B65_7973_6D69_7468
    static let statements = [
        """
        CREATE TABLE IF NOT EXISTS keysmith_master (
            id smallint PRIMARY KEY CHECK (id = 1),
            kdf text NOT NULL CHECK (kdf IN ('key', 'scrypt')),
            salt bytea,
            log_n smallint,
            verifier bytea NOT NULL
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS keysmith_data_keys (
            namespace_id bytea NOT NULL,
            key_id integer NOT NULL,
            wrapped bytea NOT NULL,
            PRIMARY KEY (namespace_id, key_id)
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS keysmith_records (
            namespace_id bytea NOT NULL,
            blind_index bytea NOT NULL,
            version bigint NOT NULL,
            key_id integer NOT NULL,
            sealed bytea NOT NULL,
            PRIMARY KEY (namespace_id, blind_index)
        )
        """,
        // Databases made before identity keys: the column is added, and left empty (their
        // master key is their identity key) until a master-key rotation fills it.
        "ALTER TABLE keysmith_master ADD COLUMN IF NOT EXISTS identity_key bytea",
        "CREATE SEQUENCE IF NOT EXISTS keysmith_versions",
        """
        CREATE TABLE IF NOT EXISTS keysmith_changes (
            seq bigserial PRIMARY KEY,
            namespace_id bytea NOT NULL,
            blind_index bytea NOT NULL,
            version bigint NOT NULL,
            deleted boolean NOT NULL,
            sealed_key bytea NOT NULL,
            committed_at timestamptz NOT NULL DEFAULT now()
        )
        """,
        // Each change row's link in its namespace's chain (rows written before chaining have none).
        "ALTER TABLE keysmith_changes ADD COLUMN IF NOT EXISTS chain bytea",
        """
        CREATE TABLE IF NOT EXISTS keysmith_chain_heads (
            namespace_id bytea PRIMARY KEY,
            seq bigint NOT NULL,
            chain bytea NOT NULL
        )
        """,
        "CREATE INDEX IF NOT EXISTS keysmith_changes_by_namespace ON keysmith_changes (namespace_id, seq)",
        "CREATE INDEX IF NOT EXISTS keysmith_changes_by_item ON keysmith_changes (namespace_id, blind_index, version)",
        """
        CREATE TABLE IF NOT EXISTS keysmith_watchers (
            namespace_id bytea NOT NULL,
            watcher text NOT NULL,
            acked_seq bigint NOT NULL,
            seen_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (namespace_id, watcher)
        )
        """,
        // Audit entries: the same columns, but append-only. The trigger refuses updates, deletes
        // and truncation to every role that has not disabled it (only the owner can), and the
        // application role is granted INSERT and SELECT only (`grants`).
        """
        CREATE TABLE IF NOT EXISTS keysmith_audit (
            namespace_id bytea NOT NULL,
            blind_index bytea NOT NULL,
            version bigint NOT NULL,
            key_id integer NOT NULL,
            sealed bytea NOT NULL,
            PRIMARY KEY (namespace_id, blind_index)
        )
        """,
        """
        CREATE OR REPLACE FUNCTION keysmith_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION 'keysmith: % is append-only', TG_TABLE_NAME USING ERRCODE = 'KS001';
        END
        $$
        """,
        """
        CREATE OR REPLACE TRIGGER keysmith_audit_append_only BEFORE UPDATE OR DELETE ON keysmith_audit
        FOR EACH ROW EXECUTE FUNCTION keysmith_append_only()
        """,
        """
        CREATE OR REPLACE TRIGGER keysmith_audit_no_truncate BEFORE TRUNCATE ON keysmith_audit
        FOR EACH STATEMENT EXECUTE FUNCTION keysmith_append_only()
        """,
        """
        CREATE OR REPLACE TRIGGER keysmith_changes_append_only BEFORE UPDATE OR DELETE ON keysmith_changes
        FOR EACH ROW EXECUTE FUNCTION keysmith_append_only()
        """,
        """
        CREATE OR REPLACE TRIGGER keysmith_changes_no_truncate BEFORE TRUNCATE ON keysmith_changes
        FOR EACH STATEMENT EXECUTE FUNCTION keysmith_append_only()
        """,
        // A chain head only moves forward: the application role (which must update it) can never
        // set it back to an older change, nor change the link it names at the same change.
        """
        CREATE OR REPLACE FUNCTION keysmith_head_forward() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.namespace_id <> OLD.namespace_id OR NEW.seq < OLD.seq OR (NEW.seq = OLD.seq AND NEW.chain <> OLD.chain) THEN
                RAISE EXCEPTION 'keysmith: a chain head only moves forward' USING ERRCODE = 'KS002';
            END IF;
            RETURN NEW;
        END
        $$
        """,
        """
        CREATE OR REPLACE TRIGGER keysmith_chain_heads_forward BEFORE UPDATE ON keysmith_chain_heads
        FOR EACH ROW EXECUTE FUNCTION keysmith_head_forward()
        """,
    ]

    /// The channel every commit notifies, with the namespace id (hex) as payload.
    static let channel = "keysmith_changes"

    /// What the application's database role may do: read and write records and watcher
    /// acknowledgements, add data keys, and only add to the audit log and the change feed.
    /// `role` must be a plain SQL identifier (checked by the caller).
    static func grants(to role: String) -> [String] {
        [
            "REVOKE ALL ON keysmith_master, keysmith_data_keys, keysmith_records, keysmith_audit, keysmith_changes, keysmith_watchers, "
                + "keysmith_chain_heads FROM \(role)",
            "GRANT SELECT ON keysmith_master TO \(role)",
            "GRANT SELECT, INSERT ON keysmith_data_keys, keysmith_audit, keysmith_changes TO \(role)",
            "GRANT SELECT, INSERT, UPDATE, DELETE ON keysmith_records, keysmith_watchers TO \(role)",
            "GRANT SELECT, INSERT, UPDATE ON keysmith_chain_heads TO \(role)",
            "GRANT USAGE ON SEQUENCE keysmith_versions, keysmith_changes_seq_seq TO \(role)",
        ]
    }
}

/// Where a row lives: records, or the append-only audit log.
enum RecordTable: String, CaseIterable {
    case records = "keysmith_records"
    case audit = "keysmith_audit"

    /// Audit entries go to the append-only table; everything else (the audit head too) to records.
    init(_ key: ItemKey) {
        if case .keysmithRecord(let record) = key, record.recordType == .auditEntry { self = .audit } else { self = .records }
    }
}

/// A conflict with a concurrent transaction: the batch is retried from its reads.
struct RetryableConflict: Error {
    let state: String

    /// Runs `body` (a whole transaction), and again, after a short random pause, when it
    /// conflicted with a concurrent transaction (a deadlock, a serialization failure, a unique
    /// violation on a row another made first), up to 20 times; then `failure(state)`. So no
    /// public entry point ever throws this internal error: a reader, a batch and the schema's
    /// installer racing each other's locks all retry.
    static func retrying<T>(_ body: () throws -> T, failure: (String) -> KeysmithError) throws -> T {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try body()
            } catch is RetryableConflict where attempt < 20 {
                usleep(UInt32.random(in: 200...2_000) * UInt32(attempt))
            } catch let error as RetryableConflict {
                throw failure(error.state)
            }
        }
    }
}

/// One connection, used from one thread at a time (the store's mutex), through the
/// `EventLoopFuture` interface: the store's API is synchronous, and waiting on a future from a
/// thread outside the event loop never ties up Swift's cooperative thread pool.
final class Session: @unchecked Sendable {
    // @unchecked: used only under PostgresStore's mutex (or by one caller during set-up).
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
    static func connect(_ settings: PostgresConnectionSettings, logger: Logger, application: String = "keysmith") throws -> Session {
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
            let connection = try PostgresConnection.connect(
                on: MultiThreadedEventLoopGroup.singleton.any(), configuration: configuration, id: 1, logger: logger
            ).wait(timeout: .seconds(30))
            return Session(connection: connection, logger: logger, description: settings.description)
        } catch {
            throw KeysmithError(.storeUnavailable, "cannot connect to PostgreSQL (\(OneLine.escaped(settings.description)), \(settings.protection)): \(Session.reason(error))")
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

    var isClosed: Bool { connection.isClosed }

    func close() {
        _ = try? connection.close().wait(timeout: .seconds(5))
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
    func transaction<T>(snapshot: Bool = false, _ body: (Transaction) throws -> T) throws -> T {
        let transaction = Transaction(session: self)
        try transaction.execute(snapshot ? "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" : "BEGIN ISOLATION LEVEL READ COMMITTED")
        do {
            let result = try body(transaction)
            try transaction.execute("COMMIT")
            return result
        } catch {
            // Bounded: after a server crash the connection may not know yet that it is dead, and an
            // unbounded wait here hung a writer for good (found by the server-crash test).
            if !connection.isClosed { _ = try? connection.query("ROLLBACK", logger: logger).wait(timeout: .seconds(5)) }
            throw error
        }
    }
}

/// A future's result, waited for at most `timeout` (a connection that dies without the driver
/// noticing must not hang a caller forever).
struct WaitTimedOut: Error {}

final class ResultBox<Value>: @unchecked Sendable {
    // @unchecked: written once by the event loop before the semaphore is signalled, read after.
    var result: Result<Value, any Error>?
}

extension EventLoopFuture {
    func wait(timeout: Duration) throws -> Value {
        let semaphore = DispatchSemaphore(value: 0)
        let box = ResultBox<Value>()
        whenComplete { result in
            box.result = result
            semaphore.signal()
        }
        let nanoseconds = timeout.inNanoseconds
        guard semaphore.wait(timeout: .now() + .nanoseconds(nanoseconds)) == .success, let result = box.result else { throw WaitTimedOut() }
        return try result.get()
    }
}

/// Statements inside a transaction.
struct Transaction {
    let session: Session

    @discardableResult
    func execute(_ query: PostgresQuery) throws -> [PostgresRow] {
        // A statement on a connection the server closed may never be answered: fail at once.
        guard !session.connection.isClosed else {
            throw KeysmithError(.storeUnavailable, "PostgreSQL (\(session.description)) closed the connection")
        }
        do {
            return try session.connection.query(query, logger: session.logger).wait(timeout: session.statementTimeout).rows
        } catch {
            throw failure(error)
        }
    }

    /// What a statement's failure means to the caller.
    private func failure(_ error: any Error) -> any Error {
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
        if session.connection.isClosed || !(error is PSQLError) || state == nil || state!.hasPrefix("08") || state!.hasPrefix("57") {
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
    func nextVersion(namespace: [UInt8]) throws -> (version: Int64, newestKey: Int32) {
        let namespaceBuffer = ByteBuffer(bytes: namespace)
        guard let row = try execute("""
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

/// The master key's record: how a passphrase is stretched, and a verifier that tells a wrong
/// master key from damage.
/// The master key as opened: the key, its verifier, the wrap key it gives, and the identity key.
struct MasterKeys {
    static let identityLabel = Array("keysmith-pg identity v1".utf8)

    let master: SecretBytes
    let verifier: [UInt8]
    /// The key namespace ids are HMACs under. A database made before identity keys existed
    /// has none stored: its master key is its identity key.
    let identity: SecretBytes

    var wrapKey: SecretBytes { SecretBytes(copying: SHA256.hmac(key: master, NamespaceKeys.wrapLabel)) }

    init(master: SecretBytes, verifier: [UInt8], identity: SecretBytes) {
        self.master = master
        self.verifier = verifier
        self.identity = identity
    }

    init(master: SecretBytes, verifier: [UInt8], wrappedIdentity: [UInt8]?) throws {
        self.master = master
        self.verifier = verifier
        guard let wrapped = wrappedIdentity else {
            identity = master
            return
        }
        let wrapKey = SecretBytes(copying: SHA256.hmac(key: master, NamespaceKeys.wrapLabel))
        guard wrapped.count == 12 + 16 + 32,
              var opened = try? AESGCM.open(ciphertext: Array(wrapped[28...]), tag: Array(wrapped[12..<28]), key: wrapKey,
                                            nonce: Array(wrapped[0..<12]), associatedData: Self.identityLabel)
        else { throw KeysmithError(.corruptData, "the identity key in PostgreSQL does not open under the master key (edited)") }
        identity = SecretBytes(takingOwnershipOf: &opened)
    }

    /// The identity key wrapped under this master key: nonce ‖ tag ‖ ciphertext.
    func wrapIdentity() throws -> [UInt8] {
        var bytes = identity.copyBytes()
        defer { cleanse(&bytes) }
        let sealed = try AESGCM.seal(bytes, key: wrapKey, associatedData: Self.identityLabel)
        return sealed.nonce + sealed.tag + sealed.ciphertext
    }
}

enum MasterKeyRecord {
    static let verifierLabel = Array("keysmith-pg verifier v1".utf8)

    /// The master key, checked against the database's verifier, with the identity key; with
    /// `create`, the record is written when the database has none.
    static func loadOrCreate(_ source: PostgresMasterKey, transaction: Transaction, scrypt: ScryptCost, create: Bool, lock: Bool = false) throws
        -> MasterKeys
    {
        let rows = try transaction.execute("SELECT kdf, salt, log_n, verifier, identity_key FROM keysmith_master WHERE id = 1 \(unescaped: lock ? "FOR UPDATE" : "")")
        if let row = rows.first {
            let (kdf, salt, logN, verifier, wrappedIdentity) = try row.decode((String, ByteBuffer?, Int16?, ByteBuffer, ByteBuffer?).self)
            let master: SecretBytes
            switch (kdf, source) {
            case ("key", .key), ("key", .keyfile):
                master = try raw(source)
            case ("scrypt", .passphrase(let passphrase)):
                guard let salt, let logN, (14...20).contains(logN), salt.readableBytes == 32 else {
                    throw KeysmithError(.corruptData, "the master key's KDF record in PostgreSQL is out of bounds")
                }
                master = try derive(passphrase, salt: salt.bytes, logN: Int(logN))
            case ("scrypt", _):
                throw KeysmithError(.authenticationFailed, "this database's master key is a passphrase (KEYSMITH_PASSPHRASE), not a key")
            default:
                throw KeysmithError(.authenticationFailed, "this database's master key is a keyfile (KEYSMITH_KEYFILE), not a passphrase")
            }
            guard constantTimeEqual(SHA256.hmac(key: master, verifierLabel), verifier.bytes) else {
                throw KeysmithError(.authenticationFailed, "the master key does not open this database")
            }
            return try MasterKeys(master: master, verifier: verifier.bytes, wrappedIdentity: wrappedIdentity?.bytes)
        }
        guard create else {
            throw KeysmithError(.storeUnavailable, "PostgreSQL has no Keysmith master key record; run `keysmith postgres init`")
        }
        let master: SecretBytes
        var salt: [UInt8]? = nil
        var logN: Int16? = nil
        switch source {
        case .passphrase(let passphrase):
            let newSalt = try Random.bytes(count: 32)
            master = try derive(passphrase, salt: newSalt, logN: scrypt.logN)
            salt = newSalt
            logN = Int16(scrypt.logN)
        default:
            master = try raw(source)
        }
        let kdf = salt == nil ? "key" : "scrypt"
        let verifier = SHA256.hmac(key: master, verifierLabel)
        let saltBuffer = salt.map { ByteBuffer(bytes: $0) }
        // The identity key (namespace ids) is random and wrapped by the master key, so that a
        // master-key rotation re-wraps it and every namespace keeps its id.
        var identity = try Random.bytes(count: 32)
        defer { cleanse(&identity) }
        let keys = MasterKeys(master: master, verifier: verifier, identity: SecretBytes(copying: identity))
        let wrappedIdentity = ByteBuffer(bytes: try keys.wrapIdentity())
        try transaction.execute("""
            INSERT INTO keysmith_master (id, kdf, salt, log_n, verifier, identity_key)
            VALUES (1, \(kdf), \(saltBuffer), \(logN), \(ByteBuffer(bytes: verifier)), \(wrappedIdentity))
            """)
        return keys
    }

    /// A new master key's record values: KDF, salt, cost, the derived key.
    static func derive(new source: PostgresMasterKey, scrypt: ScryptCost) throws -> (kdf: String, salt: [UInt8]?, logN: Int16?, master: SecretBytes) {
        switch source {
        case .passphrase(let passphrase):
            let salt = try Random.bytes(count: 32)
            return ("scrypt", salt, Int16(scrypt.logN), try derive(passphrase, salt: salt, logN: scrypt.logN))
        default:
            return ("key", nil, nil, try raw(source))
        }
    }

    static func raw(_ source: PostgresMasterKey) throws -> SecretBytes {
        switch source {
        case .key(let bytes):
            guard bytes.count == 32 else { throw KeysmithError.invalidArgument("a master key is 32 bytes (256 bits); this one is \(bytes.count)") }
            return SecretBytes(copying: bytes)
        case .keyfile(let path):
            var key = try Keyfile.read(at: path)
            return SecretBytes(takingOwnershipOf: &key)
        case .passphrase:
            preconditionFailure("a passphrase is derived, not read")
        }
    }

    static func derive(_ passphrase: String, salt: [UInt8], logN: Int) throws -> SecretBytes {
        guard (14...20).contains(logN) else { throw KeysmithError.invalidArgument("the scrypt cost is 2^14 to 2^20") }
        do {
            return try Scrypt.derive(passphrase: SecretBytes(copying: passphrase.utf8), salt: salt, n: 1 << UInt64(logN), r: 8, p: 1, length: 32)
        } catch {
            throw KeysmithError(.ioFailure, "scrypt failed: \(error)")
        }
    }
}

/// One namespace's keys: its id (an HMAC of its name under the identity key), its data keys,
/// and the blind-index key. Data keys added by a rotation in another process are loaded when a
/// row or a batch meets them (``refresh(in:)``).
final class NamespaceKeys: Sendable {
    static let namespaceLabel = Array("keysmith-pg namespace v1".utf8)
    static let wrapLabel = Array("keysmith-pg wrap v1".utf8)
    static let indexLabel = Array("keysmith-pg blind index v1".utf8)
    static let recordLabel = Array("keysmith-pg record v1".utf8)
    static let dataKeyLabel = Array("keysmith-pg data key v1".utf8)
    static let chainLabel = Array("keysmith-pg change chain v1".utf8)
    /// The link before a namespace's first chained change row.
    static let chainGenesis = [UInt8](repeating: 0, count: 32)

    let namespaceID: [UInt8]
    let indexKey: HMACSHA256Key
    /// Links the change feed (``chainLink(after:sequence:blindIndex:version:deleted:sealedKey:)``).
    let chainKey: HMACSHA256Key
    /// The key that wraps data keys (from the master key this process opened with).
    private let wrapKey: SecretBytes
    /// The master verifier this process opened with: a different one means the master key was rotated.
    private let verifier: [UInt8]
    private let ring: Mutex<KeyRing>

    struct KeyRing {
        var keys: [Int32: SecretBytes]
        var current: Int32
    }

    private init(namespaceID: [UInt8], ring: KeyRing, indexKey: HMACSHA256Key, chainKey: HMACSHA256Key, wrapKey: SecretBytes,
                 verifier: [UInt8]) {
        self.namespaceID = namespaceID
        self.ring = Mutex(ring)
        self.indexKey = indexKey
        self.chainKey = chainKey
        self.wrapKey = wrapKey
        self.verifier = verifier
    }

    /// The id of the key new rows are sealed with, and the key.
    var current: (id: Int32, key: SecretBytes) {
        ring.withLock { ($0.current, $0.keys[$0.current]!) }
    }

    /// The id of the key new rows are sealed with.
    var currentKeyID: Int32 { ring.withLock { $0.current } }

    func dataKey(_ id: Int32) -> SecretBytes? { ring.withLock { $0.keys[id] } }

    static func wrapAAD(_ namespaceID: [UInt8], _ keyID: Int32) -> [UInt8] {
        var writer = ByteWriter()
        writer.append(dataKeyLabel)
        writer.appendField(namespaceID)
        writer.append(UInt32(bitPattern: keyID))
        return writer.bytes
    }

    /// A data key wrapped for the database: nonce ‖ tag ‖ ciphertext.
    static func wrap(_ dataKey: [UInt8], wrapKey: SecretBytes, namespaceID: [UInt8], keyID: Int32) throws -> [UInt8] {
        let sealed = try AESGCM.seal(dataKey, key: wrapKey, associatedData: wrapAAD(namespaceID, keyID))
        return sealed.nonce + sealed.tag + sealed.ciphertext
    }

    /// A wrapped data key opened; `nil` when it does not open under `wrapKey`.
    static func unwrap(_ bytes: [UInt8], wrapKey: SecretBytes, namespaceID: [UInt8], keyID: Int32) throws -> SecretBytes? {
        guard bytes.count == 12 + 16 + 32 else { throw KeysmithError(.corruptData, "a wrapped data key in PostgreSQL has the wrong size") }
        guard var opened = try? AESGCM.open(ciphertext: Array(bytes[28...]), tag: Array(bytes[12..<28]), key: wrapKey, nonce: Array(bytes[0..<12]),
                                            associatedData: wrapAAD(namespaceID, keyID)) else { return nil }
        return SecretBytes(takingOwnershipOf: &opened)
    }

    static func loadOrCreate(namespace: String, master: MasterKeys, transaction: Transaction) throws -> NamespaceKeys {
        let namespaceID = SHA256.hmac(key: master.identity, namespaceLabel + Array(namespace.utf8))
        let wrapKey = master.wrapKey
        let idBuffer = ByteBuffer(bytes: namespaceID)
        if try transaction.execute("SELECT 1 FROM keysmith_data_keys WHERE namespace_id = \(idBuffer) LIMIT 1").isEmpty {
            var dataKey = try Random.bytes(count: 32)
            defer { cleanse(&dataKey) }
            let wrapped = ByteBuffer(bytes: try wrap(dataKey, wrapKey: wrapKey, namespaceID: namespaceID, keyID: 1))
            try transaction.execute("""
                INSERT INTO keysmith_data_keys (namespace_id, key_id, wrapped) VALUES (\(idBuffer), \(Int32(1)), \(wrapped))
                ON CONFLICT DO NOTHING
                """)
        }
        let keys = try loadDataKeys(namespaceID: namespaceID, wrapKey: wrapKey, transaction: transaction)
        guard let first = keys[1], let current = keys.keys.max() else {
            throw KeysmithError(.corruptData, "this namespace's first data key is missing from PostgreSQL")
        }
        // The blind-index key comes from the namespace's first data key, so that rotating data
        // keys never moves a row.
        let indexKey = try HMACSHA256Key(SecretBytes(copying: SHA256.hmac(key: first, indexLabel)))
        let chainKey = try HMACSHA256Key(SecretBytes(copying: SHA256.hmac(key: first, chainLabel)))
        return NamespaceKeys(namespaceID: namespaceID, ring: KeyRing(keys: keys, current: current), indexKey: indexKey, chainKey: chainKey,
                             wrapKey: wrapKey, verifier: master.verifier)
    }

    private static func loadDataKeys(namespaceID: [UInt8], wrapKey: SecretBytes, transaction: Transaction) throws -> [Int32: SecretBytes] {
        let idBuffer = ByteBuffer(bytes: namespaceID)
        var keys: [Int32: SecretBytes] = [:]
        for row in try transaction.execute("SELECT key_id, wrapped FROM keysmith_data_keys WHERE namespace_id = \(idBuffer) ORDER BY key_id") {
            let (keyID, wrapped) = try row.decode((Int32, ByteBuffer).self)
            guard let key = try unwrap(wrapped.bytes, wrapKey: wrapKey, namespaceID: namespaceID, keyID: keyID) else {
                throw KeysmithError(.corruptData, "data key \(keyID) of this namespace does not open under the master key (edited or moved in the database)")
            }
            keys[keyID] = key
        }
        return keys
    }

    /// Loads data keys added since this process opened the namespace (a rotation elsewhere).
    /// Throws `KeysmithError.Code.authenticationFailed` when the master key was rotated since:
    /// the process must reopen with the new one.
    func refresh(in transaction: Transaction) throws {
        if let row = try transaction.execute("SELECT verifier FROM keysmith_master WHERE id = 1").first,
           try row.decode(ByteBuffer.self).bytes != verifier {
            throw KeysmithError(.authenticationFailed, "the master key was rotated since this process opened the store: reopen it with the new master key")
        }
        let keys = try Self.loadDataKeys(namespaceID: namespaceID, wrapKey: wrapKey, transaction: transaction)
        ring.withLock { ring in
            for (id, key) in keys where ring.keys[id] == nil { ring.keys[id] = key }
            ring.current = max(ring.current, keys.keys.max() ?? ring.current)
        }
    }

    /// Refreshes when any of these key ids is unknown (a row sealed after a rotation elsewhere).
    func ensureKnown(_ ids: some Sequence<Int32>, in transaction: Transaction) throws {
        let unknown = ring.withLock { ring in ids.contains { ring.keys[$0] == nil } }
        if unknown { try refresh(in: transaction) }
    }

    /// Adds a data key (the next id) and makes it current; returns its id.
    func rotate(in transaction: Transaction) throws -> Int32 {
        try refresh(in: transaction)
        let idBuffer = ByteBuffer(bytes: namespaceID)
        // One rotation at a time per namespace: the next id is taken under a lock on the first key.
        _ = try transaction.execute("SELECT 1 FROM keysmith_data_keys WHERE namespace_id = \(idBuffer) AND key_id = 1 FOR SHARE")
        let newest = try transaction.execute("SELECT max(key_id) FROM keysmith_data_keys WHERE namespace_id = \(idBuffer)").first?.decode(Int32.self) ?? 1
        let id = newest + 1
        var dataKey = try Random.bytes(count: 32)
        defer { cleanse(&dataKey) }
        let wrapped = ByteBuffer(bytes: try Self.wrap(dataKey, wrapKey: wrapKey, namespaceID: namespaceID, keyID: id))
        try transaction.execute("INSERT INTO keysmith_data_keys (namespace_id, key_id, wrapped) VALUES (\(idBuffer), \(id), \(wrapped))")
        let key = SecretBytes(copying: dataKey)
        ring.withLock { ring in
            ring.keys[id] = key
            ring.current = max(ring.current, id)
        }
        return id
    }

    /// The keyed blind index of an item: HMAC-SHA256 of its canonical identity.
    func blindIndex(_ key: ItemKey) -> [UInt8] {
        indexKey.mac(RecordCodec.identity(key, label: Self.recordLabel))
    }

    static func recordAAD(_ namespaceID: [UInt8], _ blindIndex: [UInt8], _ version: Int64, _ keyID: Int32) -> [UInt8] {
        var writer = ByteWriter()
        writer.append(recordLabel)
        writer.appendField(namespaceID)
        writer.appendField(blindIndex)
        writer.append(UInt64(bitPattern: version))
        writer.append(UInt32(bitPattern: keyID))
        return writer.bytes
    }

    /// nonce ‖ tag ‖ ciphertext, bound to the namespace, the row's index, version and key id.
    func seal(_ record: SecureRecord, blindIndex: [UInt8], version: Int64, with key: (id: Int32, key: SecretBytes)) throws -> [UInt8] {
        var plaintext = RecordCodec.encode(record)
        defer { cleanse(&plaintext) }
        let sealed = try AESGCM.seal(plaintext, key: key.key, associatedData: Self.recordAAD(namespaceID, blindIndex, version, key.id))
        return sealed.nonce + sealed.tag + sealed.ciphertext
    }

    static let changeLabel = Array("keysmith-pg change v1".utf8)

    /// One change row's link in its namespace's chain: a MAC, under a key only holders of the
    /// master key can derive, of the link before it and of everything the row says. A row
    /// deleted, edited, reordered or renumbered breaks every link after it.
    func chainLink(after previous: [UInt8], sequence: Int64, blindIndex: [UInt8], version: Int64, deleted: Bool, sealedKey: [UInt8]) -> [UInt8] {
        var writer = ByteWriter()
        writer.append(Self.chainLabel)
        writer.appendField(namespaceID)
        writer.appendField(previous)
        writer.append(UInt64(bitPattern: sequence))
        writer.appendField(blindIndex)
        writer.append(UInt64(bitPattern: version))
        writer.append(UInt8(deleted ? 1 : 0))
        writer.appendField(sealedKey)
        return chainKey.mac(writer.bytes)
    }

    static func changeAAD(_ namespaceID: [UInt8], _ blindIndex: [UInt8], _ version: Int64) -> [UInt8] {
        var writer = ByteWriter()
        writer.append(changeLabel)
        writer.appendField(namespaceID)
        writer.appendField(blindIndex)
        writer.append(UInt64(bitPattern: version))
        return writer.bytes
    }

    /// The item's identity, sealed for a change row (a watcher learns which item changed, also
    /// when it was deleted): key id (4 bytes) ‖ nonce ‖ tag ‖ ciphertext.
    func sealKey(_ key: ItemKey, blindIndex: [UInt8], version: Int64, with dataKey: (id: Int32, key: SecretBytes)) throws -> [UInt8] {
        let record = SecureRecord(info: ItemInfo(attributes: ItemAttributes(key: key), created: Date(timeIntervalSinceReferenceDate: 0),
                                                 modified: Date(timeIntervalSinceReferenceDate: 0)), secret: Data())
        let sealed = try AESGCM.seal(RecordCodec.encode(record), key: dataKey.key,
                                     associatedData: Self.changeAAD(namespaceID, blindIndex, version))
        var writer = ByteWriter()
        writer.append(UInt32(bitPattern: dataKey.id))
        return writer.bytes + sealed.nonce + sealed.tag + sealed.ciphertext
    }

    /// The item a change row names; the row's index must be the item's blind index.
    func openKey(_ sealedKey: [UInt8], blindIndex: [UInt8], version: Int64) throws -> ItemKey {
        guard sealedKey.count >= 32 else { throw KeysmithError(.corruptData, "a change row of PostgreSQL is too short") }
        let keyID = Int32(bitPattern: UInt32(sealedKey[0]) << 24 | UInt32(sealedKey[1]) << 16 | UInt32(sealedKey[2]) << 8 | UInt32(sealedKey[3]))
        guard let dataKey = dataKey(keyID) else { throw KeysmithError(.corruptData, "a change row names a data key this namespace does not have") }
        do {
            let plaintext = try AESGCM.open(ciphertext: Array(sealedKey[32...]), tag: Array(sealedKey[16..<32]), key: dataKey,
                                            nonce: Array(sealedKey[4..<16]), associatedData: Self.changeAAD(namespaceID, blindIndex, version))
            let key = try RecordCodec.decode(plaintext, withSecret: false).key
            guard blindIndex == self.blindIndex(key) else { throw KeysmithError(.corruptData, "a change row names another item than its index") }
            return key
        } catch let error as KeysmithError {
            throw error
        } catch {
            throw KeysmithError(.corruptData, "a change row of PostgreSQL does not open: edited or moved")
        }
    }

    func open(_ row: RecordRow, withSecret: Bool) throws -> SecureRecord {
        if let newest = row.newestChange, newest > row.version {
            throw KeysmithError(.corruptData, "a row of PostgreSQL is older than the change feed's newest version of it (put back from an older copy)")
        }
        guard let key = dataKey(row.keyID) else { throw KeysmithError(.corruptData, "a row names a data key this namespace does not have") }
        let bytes = row.sealed
        guard bytes.count >= 28 else { throw KeysmithError(.corruptData, "a row of PostgreSQL is too short to be sealed") }
        do {
            var plaintext = try AESGCM.open(ciphertext: Array(bytes[28...]), tag: Array(bytes[12..<28]), key: key, nonce: Array(bytes[0..<12]),
                                            associatedData: Self.recordAAD(namespaceID, row.blindIndex, row.version, row.keyID))
            defer { cleanse(&plaintext) }
            var record = try RecordCodec.decode(plaintext, withSecret: withSecret)
            guard indexKey.mac(RecordCodec.identity(record.key, label: Self.recordLabel)) == row.blindIndex else {
                throw KeysmithError(.corruptData, "a row of PostgreSQL holds another item than its index says")
            }
            record.info.version = ItemVersion(rawValue: String(row.version))
            return record
        } catch let error as KeysmithError {
            throw error
        } catch {
            throw KeysmithError(.corruptData, "a row of PostgreSQL does not open: edited, swapped or put back from another version")
        }
    }
}

/// A row of `keysmith_records`.
struct RecordRow {
    var blindIndex: [UInt8]
    var version: Int64
    var keyID: Int32
    var sealed: [UInt8]
    /// The newest version the change feed recorded for this item, when read with it: a row
    /// older than that was put back (rolled back) by hand.
    var newestChange: Int64? = nil
}

/// The statements on `keysmith_records` and `keysmith_changes`.
enum RecordRows {
    /// The rows of these indexes, by index; `lock` takes row locks until the transaction ends.
    /// The rows of these blind indexes; with `lock`, locked for this transaction. Without
    /// `withSealed` (a batch that only needs versions), `sealed` comes back empty.
    static func fetch(_ indexes: [[UInt8]], namespace: [UInt8], table: RecordTable = .records, in transaction: Transaction, lock: Bool,
                      withSealed: Bool = true) throws -> [[UInt8]: RecordRow]
    {
        var out: [[UInt8]: RecordRow] = [:]
        let namespaceBuffer = ByteBuffer(bytes: namespace)
        var start = 0
        while start < indexes.count {
            let chunk = indexes[start..<min(start + 16_384, indexes.count)].map { ByteBuffer(bytes: $0) }
            start += 16_384
            // Reads also fetch the newest version the change feed holds for each item (a row put
            // back from an older copy is older than that); a batch's locked read does not need it.
            let query: PostgresQuery = lock
                ? "SELECT blind_index, version, key_id, \(unescaped: withSealed ? "sealed" : "''::bytea"), NULL::bigint FROM \(unescaped: table.rawValue) WHERE namespace_id = \(namespaceBuffer) AND blind_index = ANY(\(chunk)) FOR UPDATE"
                : """
                SELECT r.blind_index, r.version, r.key_id, r.sealed,
                       (SELECT max(c.version) FROM keysmith_changes c WHERE c.namespace_id = r.namespace_id AND c.blind_index = r.blind_index)
                FROM \(unescaped: table.rawValue) r WHERE r.namespace_id = \(namespaceBuffer) AND r.blind_index = ANY(\(chunk))
                """
            for row in try transaction.execute(query) {
                let (index, version, keyID, sealed, newest) = try row.decode((ByteBuffer, Int64, Int32, ByteBuffer, Int64?).self)
                out[index.bytes] = RecordRow(blindIndex: index.bytes, version: version, keyID: keyID, sealed: sealed.bytes, newestChange: newest)
            }
        }
        return out
    }

    static func count(namespace: [UInt8], table: RecordTable, in transaction: Transaction) throws -> Int {
        let namespaceBuffer = ByteBuffer(bytes: namespace)
        guard let row = try transaction.execute("SELECT count(*) FROM \(unescaped: table.rawValue) WHERE namespace_id = \(namespaceBuffer)").first else { return 0 }
        return Int(try row.decode(Int64.self))
    }

    /// Of these indexes, those whose newest change in the feed is not a deletion: items the
    /// feed says exist (a read that finds no row for one was edited away by hand).
    static func liveInFeed(_ indexes: [[UInt8]], namespace: [UInt8], in transaction: Transaction) throws -> Set<[UInt8]> {
        let namespaceBuffer = ByteBuffer(bytes: namespace)
        let buffers = indexes.map { ByteBuffer(bytes: $0) }
        var live: Set<[UInt8]> = []
        for row in try transaction.execute("""
            SELECT DISTINCT ON (blind_index) blind_index, deleted FROM keysmith_changes
            WHERE namespace_id = \(namespaceBuffer) AND blind_index = ANY(\(buffers))
            ORDER BY blind_index, seq DESC
            """) {
            let (index, deleted) = try row.decode((ByteBuffer, Bool).self)
            if !deleted { live.insert(index.bytes) }
        }
        return live
    }

    /// Items whose newest change says they exist, with a blind index in (`after`, `through`]
    /// (open ends where `nil`), that have no row in either table: rows deleted by hand. One
    /// statement, so a write committing meanwhile is seen whole or not at all.
    static func missing(namespace: [UInt8], after: [UInt8]?, through: [UInt8]?, in transaction: Transaction) throws
        -> [(blindIndex: [UInt8], version: Int64, sealedKey: [UInt8])]
    {
        let namespaceBuffer = ByteBuffer(bytes: namespace)
        let lower = ByteBuffer(bytes: after ?? []), upper = through.map { ByteBuffer(bytes: $0) }
        return try transaction.execute("""
            SELECT n.blind_index, n.version, n.sealed_key FROM (
                SELECT DISTINCT ON (blind_index) blind_index, version, deleted, sealed_key FROM keysmith_changes
                WHERE namespace_id = \(namespaceBuffer) AND blind_index > \(lower) AND (\(upper)::bytea IS NULL OR blind_index <= \(upper))
                ORDER BY blind_index, seq DESC) n
            WHERE NOT n.deleted
              AND NOT EXISTS (SELECT 1 FROM keysmith_records r WHERE r.namespace_id = \(namespaceBuffer) AND r.blind_index = n.blind_index)
              AND NOT EXISTS (SELECT 1 FROM keysmith_audit a WHERE a.namespace_id = \(namespaceBuffer) AND a.blind_index = n.blind_index)
            """).map { row in
            let (index, version, sealedKey) = try row.decode((ByteBuffer, Int64, ByteBuffer).self)
            return (index.bytes, version, sealedKey.bytes)
        }
    }

    static func page(namespace: [UInt8], table: RecordTable, after: [UInt8]?, limit: Int, in transaction: Transaction) throws -> [RecordRow] {
        let namespaceBuffer = ByteBuffer(bytes: namespace)
        let rows: [PostgresRow]
        if let after {
            let afterBuffer = ByteBuffer(bytes: after)
            rows = try transaction.execute("""
                SELECT r.blind_index, r.version, r.key_id, r.sealed,
                       (SELECT max(c.version) FROM keysmith_changes c WHERE c.namespace_id = r.namespace_id AND c.blind_index = r.blind_index)
                FROM \(unescaped: table.rawValue) r
                WHERE r.namespace_id = \(namespaceBuffer) AND r.blind_index > \(afterBuffer) ORDER BY r.blind_index LIMIT \(limit)
                """)
        } else {
            rows = try transaction.execute("""
                SELECT r.blind_index, r.version, r.key_id, r.sealed,
                       (SELECT max(c.version) FROM keysmith_changes c WHERE c.namespace_id = r.namespace_id AND c.blind_index = r.blind_index)
                FROM \(unescaped: table.rawValue) r
                WHERE r.namespace_id = \(namespaceBuffer) ORDER BY r.blind_index LIMIT \(limit)
                """)
        }
        return try rows.map { row in
            let (index, version, keyID, sealed, newest) = try row.decode((ByteBuffer, Int64, Int32, ByteBuffer, Int64?).self)
            return RecordRow(blindIndex: index.bytes, version: version, keyID: keyID, sealed: sealed.bytes, newestChange: newest)
        }
    }

    /// One row a batch writes.
    struct Put {
        var table: RecordTable = .records
        var blindIndex: [UInt8]
        var sealed: [UInt8]
        var exists: Bool
        /// The item's identity sealed for the change feed.
        var sealedKey: [UInt8]
    }

    /// One row a batch deletes.
    struct Removal {
        var table: RecordTable = .records
        var blindIndex: [UInt8]
        var sealedKey: [UInt8]
    }

    /// Writes a batch's rows and its change rows with array statements, in chunks of at most
    /// 16,384 rows or 16 MiB.
    /// Returns the sequence number of the batch's last change row (what watchers acknowledge).
    @discardableResult
    static func write(puts: [Put], removals: [Removal], keys: NamespaceKeys, version: Int64, keyID: Int32,
                      in transaction: Transaction) throws -> Int64 {
        let namespace = keys.namespaceID
        let namespaceBuffer = ByteBuffer(bytes: namespace)
        func chunks<T>(_ items: [T], size: (T) -> Int) -> [ArraySlice<T>] {
            var out: [ArraySlice<T>] = []
            var start = 0, bytes = 0
            for (index, item) in items.enumerated() {
                if index > start && (index - start >= 16_384 || bytes + size(item) > 16 << 20) {
                    out.append(items[start..<index])
                    start = index
                    bytes = 0
                }
                bytes += size(item)
            }
            if start < items.count { out.append(items[start...]) }
            return out
        }
        // Only records are ever rewritten or deleted: the batch refused audit changes already.
        precondition(!puts.contains { $0.exists && $0.table == .audit } && !removals.contains { $0.table == .audit })
        for chunk in chunks(puts.filter(\.exists), size: { $0.sealed.count }) {
            let indexes = chunk.map { ByteBuffer(bytes: $0.blindIndex) }, sealed = chunk.map { ByteBuffer(bytes: $0.sealed) }
            try transaction.execute("""
                UPDATE keysmith_records AS r SET version = \(version), key_id = \(keyID), sealed = t.s
                FROM unnest(\(indexes)::bytea[], \(sealed)::bytea[]) AS t(i, s)
                WHERE r.namespace_id = \(namespaceBuffer) AND r.blind_index = t.i
                """)
        }
        // A concurrent creator of the same item makes an insert a unique violation: the batch
        // is retried and then sees that item.
        for table in RecordTable.allCases {
            for chunk in chunks(puts.filter { !$0.exists && $0.table == table }, size: { $0.sealed.count }) {
                let indexes = chunk.map { ByteBuffer(bytes: $0.blindIndex) }, sealed = chunk.map { ByteBuffer(bytes: $0.sealed) }
                try transaction.execute("""
                    INSERT INTO \(unescaped: table.rawValue) (namespace_id, blind_index, version, key_id, sealed)
                    SELECT \(namespaceBuffer), t.i, \(version), \(keyID), t.s FROM unnest(\(indexes)::bytea[], \(sealed)::bytea[]) AS t(i, s)
                    """)
            }
        }
        for chunk in chunks(removals, size: { _ in 64 }) {
            let indexes = chunk.map { ByteBuffer(bytes: $0.blindIndex) }
            try transaction.execute("DELETE FROM keysmith_records WHERE namespace_id = \(namespaceBuffer) AND blind_index = ANY(\(indexes)::bytea[])")
        }
        let changed = puts.map { ($0.blindIndex, false, $0.sealedKey) } + removals.map { ($0.blindIndex, true, $0.sealedKey) }
        var last: Int64 = 0
        if !changed.isEmpty {
            // From here to COMMIT, one writer at a time per namespace: its change rows take
            // their sequence numbers under this lock, so a namespace's change rows become
            // visible in sequence order (a watcher that read up to N never has a row below N
            // appear later), and each row links to the one before it.
            // One statement: creates the namespace's head if it has none, locks it either way
            // (an upsert's update takes the row lock), and returns its link.
            guard let head = try transaction.execute("""
                INSERT INTO keysmith_chain_heads AS h (namespace_id, seq, chain) VALUES (\(namespaceBuffer), 0, \(ByteBuffer(bytes: NamespaceKeys.chainGenesis)))
                ON CONFLICT (namespace_id) DO UPDATE SET seq = h.seq RETURNING h.seq, h.chain
                """).first else {
                throw KeysmithError(.ioFailure, "PostgreSQL returned no chain head")
            }
            let (headSequence, headChain) = try head.decode((Int64, ByteBuffer).self)
            var link = headChain.bytes
            // The head must name the newest link (a statement after the lock sees every commit
            // made before it): a chain whose head was set back is never extended into a fork.
            let newest = try transaction.execute("""
                SELECT seq, chain FROM keysmith_changes WHERE namespace_id = \(namespaceBuffer) ORDER BY seq DESC LIMIT 1
                """).first.map { try $0.decode((Int64, ByteBuffer?).self) }
            let headIsNewest: Bool = switch newest {
            case nil: headSequence == 0
            case let (_, chain?)?: chain.bytes == link && newest?.0 == headSequence
            case (_, nil)?: headSequence == 0  // rows written before the feed was chained; the chain starts here
            }
            guard headIsNewest else {
                throw KeysmithError(
                    .corruptData,
                    "the change feed's head names change \(headSequence), not its newest link (change \(newest?.0 ?? 0)): it was set back or "
                        + "the newest rows were edited; nothing was written (run `keysmith postgres verify`)")
            }
            guard let reserved = try transaction.execute("""
                SELECT array_agg(v ORDER BY v) FROM (SELECT nextval('keysmith_changes_seq_seq') AS v FROM generate_series(1, \(Int64(changed.count)))) s
                """).first, let sequences = try reserved.decode([Int64]?.self), sequences.count == changed.count else {
                throw KeysmithError(.ioFailure, "PostgreSQL returned no sequence numbers for the change feed")
            }
            var links: [[UInt8]] = []
            links.reserveCapacity(changed.count)
            for (sequence, change) in zip(sequences, changed) {
                link = keys.chainLink(after: link, sequence: sequence, blindIndex: change.0, version: version, deleted: change.1, sealedKey: change.2)
                links.append(link)
            }
            let rows = Array(zip(sequences, zip(changed, links)))
            last = sequences.last ?? 0
            let pieces = chunks(rows, size: { _ in 160 })
            for (number, chunk) in pieces.enumerated() {
                let seqs = chunk.map(\.0), indexes = chunk.map { ByteBuffer(bytes: $0.1.0.0) }, deleted = chunk.map(\.1.0.1)
                let sealedKeys = chunk.map { ByteBuffer(bytes: $0.1.0.2) }, chains = chunk.map { ByteBuffer(bytes: $0.1.1) }
                if number < pieces.count - 1 {
                    try transaction.execute("""
                        INSERT INTO keysmith_changes (seq, namespace_id, blind_index, version, deleted, sealed_key, chain)
                        SELECT t.q, \(namespaceBuffer), t.i, \(version), t.d, t.k, t.c
                        FROM unnest(\(seqs)::bigint[], \(indexes)::bytea[], \(deleted)::boolean[], \(sealedKeys)::bytea[], \(chains)::bytea[]) AS t(q, i, d, k, c)
                        """)
                } else {
                    // The last chunk also moves the head and notifies watchers (delivered at
                    // COMMIT), in the same statement.
                    let payload = namespace.hexString
                    try transaction.execute("""
                        WITH inserted AS (
                            INSERT INTO keysmith_changes (seq, namespace_id, blind_index, version, deleted, sealed_key, chain)
                            SELECT t.q, \(namespaceBuffer), t.i, \(version), t.d, t.k, t.c
                            FROM unnest(\(seqs)::bigint[], \(indexes)::bytea[], \(deleted)::boolean[], \(sealedKeys)::bytea[], \(chains)::bytea[]) AS t(q, i, d, k, c)),
                        moved AS (
                            UPDATE keysmith_chain_heads SET seq = \(last), chain = \(ByteBuffer(bytes: link)) WHERE namespace_id = \(namespaceBuffer)
                            RETURNING 1)
                        SELECT pg_notify(\(PostgresSchema.channel), \(payload)) FROM moved
                        """)
                }
            }
        }
        return last
    }
}
