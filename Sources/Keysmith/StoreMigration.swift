/// What to do when the destination already holds a different item with the same identity.
public enum MigrationConflictPolicy: String, Sendable, CaseIterable {
    /// Leave the destination's item; do not remove the source's.
    case skip
    /// Replace the destination's item with the source's.
    case overwrite
    /// Stop before writing anything.
    case fail
}

/// What a migration did, or in a dry run would do.
public struct MigrationReport: Sendable, Hashable {
    /// Items copied to the destination.
    public var copied: [ItemKey] = []
    /// Items already in the destination, identical (an interrupted migration run again).
    public var alreadyPresent: [ItemKey] = []
    /// Items that differed in the destination and were replaced.
    public var overwritten: [ItemKey] = []
    /// Items that differed in the destination and were left alone.
    public var skipped: [ItemKey] = []
    /// Items removed from the source after their copies were verified.
    public var removedFromSource: [ItemKey] = []
    /// Whether this was a dry run (nothing written).
    public var dryRun: Bool = false
}

/// Moves items between any two stores, in the spirit of Valet's `migrateObjects`.
///
/// ```swift
/// let report = try StoreMigration.migrate(from: secretService, to: vault, conflicts: .skip, removeFromSource: true)
/// ```
///
/// Every attribute and both dates are copied. The source loses an item only when asked, and
/// only after every copy was read back from the destination and found identical. A migration
/// that was interrupted can be run again: identical items count as done, so nothing is lost
/// and nothing is copied twice.
public enum StoreMigration {
    /// Migrates items.
    ///
    /// - Parameters:
    ///   - source: Where the items are.
    ///   - destination: Where they go.
    ///   - query: Which items; every item of both namespaces if omitted, so that tokens and the
    ///     audit log move with the secrets, each as the kind of record it is.
    ///   - conflicts: What to do with a different item of the same identity in the destination.
    ///   - removeFromSource: Remove migrated items from the source after verifying the copies.
    ///   - dryRun: Report what would happen without writing anything.
    /// - Returns: What was (or would be) done, item by item.
    /// - Throws: ``KeysmithError/Code/duplicateItem`` for a conflict under ``MigrationConflictPolicy/fail``
    ///   (nothing written then); ``KeysmithError/Code/corruptData`` if a copy does not read back
    ///   identical (nothing removed then); any store failure.
    public static func migrate(
        from source: any SecureStore, to destination: any SecureStore, query: ItemQuery = ItemQuery(namespace: .any),
        conflicts: MigrationConflictPolicy = .fail, removeFromSource: Bool = false, dryRun: Bool = false
    ) throws -> MigrationReport {
        var report = MigrationReport(dryRun: dryRun)
        let keys = try source.search(query).map(\.key)
        let records = try source.read(keys).compactMap { $0 }
        let existing = try destination.read(records.map(\.key))
        var writes: [StoreOperation] = []
        var migrated: [SecureRecord] = []
        for (record, present) in zip(records, existing) {
            guard let present else {
                report.copied.append(record.key)
                writes.append(.restore(record))
                migrated.append(record)
                continue
            }
            if present.hasSameContents(as: record) {
                report.alreadyPresent.append(record.key)
                migrated.append(record)
                continue
            }
            switch conflicts {
            case .fail:
                throw KeysmithError(
                    .duplicateItem,
                    "\(record.key) already exists in \(destination.storeDescription) with other contents; nothing was migrated (choose skip or overwrite)")
            case .skip:
                report.skipped.append(record.key)
            case .overwrite:
                report.overwritten.append(record.key)
                writes.append(.restore(record))
                migrated.append(record)
            }
        }
        if dryRun {
            if removeFromSource { report.removedFromSource = migrated.map(\.key) }
            return report
        }
        if !writes.isEmpty { try destination.perform(writes) }

        // Read every copy back before touching the source.
        let copies = try destination.read(migrated.map(\.key))
        for (record, copy) in zip(migrated, copies) where copy.map({ !$0.hasSameContents(as: record) }) ?? true {
            throw KeysmithError(
                .corruptData,
                "the copy of \(record.key) in \(destination.storeDescription) does not read back identical; nothing was removed from \(source.storeDescription)")
        }
        if removeFromSource, !migrated.isEmpty {
            try source.perform(migrated.map { .delete($0.key, ifVersion: $0.info.version) })
            report.removedFromSource = migrated.map(\.key)
        }
        return report
    }
}
