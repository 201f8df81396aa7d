package import FoundationEssentials

/// The net effect of a batch on one key, after every operation of the batch was checked.
package enum ResolvedWrite: Sendable {
    /// The key ends up holding this record.
    case put(SecureRecord)
    /// The key ends up empty (it existed before the batch).
    case remove(ItemKey)

    /// The key written.
    package var key: ItemKey {
        switch self {
        case .put(let record): record.key
        case .remove(let key): key
        }
    }
}

/// What a key holds when a batch starts, as the store sees it.
package enum ExistingItem: Sendable {
    /// Nothing.
    case absent
    /// An intact item.
    case present(ItemInfo)
    /// An item known only by its version: what a store answers when the batch planner says
    /// it needs no metadata (a ``StoreOperation/replace(_:)`` or a delete), when reading them
    /// would cost a decryption.
    case atVersion(ItemVersion)
    /// A record the store cannot read (damaged): it exists, but its metadata are unknown. An
    /// update, upsert or delete replaces it (repair); a create is refused.
    case damaged
}

/// Checks what a batch's operations give against a store's limits, before anything is read:
/// a secret or a given name or field over a limit refuses the whole batch at once, whichever
/// operation holds it (a store calls this before it takes its writer lock, so an oversized
/// batch neither waits for other writers nor costs a round trip to the store).
///
/// Attributes an update keeps from the stored item are checked by ``resolveBatch(_:now:version:limits:store:existing:)``,
/// which calls this first.
///
/// - Throws: ``KeysmithError/Code/limitExceeded`` for the first operation over a limit.
package func checkBatchLimits(_ operations: [StoreOperation], limits: StoreLimits, store: String) throws {
    for operation in operations {
        switch operation {
        // The given attributes, not merged: merging only drops empty fields, which no limit refuses.
        case .create(let attributes, let secret), .update(let attributes, let secret, _), .upsert(let attributes, let secret):
            try limits.check(attributes, secretSize: secret.count, in: store)
        case .replace(let record), .restore(let record):
            try limits.check(record.attributes, secretSize: record.secret.count, in: store)
        case .delete:
            continue
        }
    }
}

/// Checks a batch of operations against a store's current state and works out its net effect.
///
/// Every store applies batches the same way through this one function, so that duplicate,
/// not-found, version, limit, validation and update rules cannot drift apart between stores.
///
/// - Parameters:
///   - operations: The batch, in order.
///   - now: The time to stamp on created and modified dates.
///   - version: The version every record the batch writes gets.
///   - limits: The store's limits; `store` names the store in their errors.
///   - existing: What a key holds now; when `needsMetadata` is `false` the store may answer
///     ``ExistingItem/atVersion(_:)`` for an item it holds.
/// - Returns: One write per key touched, in the order keys first appear; a key created and
///   deleted within the batch appears not at all.
/// - Throws: ``KeysmithError/Code/limitExceeded`` when an operation gives a secret or a field
///   over a limit (``checkBatchLimits(_:limits:store:)``, before any key is looked up); otherwise
///   the first operation's error that cannot be applied. Nothing is applied then.
package func resolveBatch(
    _ operations: [StoreOperation], now: Date, version: ItemVersion, limits: StoreLimits, store: String,
    existing: (_ key: ItemKey, _ needsMetadata: Bool) throws -> ExistingItem
) throws -> [ResolvedWrite] {
    // One slot per key touched, in the order keys first appear: what the key ends up holding
    // (after a slot's first operation, what it holds at this point of the batch) and whether
    // it existed before. Slots are found by the key's hash (a small table: bulk batches of
    // 100,000 keys stay small in memory); a key whose hash another key took goes in `others`.
    var finals: [ResolvedWrite] = []
    var existedBefore: [Bool] = []
    var byHash: [Int: Int] = [:]
    var others: [ItemKey: Int] = [:]
    finals.reserveCapacity(operations.count)
    existedBefore.reserveCapacity(operations.count)
    byHash.reserveCapacity(operations.count)
    try checkBatchLimits(operations, limits: limits, store: store)

    func put(_ attributes: ItemAttributes, over current: ExistingItem, secret: Data, created: Date?) throws -> SecureRecord {
        var old: ItemAttributes?
        if case .present(let info) = current { old = info.attributes }
        let info = ItemInfo(attributes: attributes.merged(over: old), created: created ?? now, modified: now, version: version)
        let record = SecureRecord(info: info, secret: secret)
        try limits.check(record, in: store)
        return record
    }
    func check(_ expected: ItemVersion?, against current: ExistingItem, key: ItemKey) throws {
        guard let expected else { return }
        switch current {
        case .present(let info) where info.version == expected: return
        case .atVersion(let version) where version == expected: return
        case .absent: throw KeysmithError.itemNotFound(key)
        default: throw KeysmithError.writeConflict(key)
        }
    }

    for operation in operations {
        let key = operation.key
        try key.validate()
        let hash = key.hashValue
        var slotIndex: Int?
        if let known = byHash[hash] {
            slotIndex = finals[known].key == key ? known : others[key]
        }
        let current: ExistingItem
        if let slotIndex {
            switch finals[slotIndex] {
            case .put(let record): current = .present(record.info)
            case .remove: current = .absent
            }
        } else {
            // Only a merge needs the stored metadata.
            let needsMetadata: Bool = switch operation {
            case .update, .upsert: true
            case .create, .replace, .restore, .delete: false
            }
            current = try existing(key, needsMetadata)
        }
        var createdBefore: Date?
        if case .present(let info) = current { createdBefore = info.created }
        let record: SecureRecord?
        switch operation {
        case .create(let attributes, let secret):
            try attributes.validate()
            if case .absent = current {} else { throw KeysmithError.duplicateItem(key) }
            record = try put(attributes, over: current, secret: secret, created: nil)
        case .update(let attributes, let secret, let expected):
            try attributes.validate()
            if case .absent = current { throw KeysmithError.itemNotFound(key) }
            try check(expected, against: current, key: key)
            record = try put(attributes, over: current, secret: secret, created: createdBefore)
        case .upsert(let attributes, let secret):
            try attributes.validate()
            record = try put(attributes, over: current, secret: secret, created: createdBefore)
        case .replace(let given):
            try given.attributes.validate()
            if case .absent = current { throw KeysmithError.itemNotFound(key) }
            try check(given.info.version, against: current, key: key)
            var info = given.info
            info.attributes = given.attributes.merged(over: nil)
            info.modified = now
            info.version = version
            let replaced = SecureRecord(info: info, secret: given.secret)
            try limits.check(replaced, in: store)
            record = replaced
        case .restore(let given):
            try given.attributes.validate()
            var info = given.info
            info.attributes = given.attributes.merged(over: nil)
            info.version = version
            let restored = SecureRecord(info: info, secret: given.secret)
            try limits.check(restored, in: store)
            record = restored
        case .delete(_, let expected):
            if case .absent = current { throw KeysmithError.itemNotFound(key) }
            try check(expected, against: current, key: key)
            record = nil
        }
        let write: ResolvedWrite = record.map { .put($0) } ?? .remove(key)
        if let slotIndex {
            finals[slotIndex] = write
        } else {
            if case .absent = current { existedBefore.append(false) } else { existedBefore.append(true) }
            if byHash[hash] == nil { byHash[hash] = finals.count } else { others[key] = finals.count }
            finals.append(write)
        }
    }
    // A key created and deleted within the batch leaves nothing to write (compacted in place).
    var kept = 0
    for index in finals.indices {
        if case .remove = finals[index], !existedBefore[index] { continue }
        if kept != index { finals[kept] = finals[index] }
        kept += 1
    }
    finals.removeLast(finals.count - kept)
    return finals
}
