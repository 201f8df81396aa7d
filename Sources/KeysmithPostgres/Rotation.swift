import Keysmith
import KeysmithCrypto
import KeysmithSystem
import Logging
import NIOCore
import PostgresNIO

/// What `PostgresStore.rekey(chunkSize:)` did.
public struct RekeyReport: Sendable, Hashable {
    /// The data key every re-encrypted row is now sealed with.
    public var currentKeyID: Int32
    /// Rows re-encrypted with it.
    public var rekeyed: Int
    /// Rows left as they were because they do not open (edited in the database): a write of the
    /// item repairs them.
    public var damaged: Int
    /// Audit-log entries sealed with older data keys. The audit log is append-only, so they keep
    /// their key, and older data keys are never removed.
    public var auditEntriesOnOlderKeys: Int
}

extension PostgresStore {
    /// Adds a new data key to this namespace and makes it the one new rows are sealed with, here
    /// and (from their next batch) in every other process. Older rows stay readable under their
    /// own keys until `rekey(chunkSize:)` re-encrypts them; older keys are kept.
    ///
    /// ```swift
    /// let id = try store.rotateDataKey()      // 2, 3, …
    /// let report = try store.rekey()          // re-encrypt the rest, a chunk at a time
    /// ```
    ///
    /// - Returns: The new key's id.
    @discardableResult
    public func rotateDataKey() throws -> Int32 {
        try Blocking.runOffEventLoop { try await rotateDataKey() }
    }

    /// `rotateDataKey()` without blocking a thread: the same rotation, awaited.
    @discardableResult
    public func rotateDataKey() async throws -> Int32 {
        var attempt = 0
        while true {
            attempt += 1
            do {
                let rotated = try await withSessionPublic { session in try await session.transaction { try await keys.rotate(in: $0) } }
                keys.install(rotated.key, id: rotated.id)
                return rotated.id
            } catch is RetryableConflict where attempt < 5 {
                continue  // another process rotated at the same moment: take the next id
            } catch is RetryableConflict {
                throw KeysmithError(.writeConflict, "\(storeDescription): other processes kept rotating the data key; try again")
            }
        }
    }

    /// Re-encrypts every record of this namespace sealed with an older data key under the
    /// current one, `chunkSize` rows per transaction, without changing any item's version (it is
    /// not a change: no change row, no notification, and a conditional write prepared before it
    /// still applies). Rows another transaction holds are skipped and caught by the next run;
    /// rows that do not open are counted and left alone. Safe to run while applications write,
    /// and to stop and run again. `chunkSize` is held between 1 and 10,000.
    public func rekey(chunkSize: Int = 1_000) throws -> RekeyReport {
        try Blocking.runOffEventLoop { try await rekey(chunkSize: chunkSize) }
    }

    /// `rekey(chunkSize:)` without blocking a thread: the same work, awaited; cancelling the task stops it between chunks (a chunk is committed or rolled back whole, and a later run carries on).
    public func rekey(chunkSize: Int = 1_000) async throws -> RekeyReport {
        let size = max(1, min(chunkSize, 10_000))
        let namespaceBuffer = ByteBuffer(bytes: keys.namespaceID)
        var report = RekeyReport(currentKeyID: 0, rekeyed: 0, damaged: 0, auditEntriesOnOlderKeys: 0)
        var after: [UInt8] = []
        while true {
            let done = try await withSessionPublic { session in
                try await session.transaction { transaction -> Bool in
                    try await keys.refresh(in: transaction)
                    let current = keys.current
                    report.currentKeyID = current.id
                    let afterBuffer = ByteBuffer(bytes: after)
                    let rows = try await transaction.execute("""
                        SELECT blind_index, version, key_id, sealed FROM keysmith_records
                        WHERE namespace_id = \(namespaceBuffer) AND key_id <> \(current.id) AND blind_index > \(afterBuffer)
                        ORDER BY blind_index LIMIT \(size) FOR UPDATE SKIP LOCKED
                        """).map { row in
                        let (index, version, keyID, sealed) = try row.decode((ByteBuffer, Int64, Int32, ByteBuffer).self)
                        return RecordRow(blindIndex: index.bytes, version: version, keyID: keyID, sealed: sealed.bytes)
                    }
                    guard let last = rows.last else { return true }
                    after = last.blindIndex
                    var indexes: [ByteBuffer] = [], versions: [Int64] = [], sealed: [ByteBuffer] = []
                    for row in rows {
                        guard let record = try? keys.open(row, withSecret: true) else {
                            report.damaged += 1
                            continue
                        }
                        indexes.append(ByteBuffer(bytes: row.blindIndex))
                        versions.append(row.version)
                        sealed.append(ByteBuffer(bytes: try keys.seal(record, blindIndex: row.blindIndex, version: row.version, with: current)))
                    }
                    if !indexes.isEmpty {
                        try await transaction.execute("""
                            UPDATE keysmith_records AS r SET key_id = \(current.id), sealed = t.s
                            FROM unnest(\(indexes)::bytea[], \(versions)::bigint[], \(sealed)::bytea[]) AS t(i, v, s)
                            WHERE r.namespace_id = \(namespaceBuffer) AND r.blind_index = t.i AND r.version = t.v
                            """)
                        report.rekeyed += indexes.count
                    }
                    return rows.count < size
                }
            }
            if done { break }
        }
        report.auditEntriesOnOlderKeys = try await withSessionPublic { session in
            try await session.transaction { transaction in
                try await transaction.execute("""
                    SELECT count(*) FROM keysmith_audit WHERE namespace_id = \(namespaceBuffer) AND key_id <> \(report.currentKeyID)
                    """).first.map { Int(try $0.decode(Int64.self)) } ?? 0
            }
        }
        return report
    }

    /// Replaces the master key: every namespace's data keys and the identity key are re-wrapped
    /// under the new one, and the master record (KDF, salt, verifier) replaced, in one
    /// transaction. No record is re-encrypted and no namespace id changes. Run it as the role that
    /// owns the schema (the application role may not change wrapped keys). Processes that opened
    /// the store with the old key keep working with the data keys they hold, and are told to
    /// reopen (`KeysmithError.Code.authenticationFailed`) when they next need a key from the
    /// database.
    ///
    /// ```swift
    /// let rewrapped = try PostgresStore.rotateMasterKey(settings, from: .keyfile(path: old), to: .keyfile(path: new))
    /// ```
    ///
    /// - Returns: How many data keys were re-wrapped.
    /// - Throws: `KeysmithError.Code.authenticationFailed` when `from` is not the master key;
    ///   `KeysmithError.Code.invalidArgument` when `to` is the same key; `KeysmithError.Code.corruptData`
    ///   when a wrapped key does not open (nothing is changed then).
    @discardableResult
    public static func rotateMasterKey(_ settings: PostgresConnectionSettings, from old: PostgresMasterKey, to new: PostgresMasterKey,
                                       scrypt: ScryptCost = .standard) throws -> Int {
        try Blocking.runOffEventLoop { try await rotateMasterKey(settings, from: old, to: new, scrypt: scrypt) }
    }

    /// `rotateMasterKey(_:from:to:scrypt:)` without blocking a thread: the same rotation, awaited.
    @discardableResult
    public static func rotateMasterKey(_ settings: PostgresConnectionSettings, from old: PostgresMasterKey, to new: PostgresMasterKey,
                                       scrypt: ScryptCost = .standard) async throws -> Int {
        let session = try await Session.connect(settings, logger: Logger(label: "keysmith.postgres"))
        defer { session.close() }
        return try await session.transaction { transaction in
            let current = try await MasterKeyRecord.loadOrCreate(old, transaction: transaction, scrypt: scrypt, create: false, lock: true)
            let derived = try MasterKeyRecord.derive(new: new, scrypt: scrypt)
            let replacement = MasterKeys(master: derived.master, verifier: SHA256.hmac(key: derived.master, MasterKeyRecord.verifierLabel),
                                         identity: current.identity)
            guard replacement.verifier != current.verifier else {
                throw KeysmithError.invalidArgument("the new master key is the current one")
            }
            let oldWrap = current.wrapKey, newWrap = replacement.wrapKey
            var namespaces: [ByteBuffer] = [], ids: [Int32] = [], wrapped: [ByteBuffer] = []
            for row in try await transaction.execute("SELECT namespace_id, key_id, wrapped FROM keysmith_data_keys ORDER BY namespace_id, key_id FOR UPDATE") {
                let (namespace, keyID, bytes) = try row.decode((ByteBuffer, Int32, ByteBuffer).self)
                guard let key = try NamespaceKeys.unwrap(bytes.bytes, wrapKey: oldWrap, namespaceID: namespace.bytes, keyID: keyID) else {
                    throw KeysmithError(.corruptData, "data key \(keyID) of a namespace does not open under the current master key (edited or moved); nothing was changed")
                }
                var plain = key.copyBytes()
                defer { cleanse(&plain) }
                namespaces.append(namespace)
                ids.append(keyID)
                wrapped.append(ByteBuffer(bytes: try NamespaceKeys.wrap(plain, wrapKey: newWrap, namespaceID: namespace.bytes, keyID: keyID)))
            }
            if !ids.isEmpty {
                try await transaction.execute("""
                    UPDATE keysmith_data_keys AS d SET wrapped = t.w
                    FROM unnest(\(namespaces)::bytea[], \(ids)::integer[], \(wrapped)::bytea[]) AS t(n, k, w)
                    WHERE d.namespace_id = t.n AND d.key_id = t.k
                    """)
            }
            let salt = derived.salt.map { ByteBuffer(bytes: $0) }
            try await transaction.execute("""
                UPDATE keysmith_master SET kdf = \(derived.kdf), salt = \(salt), log_n = \(derived.logN),
                    verifier = \(ByteBuffer(bytes: replacement.verifier)), identity_key = \(ByteBuffer(bytes: try replacement.wrapIdentity()))
                WHERE id = 1
                """)
            return ids.count
        }
    }

    /// Whether `key` opens the database now: after a rotation that failed, whether it committed
    /// anyway (the connection lost during COMMIT), so that a new keyfile made for it is removed
    /// only when nothing uses it.
    package static func isCurrentMasterKey(_ settings: PostgresConnectionSettings, _ key: PostgresMasterKey) throws -> Bool {
        try Blocking.runOffEventLoop { try await isCurrentMasterKey(settings, key) }
    }

    /// `isCurrentMasterKey(_:_:)`, awaited.
    package static func isCurrentMasterKey(_ settings: PostgresConnectionSettings, _ key: PostgresMasterKey) async throws -> Bool {
        let session = try await Session.connect(settings, logger: Logger(label: "keysmith.postgres"))
        defer { session.close() }
        return try await session.transaction { transaction in
            do {
                _ = try await MasterKeyRecord.loadOrCreate(key, transaction: transaction, scrypt: .standard, create: false)
                return true
            } catch let error as KeysmithError where error.code == .authenticationFailed {
                return false
            }
        }
    }
}
