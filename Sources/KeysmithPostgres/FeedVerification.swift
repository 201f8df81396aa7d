import Keysmith
internal import KeysmithCrypto
internal import KeysmithSystem
internal import NIOCore
internal import PostgresNIO

/// What `PostgresStore.verifyChangeFeed(pageSize:anchor:acceptRollback:)` found.
public struct ChangeFeedVerification: Sendable, Hashable {
    /// The namespace's change rows read.
    public var changes: Int
    /// Of those, rows written before the feed was chained (they come first and have no link).
    public var unlinked: Int
    /// What is wrong, at most 100 entries; empty when the feed is whole.
    public var problems: [String]
    /// Whether nothing is wrong.
    public var isIntact: Bool { problems.isEmpty }
}

/// Where `PostgresStore.verifyChangeFeed(pageSize:anchor:acceptRollback:)` records, outside
/// the database, the newest change it found intact, so that a later check notices the newest
/// change rows deleted (and the chain's head set back to match), or the whole feed put back.
///
/// ```swift
/// let feed = try store.verifyChangeFeed(anchor: .standard)
/// ```
///
/// A feed is known by its database, user and namespace: one moved elsewhere starts without a mark.
public struct ChangeFeedAnchor: Sendable {
    let marks: MarkFiles
    static let header = "keysmith-pg-feed-anchor-1"

    /// Marks kept in `directory` (created 0700 when missing).
    public init(directory: String) {
        marks = MarkFiles(directory: directory)
    }

    /// Marks in `$KEYSMITH_ANCHOR_DIR`, else `$XDG_STATE_HOME/keysmith/anchors`, else
    /// `~/.local/state/keysmith/anchors` (beside the vault's and the audit log's).
    public static var standard: ChangeFeedAnchor { ChangeFeedAnchor(directory: MarkFiles.defaultDirectory) }

    func name(for store: PostgresStore) -> String {
        let identity = Array(store.storeDescription.utf8) + store.keys.namespaceID
        return "pg-feed-" + Array(SHA256.hash(identity).prefix(16)).hexString
    }
}

extension PostgresStore {
    /// Checks this namespace's change feed from its first row, as a database administrator
    /// cannot fake without the master key: every row must continue the keyed chain from the row
    /// before it (one deleted, edited, reordered or renumbered breaks it), must open, and the
    /// chain's head must name the newest row; every record and audit entry must have the
    /// change row of its version (a row put back from an older copy, or one whose change rows
    /// were deleted, does not); and every record and audit entry must open (an edited, swapped
    /// or moved row does not: the listing that met it sends here).
    ///
    /// ```swift
    /// let feed = try store.verifyChangeFeed()
    /// if !feed.isIntact { feed.problems.forEach { print($0) } }
    /// ```
    ///
    /// Not caught: the newest rows deleted together with the head set back to the row before
    /// them, by someone who then writes nothing (a watcher that had read them notices at the
    /// next change). Reads the whole feed, a page at a time.
    ///
    /// With an `anchor`, the check also fails when the feed no longer reaches the newest change
    /// an earlier check on this machine found intact, with the same link (the newest rows
    /// deleted, or the feed put back); an intact feed moves the mark up. `acceptRollback` forgets
    /// the mark first (after a deliberate restore of the database).
    public func verifyChangeFeed(pageSize: Int = 10_000, anchor: ChangeFeedAnchor? = nil,
                                 acceptRollback: Bool = false) throws -> ChangeFeedVerification {
        try Blocking.runOffEventLoop { try await verifyChangeFeed(pageSize: pageSize, anchor: anchor, acceptRollback: acceptRollback) }
    }

    /// `verifyChangeFeed(pageSize:anchor:acceptRollback:)` without blocking a thread: the same check, awaited.
    public func verifyChangeFeed(pageSize: Int = 10_000, anchor: ChangeFeedAnchor? = nil,
                                 acceptRollback: Bool = false) async throws -> ChangeFeedVerification {
        let markName = anchor?.name(for: self)
        if acceptRollback, let anchor, let markName { try? anchor.marks.remove(markName) }
        let mark = markName.flatMap { anchor?.marks.read($0, header: ChangeFeedAnchor.header) }
        var markSeen = false
        let size = Int64(max(1, min(pageSize, 100_000)))
        let namespaceBuffer = ByteBuffer(bytes: keys.namespaceID)
        var result = ChangeFeedVerification(changes: 0, unlinked: 0, problems: [])
        func problem(_ text: String) { if result.problems.count < 100 { result.problems.append(text) } }
        // The head first: rows committed while this runs come after it.
        let head = try await withSessionPublic { session in
            try await session.transaction { transaction in
                try await transaction.execute("SELECT seq, chain FROM keysmith_chain_heads WHERE namespace_id = \(namespaceBuffer)")
                    .first?.decode((Int64, ByteBuffer).self)
            }
        }
        var link: [UInt8]?
        var after: Int64 = 0
        var headSeen = head == nil || head?.0 == 0
        while true {
            let rows = try await withSessionPublic { session in
                try await session.transaction { transaction in
                    let rows = try await transaction.execute("""
                        SELECT seq, blind_index, version, deleted, sealed_key, chain FROM keysmith_changes
                        WHERE namespace_id = \(namespaceBuffer) AND seq > \(after) ORDER BY seq LIMIT \(size)
                        """).map { try $0.decode((Int64, ByteBuffer, Int64, Bool, ByteBuffer, ByteBuffer?).self) }
                    try await keys.ensureKnown(rows.compactMap { row in
                        let bytes = row.4.readableBytesView
                        return bytes.count >= 4 ? Int32(bitPattern: bytes.prefix(4).reduce(0) { $0 << 8 | UInt32($1) }) : nil
                    }, in: transaction)
                    return rows
                }
            }
            for (sequence, index, version, deleted, sealedKey, chain) in rows {
                result.changes += 1
                switch keys.chainStep(after: link, sequence: sequence, blindIndex: index.bytes, version: version, deleted: deleted,
                                      sealedKey: sealedKey.bytes, stored: chain?.bytes) {
                case .unlinked:
                    result.unlinked += 1
                case .missingLink:
                    problem("change \(sequence) has no chain link, though the changes before it have: the feed was edited")
                case .broken(let stored):
                    problem("change \(sequence) does not continue the chain from the change before it: a change row before it was deleted, "
                            + "or it was edited, reordered or renumbered")
                    link = stored
                case .linked(let next):
                    link = next
                }
                if let mark, UInt64(sequence) == mark.sequence {
                    markSeen = true
                    if (chain?.bytes).map(\.hexString) != mark.value {
                        problem("change \(sequence) is not the change this machine found there before: the feed was rewritten or put back")
                    }
                }
                if let head, sequence == head.0 {
                    headSeen = true
                    if chain?.bytes != head.1.bytes { problem("the chain's head does not match change \(sequence), which it names") }
                }
                do {
                    _ = try keys.openKey(sealedKey.bytes, blindIndex: index.bytes, version: version)
                } catch let error as KeysmithError where error.code == .corruptData {
                    problem("change \(sequence) does not open (\(error.message))")
                }
            }
            guard let last = rows.last else { break }
            after = last.0
        }
        if let mark, !markSeen {
            problem("this machine found change \(mark.sequence) intact before, and the feed no longer has it: its newest rows were deleted, "
                    + "or the database was put back (verify with acceptRollback / --accept-rollback after a deliberate restore)")
        }
        if let head, !headSeen {
            problem("the chain's head names change \(head.0), which is missing: the newest change rows were deleted")
        }
        // The head must name the newest row. Rows committed while this ran came with a head at
        // least as new, so the head is read again for the comparison.
        if after > 0, let headNow = try await withSessionPublic({ session in
            try await session.transaction { transaction in
                try await transaction.execute("SELECT seq FROM keysmith_chain_heads WHERE namespace_id = \(namespaceBuffer)")
                    .first?.decode(Int64.self)
            }
        }), headNow < after, link != nil {
            problem("the chain's head names change \(headNow), but the newest change is \(after): the head was set back")
        }
        if head == nil, link != nil {
            problem("the namespace's chain head is missing, though its changes are chained")
        }
        // Every item the feed says exists (its newest change is not a deletion) has its row.
        let missing = try await withSessionPublic { session in
            try await session.transaction(snapshot: true) { transaction in
                try await transaction.execute("""
                    SELECT count(*) FROM (
                        SELECT DISTINCT ON (blind_index) blind_index, deleted FROM keysmith_changes
                        WHERE namespace_id = \(namespaceBuffer) ORDER BY blind_index, seq DESC) n
                    WHERE NOT n.deleted
                      AND NOT EXISTS (SELECT 1 FROM keysmith_records r WHERE r.namespace_id = \(namespaceBuffer) AND r.blind_index = n.blind_index)
                      AND NOT EXISTS (SELECT 1 FROM keysmith_audit a WHERE a.namespace_id = \(namespaceBuffer) AND a.blind_index = n.blind_index)
                    """).first?.decode(Int64.self) ?? 0
            }
        }
        if missing > 0 {
            problem("\(missing) item(s) that the change feed says exist have no row: deleted by hand (reading one names it; "
                    + "writing or deleting it again repairs it)")
        }
        // Every record and audit entry has the change row of its own version, and none is older
        // than its item's newest change: the rows that fail either, and how.
        let flagged = try await withSessionPublic { session in
            try await session.transaction { transaction in
                var flagged: [RecordTable: [[UInt8]: (orphan: Bool, behind: Bool)]] = [:]
                for table in RecordTable.allCases {
                    let rows = try await transaction.execute("""
                        SELECT blind_index, orphan, behind FROM (
                            SELECT r.blind_index,
                                   (newest IS NULL OR NOT EXISTS (
                                       SELECT 1 FROM keysmith_changes c
                                       WHERE c.namespace_id = r.namespace_id AND c.blind_index = r.blind_index AND c.version = r.version)) AS orphan,
                                   coalesce(r.version < newest, false) AS behind
                            FROM \(unescaped: table.rawValue) r
                            CROSS JOIN LATERAL (SELECT max(c.version) AS newest FROM keysmith_changes c
                                                WHERE c.namespace_id = r.namespace_id AND c.blind_index = r.blind_index) n
                            WHERE r.namespace_id = \(namespaceBuffer)) f
                        WHERE orphan OR behind
                        """)
                    for row in rows {
                        let (index, orphan, behind) = try row.decode((ByteBuffer, Bool, Bool).self)
                        flagged[table, default: [:]][index.bytes] = (orphan, behind)
                    }
                }
                return flagged
            }
        }
        // Every row opens under the keys (its associated data binds its index, version and
        // key): an edited, swapped or moved row is found here, not only when its item is read.
        var unopened: [RecordTable: Set<[UInt8]>] = [:]
        for table in RecordTable.allCases {
            var after: [UInt8]? = nil
            while true {
                let page = try await withSessionPublic { session in
                    try await session.transaction { transaction in
                        let page = try await RecordRows.page(namespace: keys.namespaceID, table: table, after: after, limit: Int(size), in: transaction)
                        try? await keys.ensureKnown(page.map(\.keyID), in: transaction)  // an unknown key id fails the row's open
                        return page
                    }
                }
                guard let last = page.last else { break }
                after = last.blindIndex
                for row in page where (try? keys.open(row, withSecret: false)) == nil { unopened[table, default: []].insert(row.blindIndex) }
                if page.count < Int(size) { break }
            }
        }
        // Each damaged row counted once, under the one heading that explains it: a row with the
        // change row of its (older) version was put back whole; any other that does not open
        // was edited, swapped or moved; one that opens but lacks its change row lost it.
        var putBack = 0, broken = 0, orphaned = 0
        for table in RecordTable.allCases {
            let rows = Set(flagged[table, default: [:]].keys).union(unopened[table, default: []])
            for index in rows {
                let flags = flagged[table]?[index] ?? (orphan: false, behind: false)
                if flags.behind && !flags.orphan {
                    putBack += 1
                } else if unopened[table]?.contains(index) == true {
                    broken += 1
                } else {
                    orphaned += 1
                }
            }
        }
        if putBack > 0 {
            problem("\(putBack) row(s) are older than their item's newest change: put back from an older copy")
        }
        if orphaned > 0 {
            problem("\(orphaned) row(s) have no change row for their version: their change rows were deleted, "
                    + "or the row's version or index was edited")
        }
        if broken > 0 {
            problem("\(broken) row(s) do not open: edited, swapped or moved by hand (reading the item names it; writing it again repairs it)")
        }
        if result.isIntact, let anchor, let markName, let link, after > 0 {
            anchor.marks.advance(markName, header: ChangeFeedAnchor.header, sequence: UInt64(after),
                                 value: link.hexString)
        }
        return result
    }
}
