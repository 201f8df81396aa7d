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
    // One slot per key touched, in the order keys first appear: one hash lookup per operation.
    struct Slot {
        var key: ItemKey
        var existedBefore: Bool
        /// The creation date the key holds at this point of the batch; nil when it is empty.
        var created: Date?
        var final: ResolvedWrite?
    }
    var slots: [Slot] = []
    var index: [ItemKey: Int] = [:]
    slots.reserveCapacity(operations.count)
    index.reserveCapacity(operations.count)

    for operation in operations {
        let key = operation.key
        try key.validate()
        let slotIndex: Int
        if let known = index[key] {
            slotIndex = known
        } else {
            let date = try currentCreationDate(key)
            slotIndex = slots.count
            slots.append(Slot(key: key, existedBefore: date != nil, created: date, final: nil))
            index[key] = slotIndex
        }
        switch operation {
        case .create(let attributes, let secret):
            try attributes.validate()
            if slots[slotIndex].created != nil { throw KeysmithError.duplicateItem(key) }
            let info = ItemInfo(attributes: attributes, created: now, modified: now)
            slots[slotIndex].final = .put(SecureRecord(info: info, secret: secret))
            slots[slotIndex].created = now
        case .update(let attributes, let secret):
            try attributes.validate()
            guard let since = slots[slotIndex].created else { throw KeysmithError.itemNotFound(key) }
            let info = ItemInfo(attributes: attributes, created: since, modified: now)
            slots[slotIndex].final = .put(SecureRecord(info: info, secret: secret))
        case .upsert(let attributes, let secret):
            try attributes.validate()
            let since = slots[slotIndex].created ?? now
            let info = ItemInfo(attributes: attributes, created: since, modified: now)
            slots[slotIndex].final = .put(SecureRecord(info: info, secret: secret))
            slots[slotIndex].created = since
        case .restore(let record):
            try record.attributes.validate()
            slots[slotIndex].final = .put(record)
            slots[slotIndex].created = record.info.created
        case .delete:
            guard slots[slotIndex].created != nil else { throw KeysmithError.itemNotFound(key) }
            slots[slotIndex].final = .remove(key)
            slots[slotIndex].created = nil
        }
    }
    return slots.compactMap { slot in
        guard let write = slot.final else { return nil }
        if case .remove = write, !slot.existedBefore { return nil }
        return write
    }
}
