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

/// Checks a batch of operations against a store's current state and works out its net effect.
///
/// Every store applies batches the same way through this one function, so that duplicate,
/// not-found and validation rules cannot drift apart between stores.
///
/// - Parameters:
///   - operations: The batch, in order.
///   - now: The time to stamp on created and modified dates.
///   - currentCreationDate: The creation date of the item a key holds now, or `nil` if none.
/// - Returns: One write per key touched, in the order keys first appear; a key created and
///   deleted within the batch appears not at all.
/// - Throws: The first operation's error that cannot be applied; nothing is applied then.
package func resolveBatch(
    _ operations: [StoreOperation], now: Date,
    currentCreationDate: (ItemKey) throws -> Date?
) throws -> [ResolvedWrite] {
    // For each key: does it exist at this point of the batch, and with which creation date.
    var state: [ItemKey: Date?] = [:]
    var existedBefore: [ItemKey: Bool] = [:]
    var finals: [ItemKey: ResolvedWrite] = [:]
    var order: [ItemKey] = []

    func created(_ key: ItemKey) throws -> Date? {
        if let known = state[key] { return known }
        let date = try currentCreationDate(key)
        state[key] = .some(date)
        existedBefore[key] = date != nil
        order.append(key)
        return date
    }

    for operation in operations {
        let key = operation.key
        try key.validate()
        switch operation {
        case .create(let attributes, let secret):
            try attributes.validate()
            if try created(key) != nil { throw KeysmithError.duplicateItem(key) }
            let info = ItemInfo(attributes: attributes, created: now, modified: now)
            finals[key] = .put(SecureRecord(info: info, secret: secret))
            state[key] = .some(now)
        case .update(let attributes, let secret):
            try attributes.validate()
            guard let since = try created(key) else { throw KeysmithError.itemNotFound(key) }
            let info = ItemInfo(attributes: attributes, created: since, modified: now)
            finals[key] = .put(SecureRecord(info: info, secret: secret))
        case .upsert(let attributes, let secret):
            try attributes.validate()
            let since = try created(key) ?? now
            let info = ItemInfo(attributes: attributes, created: since, modified: now)
            finals[key] = .put(SecureRecord(info: info, secret: secret))
            state[key] = .some(since)
        case .restore(let record):
            try record.attributes.validate()
            _ = try created(key)
            finals[key] = .put(record)
            state[key] = .some(record.info.created)
        case .delete:
            guard try created(key) != nil else { throw KeysmithError.itemNotFound(key) }
            finals[key] = .remove(key)
            state[key] = .some(nil)
        }
    }
    return order.compactMap { key in
        guard let write = finals[key] else { return nil }
        if case .remove = write, existedBefore[key] != true { return nil }
        return write
    }
}
