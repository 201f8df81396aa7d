import Keysmith
import PostgresNIO

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
    /// The rows of these blind indexes, by index; with `lock`, locked for this transaction. Without
    /// `withSealed` (a batch that only needs versions), `sealed` comes back empty.
    static func fetch(_ indexes: [[UInt8]], namespace: [UInt8], table: RecordTable = .records, in transaction: Transaction, lock: Bool,
                      withSealed: Bool = true) async throws -> [[UInt8]: RecordRow]
    {
        var out: [[UInt8]: RecordRow] = [:]
        let namespaceBuffer = ByteBuffer(bytes: namespace)
        for piece in chunks(indexes, size: { $0.count }) {
            let chunk = piece.map { ByteBuffer(bytes: $0) }
            // Reads also fetch the newest version the change feed holds for each item (a row put
            // back from an older copy is older than that); a batch's locked read does not need it.
            let query: PostgresQuery = lock
                ? "SELECT blind_index, version, key_id, \(unescaped: withSealed ? "sealed" : "''::bytea"), NULL::bigint FROM \(unescaped: table.rawValue) WHERE namespace_id = \(namespaceBuffer) AND blind_index = ANY(\(chunk)) FOR UPDATE"
                : """
                SELECT r.blind_index, r.version, r.key_id, r.sealed,
                       (SELECT max(c.version) FROM keysmith_changes c WHERE c.namespace_id = r.namespace_id AND c.blind_index = r.blind_index)
                FROM \(unescaped: table.rawValue) r WHERE r.namespace_id = \(namespaceBuffer) AND r.blind_index = ANY(\(chunk))
                """
            for row in try await transaction.execute(query) {
                let (index, version, keyID, sealed, newest) = try row.decode((ByteBuffer, Int64, Int32, ByteBuffer, Int64?).self)
                out[index.bytes] = RecordRow(blindIndex: index.bytes, version: version, keyID: keyID, sealed: sealed.bytes, newestChange: newest)
            }
        }
        return out
    }

    /// The rows of at most ``chunkLimit`` items of one table, and of those without a row, which
    /// ones the change feed says exist (its newest change for the item is not a deletion): one
    /// statement, so one snapshot and one round trip, whether or not every item has a row (a
    /// read of an absent item took a transaction of four round trips before). The feed is asked
    /// only for items without a row.
    static func read(_ indexes: [[UInt8]], namespace: [UInt8], table: RecordTable, in transaction: Transaction) async throws
        -> (rows: [[UInt8]: RecordRow], live: Set<[UInt8]>)
    {
        precondition(indexes.count <= chunkLimit)
        let namespaceBuffer = ByteBuffer(bytes: namespace)
        let buffers = indexes.map { ByteBuffer(bytes: $0) }
        var rows: [[UInt8]: RecordRow] = [:], live: Set<[UInt8]> = []
        for row in try await transaction.execute("""
            SELECT t.i, r.version, r.key_id, r.sealed,
                   CASE WHEN r.version IS NOT NULL THEN
                       (SELECT max(c.version) FROM keysmith_changes c WHERE c.namespace_id = \(namespaceBuffer) AND c.blind_index = t.i) END,
                   CASE WHEN r.version IS NULL THEN
                       (SELECT NOT c.deleted FROM keysmith_changes c WHERE c.namespace_id = \(namespaceBuffer) AND c.blind_index = t.i
                        ORDER BY c.seq DESC LIMIT 1) END
            FROM unnest(\(buffers)::bytea[]) AS t(i)
            LEFT JOIN \(unescaped: table.rawValue) r ON r.namespace_id = \(namespaceBuffer) AND r.blind_index = t.i
            """) {
            let (index, version, keyID, sealed, newest, exists) = try row.decode((ByteBuffer, Int64?, Int32?, ByteBuffer?, Int64?, Bool?).self)
            if let version, let keyID, let sealed {
                rows[index.bytes] = RecordRow(blindIndex: index.bytes, version: version, keyID: keyID, sealed: sealed.bytes, newestChange: newest)
            } else if exists == true {
                live.insert(index.bytes)
            }
        }
        return (rows, live)
    }

    static func count(namespace: [UInt8], table: RecordTable, in transaction: Transaction) async throws -> Int {
        let namespaceBuffer = ByteBuffer(bytes: namespace)
        guard let row = try await transaction.execute("SELECT count(*) FROM \(unescaped: table.rawValue) WHERE namespace_id = \(namespaceBuffer)").first else { return 0 }
        return Int(try row.decode(Int64.self))
    }

    /// Of these indexes, those whose newest change in the feed is not a deletion: items the
    /// feed says exist (a read that finds no row for one was edited away by hand).
    static func liveInFeed(_ indexes: [[UInt8]], namespace: [UInt8], in transaction: Transaction) async throws -> Set<[UInt8]> {
        let namespaceBuffer = ByteBuffer(bytes: namespace)
        let buffers = indexes.map { ByteBuffer(bytes: $0) }
        var live: Set<[UInt8]> = []
        for row in try await transaction.execute("""
            SELECT DISTINCT ON (blind_index) blind_index, deleted FROM keysmith_changes
            WHERE namespace_id = \(namespaceBuffer) AND blind_index = ANY(\(buffers))
            ORDER BY blind_index, seq DESC
            """) {
            let (index, deleted) = try row.decode((ByteBuffer, Bool).self)
            if !deleted { live.insert(index.bytes) }
        }
        return live
    }

    /// Items whose newest change says they exist that have no row in either table: rows
    /// deleted by hand. One statement, so a write committing meanwhile is seen whole or not at
    /// all. The feed is sorted by its narrow columns only; the sealed identities are fetched for
    /// the items found.
    static func missing(namespace: [UInt8], in transaction: Transaction) async throws -> [(blindIndex: [UInt8], version: Int64, sealedKey: [UInt8])] {
        let namespaceBuffer = ByteBuffer(bytes: namespace)
        return try await transaction.execute("""
            SELECT c.blind_index, c.version, c.sealed_key FROM (
                SELECT DISTINCT ON (blind_index) blind_index, seq, deleted FROM keysmith_changes
                WHERE namespace_id = \(namespaceBuffer) ORDER BY blind_index, seq DESC) n
            JOIN keysmith_changes c ON c.seq = n.seq
            WHERE NOT n.deleted
              AND NOT EXISTS (SELECT 1 FROM keysmith_records r WHERE r.namespace_id = \(namespaceBuffer) AND r.blind_index = n.blind_index)
              AND NOT EXISTS (SELECT 1 FROM keysmith_audit a WHERE a.namespace_id = \(namespaceBuffer) AND a.blind_index = n.blind_index)
            """).map { row in
            let (index, version, sealedKey) = try row.decode((ByteBuffer, Int64, ByteBuffer).self)
            return (index.bytes, version, sealedKey.bytes)
        }
    }

    /// The version each of these rows is at, by blind index (rows that do not exist are absent).
    static func versions(_ indexes: [[UInt8]], namespace: [UInt8], in transaction: Transaction) async throws -> [[UInt8]: Int64] {
        var out: [[UInt8]: Int64] = [:]
        let namespaceBuffer = ByteBuffer(bytes: namespace)
        for piece in chunks(indexes, size: { $0.count }) {
            let chunk = piece.map { ByteBuffer(bytes: $0) }
            for row in try await transaction.execute("""
                SELECT blind_index, version FROM keysmith_records WHERE namespace_id = \(namespaceBuffer) AND blind_index = ANY(\(chunk))
                """) {
                let (index, version) = try row.decode((ByteBuffer, Int64).self)
                out[index.bytes] = version
            }
        }
        return out
    }

    /// Up to `limit` rows after the blind index `after`, in index order. The walk is told to
    /// follow the primary key: planned from statistics that lag a bulk import (the planner
    /// guessed a thousand rows where there were a hundred thousand), it read and sorted every
    /// row past the cursor for each page, and a scan grew with the square of the table.
    static func page(namespace: [UInt8], table: RecordTable, after: [UInt8]?, limit: Int, in transaction: Transaction) async throws -> [RecordRow] {
        let namespaceBuffer = ByteBuffer(bytes: namespace)
        // For this transaction only; any role may set it.
        try await transaction.execute("SELECT set_config('enable_bitmapscan', 'off', true)")
        let rows: [PostgresRow]
        if let after {
            let afterBuffer = ByteBuffer(bytes: after)
            rows = try await transaction.execute("""
                SELECT r.blind_index, r.version, r.key_id, r.sealed,
                       (SELECT max(c.version) FROM keysmith_changes c WHERE c.namespace_id = r.namespace_id AND c.blind_index = r.blind_index)
                FROM \(unescaped: table.rawValue) r
                WHERE r.namespace_id = \(namespaceBuffer) AND r.blind_index > \(afterBuffer) ORDER BY r.blind_index LIMIT \(limit)
                """)
        } else {
            rows = try await transaction.execute("""
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
        /// The version the row is at, when it exists; the update checks it.
        var existing: Int64?
        var exists: Bool { existing != nil }
        /// The item's identity sealed for the change feed.
        var sealedKey: [UInt8]
    }

    /// One row a batch deletes.
    struct Removal {
        var table: RecordTable = .records
        var blindIndex: [UInt8]
        /// The version the row is at; the delete checks it.
        var existing: Int64
        var sealedKey: [UInt8]
    }

    /// The most items one statement carries (``chunks(_:size:)``).
    static let chunkLimit = 16_384

    /// Splits `items` into runs of at most ``chunkLimit`` items or 16 MiB (by `size`).
    static func chunks<T>(_ items: [T], size: (T) -> Int) -> [ArraySlice<T>] {
        var out: [ArraySlice<T>] = []
        var start = 0, bytes = 0
        for (index, item) in items.enumerated() {
            if index > start && (index - start >= chunkLimit || bytes + size(item) > 16 << 20) {
                out.append(items[start..<index])
                start = index
                bytes = 0
            }
            bytes += size(item)
        }
        if start < items.count { out.append(items[start...]) }
        return out
    }

    /// Sends the statements that write these rows (array statements, a few per 16,384 rows)
    /// without waiting for their answers: the caller seals the next rows while the server writes
    /// these. ``appendChanges(_:keys:version:after:in:)`` checks the answers.
    static func send(puts: [Put], removals: [Removal], namespace: [UInt8], version: Int64, keyID: Int32,
                     in transaction: Transaction) -> [Transaction.Pending] {
        let namespaceBuffer = ByteBuffer(bytes: namespace)
        var pending: [Transaction.Pending] = []
        // Only records are ever rewritten or deleted: the batch refused audit changes already.
        precondition(!puts.contains { $0.exists && $0.table == .audit } && !removals.contains { $0.table == .audit })
        // Each row is written only at the version the batch saw (read and locked, or stated by a
        // replace), and never over a row sealed with a newer data key than the batch's (one
        // `rekey` re-sealed meanwhile, keeping its version): a row changed meanwhile makes the
        // count short, and the batch runs again.
        for chunk in chunks(puts.filter(\.exists), size: { $0.sealed.count }) {
            let indexes = chunk.map { ByteBuffer(bytes: $0.blindIndex) }, sealed = chunk.map { ByteBuffer(bytes: $0.sealed) }
            let expected = chunk.map { $0.existing ?? 0 }
            pending.append(transaction.send("""
                WITH written AS (
                    UPDATE keysmith_records AS r SET version = \(version), key_id = \(keyID), sealed = t.s
                    FROM unnest(\(indexes)::bytea[], \(sealed)::bytea[], \(expected)::bigint[]) AS t(i, s, v)
                    WHERE r.namespace_id = \(namespaceBuffer) AND r.blind_index = t.i AND r.version = t.v AND r.key_id <= \(keyID)
                    RETURNING 1)
                SELECT count(*) FROM written
                """, touching: chunk.count))
        }
        // A concurrent creator of the same item makes an insert a unique violation: the batch
        // is retried and then sees that item.
        for table in RecordTable.allCases {
            for chunk in chunks(puts.filter { !$0.exists && $0.table == table }, size: { $0.sealed.count }) {
                let indexes = chunk.map { ByteBuffer(bytes: $0.blindIndex) }, sealed = chunk.map { ByteBuffer(bytes: $0.sealed) }
                pending.append(transaction.send("""
                    INSERT INTO \(unescaped: table.rawValue) (namespace_id, blind_index, version, key_id, sealed)
                    SELECT \(namespaceBuffer), t.i, \(version), \(keyID), t.s FROM unnest(\(indexes)::bytea[], \(sealed)::bytea[]) AS t(i, s)
                    """, touching: nil))
            }
        }
        for chunk in chunks(removals, size: { _ in 64 }) {
            let indexes = chunk.map { ByteBuffer(bytes: $0.blindIndex) }, expected = chunk.map(\.existing)
            pending.append(transaction.send("""
                WITH removed AS (
                    DELETE FROM keysmith_records AS r USING unnest(\(indexes)::bytea[], \(expected)::bigint[]) AS t(i, v)
                    WHERE r.namespace_id = \(namespaceBuffer) AND r.blind_index = t.i AND r.version = t.v
                    RETURNING 1)
                SELECT count(*) FROM removed
                """, touching: chunk.count))
        }
        return pending
    }

    /// One row of the change feed a batch adds: the item's index, whether it was deleted, and
    /// its identity sealed for the feed.
    typealias Change = (blindIndex: [UInt8], deleted: Bool, sealedKey: [UInt8])

    /// Checks every statement `pending` sent, then adds the batch's change rows to the
    /// namespace's chain and moves its head. Returns the sequence number of the batch's last
    /// change row (what watchers acknowledge), or 0 when it changed nothing.
    @discardableResult
    static func appendChanges(_ changed: [Change], keys: NamespaceKeys, version: Int64, after pending: [Transaction.Pending],
                              in transaction: Transaction) async throws -> Int64 {
        // In order: the first statement that failed is the cause (those after it fail because
        // the transaction already had).
        for statement in pending {
            let rows = try await transaction.wait(statement)
            if let count = statement.touching {
                guard let first = rows.first, try first.decode(Int64.self) == Int64(count) else {
                    throw RetryableConflict(state: "a row changed since the batch read it")
                }
            }
        }
        guard !changed.isEmpty else { return 0 }
        let namespace = keys.namespaceID
        let namespaceBuffer = ByteBuffer(bytes: namespace)
        // From here to COMMIT, one writer at a time per namespace: its change rows take
        // their sequence numbers under this lock, so a namespace's change rows become
        // visible in sequence order (a watcher that read up to N never has a row below N
        // appear later), and each row links to the one before it.
        // One statement: creates the namespace's head if it has none, locks it either way
        // (an upsert's update takes the row lock), and returns its link.
        guard let head = try await transaction.execute("""
            INSERT INTO keysmith_chain_heads AS h (namespace_id, seq, chain) VALUES (\(namespaceBuffer), 0, \(ByteBuffer(bytes: NamespaceKeys.chainGenesis)))
            ON CONFLICT (namespace_id) DO UPDATE SET seq = h.seq RETURNING h.seq, h.chain
            """).first else {
            throw KeysmithError(.ioFailure, "PostgreSQL returned no chain head")
        }
        let (headSequence, headChain) = try head.decode((Int64, ByteBuffer).self)
        var link = headChain.bytes
        // The head must name the newest link (a statement after the lock sees every commit
        // made before it): a chain whose head was set back is never extended into a fork.
        let newest = try await transaction.execute("""
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
        guard let reserved = try await transaction.execute("""
            SELECT array_agg(v ORDER BY v) FROM (SELECT nextval('keysmith_changes_seq_seq') AS v FROM generate_series(1, \(Int64(changed.count)))) s
            """).first, let sequences = try reserved.decode([Int64]?.self), sequences.count == changed.count else {
            throw KeysmithError(.ioFailure, "PostgreSQL returned no sequence numbers for the change feed")
        }
        let last = sequences.last ?? 0
        // Each run's links are made while the server stores the run before.
        var inserts: [Transaction.Pending] = []
        let pieces = chunks(Array(changed.indices), size: { _ in 160 })
        for (number, piece) in pieces.enumerated() {
            var chains: [ByteBuffer] = []
            chains.reserveCapacity(piece.count)
            for position in piece {
                let change = changed[position]
                link = keys.chainLink(after: link, sequence: sequences[position], blindIndex: change.blindIndex, version: version,
                                      deleted: change.deleted, sealedKey: change.sealedKey)
                chains.append(ByteBuffer(bytes: link))
            }
            let seqs = piece.map { sequences[$0] }, indexes = piece.map { ByteBuffer(bytes: changed[$0].blindIndex) }
            let deleted = piece.map { changed[$0].deleted }, sealedKeys = piece.map { ByteBuffer(bytes: changed[$0].sealedKey) }
            if number < pieces.count - 1 {
                inserts.append(transaction.send("""
                    INSERT INTO keysmith_changes (seq, namespace_id, blind_index, version, deleted, sealed_key, chain)
                    SELECT t.q, \(namespaceBuffer), t.i, \(version), t.d, t.k, t.c
                    FROM unnest(\(seqs)::bigint[], \(indexes)::bytea[], \(deleted)::boolean[], \(sealedKeys)::bytea[], \(chains)::bytea[]) AS t(q, i, d, k, c)
                    """, touching: nil))
            } else {
                // The last run also moves the head and notifies watchers (delivered at
                // COMMIT), in the same statement.
                let payload = namespace.hexString
                inserts.append(transaction.send("""
                    WITH inserted AS (
                        INSERT INTO keysmith_changes (seq, namespace_id, blind_index, version, deleted, sealed_key, chain)
                        SELECT t.q, \(namespaceBuffer), t.i, \(version), t.d, t.k, t.c
                        FROM unnest(\(seqs)::bigint[], \(indexes)::bytea[], \(deleted)::boolean[], \(sealedKeys)::bytea[], \(chains)::bytea[]) AS t(q, i, d, k, c)),
                    moved AS (
                        UPDATE keysmith_chain_heads SET seq = \(last), chain = \(ByteBuffer(bytes: link)) WHERE namespace_id = \(namespaceBuffer)
                        RETURNING 1)
                    SELECT pg_notify(\(PostgresSchema.channel), \(payload)) FROM moved
                    """, touching: nil))
            }
        }
        for statement in inserts { _ = try await transaction.wait(statement) }
        return last
    }
}
