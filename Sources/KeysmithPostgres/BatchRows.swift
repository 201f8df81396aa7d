import FoundationEssentials
import Keysmith
import KeysmithCrypto

/// The server-free half of a batch's write (`PostgresStore.apply`): which rows it reads, what
/// the batch planner is told of each item, and the rows it sends, sealed. The other half reads
/// and locks the rows, takes the version, sends these rows and appends the change rows. Tested
/// without a server (BatchRowsTests).
struct BatchRows {
    /// The namespace's keys.
    let keys: NamespaceKeys
    /// The batch's keys, in the order they first appear.
    let distinct: [ItemKey]
    /// The versions a trusting batch takes without reading: the first operation on an item of
    /// the records table is a replace at a numeric version.
    let stated: [ItemKey: Int64]
    /// Each key's blind index.
    let indexes: [ItemKey: [UInt8]]
    /// Whether the rows' sealed bodies must be read (an update or upsert merges into what an
    /// item holds); otherwise only versions are read, so a bulk replace fetches no sealed row.
    let readsRecords: Bool

    /// Works out what `operations` touch. With `trusting`, an item whose first operation is a
    /// replace at a stated version is taken to be at that version (the write checks it).
    init(_ operations: [StoreOperation], trusting: Bool, keys: NamespaceKeys) throws {
        var distinct: [ItemKey] = []
        var seen: Set<ItemKey> = []
        var stated: [ItemKey: Int64] = [:]
        for operation in operations where seen.insert(operation.key).inserted {
            distinct.append(operation.key)
            if trusting, case .replace(let record) = operation, RecordTable(operation.key) == .records,
               let version = Int64(record.info.version.rawValue) {
                stated[operation.key] = version
            }
        }
        let indexes = try concurrentChunks(count: distinct.count) { range in range.map { keys.blindIndex(distinct[$0]) } }
        self.keys = keys
        self.distinct = distinct
        self.stated = stated
        self.indexes = Dictionary(zip(distinct, indexes), uniquingKeysWith: { first, _ in first })
        self.readsRecords = operations.contains { operation in
            switch operation {
            case .update, .upsert: true
            default: false
            }
        }
    }

    /// The items whose rows must be read (and locked): every one whose version was not stated.
    var toRead: [(ItemKey, [UInt8])] {
        distinct.compactMap { key in stated[key] == nil ? (key, indexes[key]!) : nil }
    }

    /// The version an item's row is at (read, or stated), or `nil` when it has none.
    func version(of key: ItemKey, rows: [[UInt8]: RecordRow]) -> Int64? {
        indexes[key].flatMap { rows[$0]?.version } ?? stated[key]
    }

    /// What the batch planner (`resolveBatch`) is told an item holds now: its stated version,
    /// nothing, its version (when the planner needs no metadata), its metadata, or damage (a
    /// row that does not open, or opens as another item).
    func existing(_ key: ItemKey, needsMetadata: Bool, rows: [[UInt8]: RecordRow]) -> ExistingItem {
        if let version = stated[key] { return .atVersion(ItemVersion(rawValue: String(version))) }
        guard let index = indexes[key], let row = rows[index] else { return .absent }
        guard needsMetadata else { return .atVersion(ItemVersion(rawValue: String(row.version))) }
        guard let record = try? keys.open(row, withSecret: false), record.key == key else { return .damaged }
        return .present(record.info)
    }

    /// Seals a run of the planner's writes at `version` with `dataKey`, on every core (each seal
    /// is independent; the order is kept): a put becomes a row to insert or update at the
    /// version it was read at, a removal a row to delete at its version. Refused: any change to
    /// an audit entry that exists (the audit log is append-only) and any removal of one; a
    /// removal of a row that has no version (it vanished) is a conflict to retry.
    func seal(_ run: ArraySlice<ResolvedWrite>, version: Int64, dataKey: (id: Int32, key: SecretBytes), rows: [[UInt8]: RecordRow]) throws
        -> (puts: [RecordRows.Put], removals: [RecordRows.Removal])
    {
        let sealed = try concurrentChunks(count: run.count) { range in
            let ciphers = NamespaceKeys.Ciphers()
            return try range.map { offset -> (put: RecordRows.Put?, removal: RecordRows.Removal?) in
                switch run[run.startIndex + offset] {
                case .put(let record):
                    let index = indexes[record.key] ?? keys.blindIndex(record.key)
                    let table = RecordTable(record.key)
                    let existing = self.version(of: record.key, rows: rows)
                    if table == .audit, existing != nil { throw BatchRows.appendOnly }
                    return (RecordRows.Put(table: table, blindIndex: index,
                                           sealed: try keys.seal(record, blindIndex: index, version: version, with: dataKey, ciphers: ciphers),
                                           existing: existing,
                                           sealedKey: try keys.sealKey(record.key, blindIndex: index, version: version, with: dataKey, ciphers: ciphers)),
                            nil)
                case .remove(let key):
                    let index = indexes[key] ?? keys.blindIndex(key)
                    if RecordTable(key) == .audit { throw BatchRows.appendOnly }
                    // A removal is of an item that exists (the batch planner drops the others).
                    guard let existing = self.version(of: key, rows: rows) else { throw RetryableConflict(state: "a removed row vanished") }
                    return (nil, RecordRows.Removal(blindIndex: index, existing: existing,
                                                    sealedKey: try keys.sealKey(key, blindIndex: index, version: version, with: dataKey,
                                                                                ciphers: ciphers)))
                }
            }
        }
        return (sealed.compactMap(\.put), sealed.compactMap(\.removal))
    }

    static let appendOnly = KeysmithError(.invalidArgument, "the audit log in PostgreSQL is append-only: an entry is never changed or deleted; nothing was applied")
}
