import FoundationEssentials
import Dispatch
import Keysmith
import KeysmithCredentials
import KeysmithCrypto
import KeysmithSystem
import Synchronization

// Reading: a record found (the log overlay over the snapshot index) and opened, searches and
// walks in record-id order.
extension Engine {
    func recordID(for key: ItemKey) -> RecordID {
        RecordID(idMAC.mac(RecordCodec.identity(key)))!
    }

    /// The id key set up once for HMAC (a bulk job names 100,000 records); rebuilt if the
    /// unlocked header's key object changes.
    var idMAC: HMACSHA256Key {
        if let cached = idMACCache, cached.key === unlocked.idKey { return cached.mac }
        // Setting up a key fails only when OpenSSL is out of memory.
        guard let made = try? HMACSHA256Key(unlocked.idKey) else { preconditionFailure("OpenSSL cannot set up an HMAC key") }
        idMACCache = (unlocked.idKey, made)
        return made
    }

    /// A GCM context per key epoch, keyed once (reads open records one after another); only
    /// under the engine's mutex. Rebuilt if the epoch's key object changes.
    private func cipher(for keys: EpochKeys) throws -> AESGCM.Context {
        if let cached = cipherCache[keys.epoch], cached.key === keys.record { return cached.context }
        let context = try keysmithCrypto { try AESGCM.Context(key: keys.record) }
        // Keys the header no longer holds (a rekey retired them) are not kept in memory.
        cipherCache = cipherCache.filter { unlocked.epochs[$0.key]?.record === $0.value.key }
        cipherCache[keys.epoch] = (keys.record, context)
        return context
    }

    enum Lookup {
        case found(SealedRef)
        case absent
    }

    func lookup(_ recordID: RecordID, key: ItemKey?) throws -> Lookup {
        if let rollback { throw KeysmithError(.corruptData, "\(rollback.reason)") }
        if let damage = recordDamage[recordID] { throw Self.damagedError(key, damage.damage) }
        var found: SealedRef?
        if let ref = overlay[recordID] {
            found = ref
        } else {
            let chainKey = snapshotChainKey
            found = try snapshot.lookup(recordID, key: key, chainKey: chainKey)
        }
        if let uncertain = uncertainBefore, (found?.version ?? 0) < uncertain.sequence {
            let what = key.map { "\($0)" } ?? "record \(recordID)"
            throw KeysmithError(
                .corruptData,
                (found == nil ? "\(what) was not found, but" : "\(what) may be out of date:")
                    + " the vault is damaged where a newer version may have been (\(uncertain.damage)); "
                    + "run `keysmith vault repair` (it keeps every record that authenticates and names what may be lost), or restore the vault from a backup")
        }
        guard let found, found.op == .put else { return .absent }
        return .found(found)
    }

    /// Opens a sealed record: reads its body, checks it, decodes it, and checks it is `key`'s.
    func open(_ ref: SealedRef, key: ItemKey?, withSecret: Bool) throws -> SecureRecord {
        guard let record = try open(ref, key: key, withSecret: withSecret, body: nil, admitKind: nil) else {
            throw KeysmithError(.corruptData, "record \(ref.recordID) could not be opened")
        }
        return record
    }

    /// Opens a sealed record whose body the caller may already have read; `nil` when
    /// `admitKind` turns its kind byte down (a search for other kinds skips decoding it).
    func open(_ ref: SealedRef, key: ItemKey?, withSecret: Bool, body: [UInt8]?, admitKind: ((UInt8) -> Bool)?) throws -> SecureRecord? {
        let path = paths.root + "/" + ref.file
        let body = try body ?? io { try System.read(ref.fd, count: ref.length, at: ref.offset, path: path) }
        guard let keys = try keys(for: ref.epoch) else {
            throw markDamaged(ref, key: key, Self.missingEpochReason(ref.epoch))
        }
        switch Self.openDetached(ref, body: body, key: key, withSecret: withSecret, admitKind: admitKind, cipher: try cipher(for: keys),
                                 vaultID: vaultID, idMAC: idMAC) {
        case .record(let record): return record
        case .otherKind: return nil
        case .damaged(let reason): throw markDamaged(ref, key: key, reason)
        }
    }

    static func missingEpochReason(_ epoch: UInt32) -> String {
        "the record is sealed under key epoch \(epoch), which the header does not hold"
    }

    /// What opening one record gave.
    enum Opened {
        case record(SecureRecord)
        /// Its kind byte was turned down (not decoded).
        case otherKind
        /// Why it cannot be read.
        case damaged(String)
    }

    /// Decrypts, decodes and checks one record whose body was read, touching nothing of the
    /// engine: records can be opened on several threads, each with its own `cipher`.
    static func openDetached(
        _ ref: SealedRef, body: [UInt8], key: ItemKey?, withSecret: Bool, admitKind: ((UInt8) -> Bool)?, cipher: AESGCM.Context,
        vaultID: [UInt8], idMAC: HMACSHA256Key
    ) -> Opened {
        guard body.count == ref.length else { return .damaged("the file ends inside the record (truncated)") }
        var plaintext: [UInt8]
        do {
            plaintext = try cipher.open(
                ciphertext: body, tag: ref.tag.array, nonce: ref.nonce.array,
                associatedData: SealedRef.associatedData(vaultID: vaultID, epoch: ref.epoch, version: ref.version, op: ref.op,
                                                         recordID: ref.recordID))
        } catch {
            return .damaged("the record fails authentication: it is damaged or was altered")
        }
        defer { cleanse(&plaintext) }
        if let admitKind, let kind = plaintext.first, !admitKind(kind) { return .otherKind }
        var record: SecureRecord
        do {
            record = try RecordCodec.decode(plaintext, withSecret: withSecret)
        } catch {
            return .damaged("the record authenticated but does not decode: \((error as? RecordCodec.DecodeError)?.reason ?? "\(error)")")
        }
        if let key, record.key != key {
            return .damaged("the record's identity does not match its record id: it was renamed")
        }
        if key == nil, RecordID(idMAC.mac(RecordCodec.identity(record.key))) != ref.recordID {
            return .damaged("the record's identity does not match its record id: it was renamed")
        }
        record.info.version = ItemVersion(rawValue: "c" + String(ref.version))
        return .record(record)
    }

    /// Opens a batch of records whose bodies were read, on two threads when there are enough
    /// of them (decrypting and decoding is most of a scan's work); results in order. Keys are
    /// looked up first, on this thread (a missing one may mean the header changed).
    private func openBatch(_ batch: [(ref: SealedRef, body: [UInt8])], withSecret: Bool,
                           admitKind: @escaping @Sendable (UInt8) -> Bool) throws -> [Opened] {
        var keysByEpoch: [UInt32: EpochKeys] = [:]
        for (ref, _) in batch where keysByEpoch[ref.epoch] == nil {
            if let keys = try keys(for: ref.epoch) { keysByEpoch[ref.epoch] = keys }
        }
        let idMAC = idMAC, vaultID = vaultID
        let parts = batch.count >= 256 && ProcessInfo.processInfo.activeProcessorCount > 1 ? 2 : 1
        // One GCM context per thread and epoch, made here: a failure to set one up is an error,
        // never taken for damage in the records.
        var contexts: [[UInt32: AESGCM.Context]] = []
        for _ in 0..<parts {
            var ciphers: [UInt32: AESGCM.Context] = [:]
            for (epoch, keys) in keysByEpoch { ciphers[epoch] = try keysmithCrypto { try AESGCM.Context(key: keys.record) } }
            contexts.append(ciphers)
        }
        let prepared = UncheckedContexts(contexts)
        @Sendable func run(_ part: Int, _ range: Range<Int>) -> [Opened] {
            range.map { index in
                let (ref, body) = batch[index]
                guard let cipher = prepared.contexts[part][ref.epoch] else { return .damaged(Self.missingEpochReason(ref.epoch)) }
                return Self.openDetached(ref, body: body, key: nil, withSecret: withSecret, admitKind: admitKind, cipher: cipher,
                                         vaultID: vaultID, idMAC: idMAC)
            }
        }
        guard parts == 2 else { return run(0, 0..<batch.count) }
        let half = batch.count / 2
        let results = Mutex<[Int: [Opened]]>([:])
        DispatchQueue.concurrentPerform(iterations: 2) { part in
            let opened = run(part, part == 0 ? 0..<half : half..<batch.count)
            results.withLock { $0[part] = opened }
        }
        return results.withLock { ($0[0] ?? []) + ($0[1] ?? []) }
    }

    /// GCM contexts handed to the threads of ``openBatch(_:withSecret:admitKind:)``: thread
    /// `i` uses only `contexts[i]`, so no context is shared (hence unchecked).
    private struct UncheckedContexts: @unchecked Sendable {
        let contexts: [[UInt32: AESGCM.Context]]
        init(_ contexts: [[UInt32: AESGCM.Context]]) { self.contexts = contexts }
    }

    private func markDamaged(_ ref: SealedRef, key: ItemKey?, _ reason: String) -> KeysmithError {
        let damage = VaultDamage(file: ref.file, offset: ref.offset, recordID: ref.recordID.description, key: key, reason: reason)
        recordDamage[ref.recordID] = (ref.version, damage)
        return Self.damagedError(key, damage)
    }

    static func damagedError(_ key: ItemKey?, _ damage: VaultDamage) -> KeysmithError {
        KeysmithError(
            .corruptData,
            "\(key.map { "\($0)" } ?? "a record") (record \(damage.recordID ?? "?")) is damaged in \(damage.file) at byte \(damage.offset): "
                + "\(damage.reason); other records are unaffected; write or delete this item to replace it, or run `keysmith vault repair`")
    }

    func read(_ key: ItemKey) throws -> SecureRecord? {
        switch try lookup(recordID(for: key), key: key) {
        case .absent: return nil
        case .found(let ref): return try open(ref, key: key, withSecret: true)
        }
    }

    /// Every live record's metadata, streamed page by page; damaged records are skipped (and
    /// recorded), so memory follows the matches, not the vault.
    func search(_ query: ItemQuery) throws -> [ItemInfo] {
        var results: [ItemInfo] = []
        var window = BodyWindow()
        let admit = Self.kindFilter(query)
        try forEachLive { ref in
            let body = try window.body(of: ref, sequentialIn: snapshot.descriptor, root: paths.root)  // an I/O error fails the search
            if let record = try? open(ref, key: nil, withSecret: false, body: body, admitKind: admit),
               query.matches(record.info.attributes)
            {
                results.append(record.info)
            }
            return true
        }
        return results
    }

    /// The kind byte comes first in a record: records of kinds the query cannot match are
    /// authenticated but not decoded.
    private static func kindFilter(_ query: ItemQuery) -> @Sendable (UInt8) -> Bool {
        { kind in
            let itemKind: ItemKind? = switch kind {
            case 1: .genericPassword
            case 2: .internetPassword
            case 3: .keysmithRecord
            default: nil
            }
            guard let itemKind else { return true }  // let decoding report it
            if let wanted = query.kind, wanted != itemKind { return false }
            return query.namespace.contains(itemKind == .keysmithRecord ? .keysmith : .user)
        }
    }

    /// One chunk of a scan: up to `limit` matching records, secrets included, in record-id
    /// order after `after`, and the record id to continue after (`nil`: the scan is done).
    /// Each record is decrypted once. Damaged records and pages are skipped (as
    /// ``search(_:)`` skips them).
    func records(matching query: ItemQuery, after: RecordID?, limit: Int) throws
        -> (records: [SecureRecord], next: RecordID?, examined: Int, total: Int)
    {
        let admit = Self.kindFilter(query)
        var found: [SecureRecord] = []
        var window = BodyWindow()
        var last: RecordID?
        var examined = 0
        let limit = max(1, limit)
        let total = (snapshot.head?.recordCount ?? 0) + overlay.count
        // Bodies are read in walk order and opened a batch at a time (on two threads); a batch
        // that fills the chunk part-way leaves the rest for the next call.
        var batch: [(ref: SealedRef, body: [UInt8])] = []
        var full = false
        func flush() throws {
            let opened = try openBatch(batch, withSecret: true, admitKind: admit)
            for ((ref, _), result) in zip(batch, opened) where !full {
                last = ref.recordID
                examined += 1
                switch result {
                case .record(let record):
                    if query.matches(record.info.attributes) { found.append(record) }
                    full = found.count >= limit
                case .otherKind:
                    break
                case .damaged(let reason):
                    _ = markDamaged(ref, key: nil, reason)  // skipped, as search skips it
                }
            }
            batch.removeAll(keepingCapacity: true)
        }
        try forEachLive(after: after) { ref in
            let body = try window.body(of: ref, sequentialIn: snapshot.descriptor, root: paths.root)  // an I/O error fails the scan
            batch.append((ref, body))
            if batch.count >= min(limit, 1024) { try flush() }
            return !full
        }
        if !full, !batch.isEmpty { try flush() }
        return (found, full ? last : nil, examined, total)
    }

    /// Calls `body` for every live (put) record the vault can vouch for, in record-id order
    /// (newer versions merged over the snapshot's: `newer`, sorted by record id, over the
    /// overlay's), starting after `after`; `body` returns `false` to stop. Returns whether the
    /// walk reached the end. With `strict` (compaction, rekey), a damaged index page is an
    /// error instead of being skipped: a snapshot is never rewritten without records it could
    /// not read.
    @discardableResult
    func forEachLive(after: RecordID? = nil, strict: Bool = false, newer: [SealedRef] = [],
                             _ body: (SealedRef) throws -> Bool) throws -> Bool {
        if let rollback { throw KeysmithError(.corruptData, "\(rollback.reason)") }
        let floor = uncertainBefore?.sequence ?? 0
        func isAfter(_ id: RecordID) -> Bool { after.map { $0 < id } ?? true }
        func visit(_ ref: SealedRef) throws -> Bool {
            guard ref.op == .put, ref.version >= floor, recordDamage[ref.recordID] == nil else { return true }
            return try body(ref)
        }
        var pending = PendingRefs(older: overlay.values.filter { isAfter($0.recordID) }.sorted { $0.recordID < $1.recordID },
                                  newer: newer, after: after)
        if let head = snapshot.head {
            let first = after.flatMap { snapshot.pageIndex(holding: $0) } ?? 0
            let chainKey = snapshotChainKey
            for index in first..<head.pageCount {
                guard let entries = try snapshot.page(index, chainKey: chainKey, cache: false) else {
                    if strict {
                        throw KeysmithError(
                            .corruptData,
                            "the snapshot's index is damaged (\(snapshot.damagedPages[index].map { "\($0)" } ?? "index page \(index)")); "
                                + "run `keysmith vault verify`, and repair it before compacting or re-keying")
                    }
                    continue
                }
                for entry in entries where isAfter(entry.recordID) {
                    while let id = pending.nextID, id < entry.recordID {
                        if try !visit(pending.pop()) { return false }
                    }
                    if pending.nextID == entry.recordID { continue }  // a newer version follows
                    if try !visit(try snapshot.ref(entry)) { return false }
                }
            }
        }
        while pending.nextID != nil {
            if try !visit(pending.pop()) { return false }
        }
        return true
    }
}

/// Two lists of refs sorted by record id merged into one, the newer list's ref winning when
/// both hold a record (the overlay under the records of a bulk commit).
struct PendingRefs {
    private let older: [SealedRef]
    private let newer: [SealedRef]
    private var olderIndex = 0
    private var newerIndex = 0

    init(older: [SealedRef], newer: [SealedRef], after: RecordID?) {
        self.older = older
        self.newer = newer
        if let after {
            var low = 0, high = newer.count
            while low < high {
                let middle = (low + high) / 2
                if after < newer[middle].recordID { high = middle } else { low = middle + 1 }
            }
            newerIndex = low
        }
        skipSuperseded()
    }

    /// The record id `pop()` returns next, `nil` at the end.
    var nextID: RecordID? {
        let olderID = olderIndex < older.count ? older[olderIndex].recordID : nil
        let newerID = newerIndex < newer.count ? newer[newerIndex].recordID : nil
        guard let olderID else { return newerID }
        guard let newerID else { return olderID }
        return min(olderID, newerID)
    }

    /// The next ref in record-id order (call only when `nextID` is not `nil`).
    mutating func pop() -> SealedRef {
        defer { skipSuperseded() }
        if newerIndex < newer.count, olderIndex >= older.count || newer[newerIndex].recordID < older[olderIndex].recordID {
            newerIndex += 1
            return newer[newerIndex - 1]
        }
        olderIndex += 1
        return older[olderIndex - 1]
    }

    private mutating func skipSuperseded() {
        while olderIndex < older.count, newerIndex < newer.count, older[olderIndex].recordID == newer[newerIndex].recordID {
            olderIndex += 1
        }
    }
}

/// Reads record bodies for a walk in record-id order: the snapshot's bodies are in that order,
/// so they are read a megabyte at a time; a log's bodies are read in windows too while the
/// walk reads them one after another (a bulk commit of records in id order), one at a time
/// otherwise.
struct BodyWindow {
    private var start = 0
    private var bytes: [UInt8] = []
    private var logFD: Descriptor?
    private var logStart = 0
    private var logBytes: [UInt8] = []
    private var logEnd = -1

    mutating func body(of ref: SealedRef, sequentialIn fd: Descriptor?, root: String) throws -> [UInt8] {
        let path = root + "/" + ref.file
        guard ref.fd == fd else {
            defer { logEnd = ref.offset + ref.length }
            if ref.fd == logFD, ref.offset >= logStart, ref.offset + ref.length <= logStart + logBytes.count {
                return Array(logBytes[(ref.offset - logStart)..<(ref.offset - logStart + ref.length)])
            }
            guard ref.fd == logFD, ref.offset == logEnd else {
                logFD = ref.fd
                logBytes = []
                return try io { try System.read(ref.fd, count: ref.length, at: ref.offset, path: path) }
            }
            logStart = ref.offset
            logBytes = try io { try System.read(ref.fd, count: max(ref.length, 1 << 18), at: ref.offset, path: path) }
            return Array(logBytes[0..<min(logBytes.count, ref.length)])
        }
        if ref.offset < start || ref.offset + ref.length > start + bytes.count {
            start = ref.offset
            bytes = try io { try System.read(ref.fd, count: max(ref.length, 1 << 20), at: ref.offset, path: path) }
        }
        let from = ref.offset - start
        return Array(bytes[from..<min(bytes.count, from + ref.length)])
    }
}
