public import FoundationEssentials
public import Keysmith
import KeysmithCrypto
import KeysmithSystem

/// Who made a change to a token: the user, the host and the process, and what was run.
///
/// ```swift
/// let keeper = TokenKeeper(store: vault, actor: .current(command: "nightly-rotation.swift"))
/// ```
public struct AuditActor: Sendable, Hashable, Codable {
    /// The login name of the effective user (else `uid N`).
    public var user: String
    /// The host's name.
    public var host: String
    /// The process id.
    public var process: Int32
    /// The command line or API call, when the caller says (the `keysmith` command records its
    /// arguments: they never hold a secret).
    public var command: String?

    /// Describes an actor.
    public init(user: String, host: String, process: Int32, command: String? = nil) {
        self.user = user
        self.host = host
        self.process = process
        self.command = command
    }

    /// This process: its effective user, the host's name and the process id.
    public static func current(command: String? = nil) -> AuditActor {
        AuditActor(user: System.userName ?? "uid \(System.userID)", host: System.hostName ?? "unknown", process: System.processID,
                   command: command)
    }
}

/// Where this machine keeps the newest audit-log head it saw of each store (its sequence and
/// hash), outside the store: a log cut short, deleted, or rewritten under the same sequence
/// numbers is then reported by ``TokenKeeper/verifyAuditLog()`` even by someone who could
/// write the store consistently (docs/threat-model.md, "The audit log of token changes").
///
/// ```swift
/// let keeper = TokenKeeper(store: vault, auditAnchor: .standard)
/// ```
///
/// A store is known by its `SecureStore.storeDescription` (for a vault, its path): a vault
/// moved elsewhere starts without a mark.
public struct AuditAnchor: Sendable {
    let marks: MarkFiles
    static let header = "keysmith-audit-anchor-1"

    /// Marks kept in `directory` (created 0700 when missing).
    public init(directory: String) {
        marks = MarkFiles(directory: directory)
    }

    /// Marks in `$KEYSMITH_ANCHOR_DIR`, else `$XDG_STATE_HOME/keysmith/anchors`, else
    /// `~/.local/state/keysmith/anchors` (beside the vault's rollback anchors).
    public static var standard: AuditAnchor { AuditAnchor(directory: MarkFiles.defaultDirectory) }

    func name(for store: any SecureStore) -> String {
        "audit-" + String(SHA256.hash(Array(store.storeDescription.utf8)).hexString.prefix(32))
    }

    func read(for store: any SecureStore) -> (sequence: Int, hash: String)? {
        guard let (sequence, value) = marks.read(name(for: store), header: Self.header), sequence <= UInt64(Int.max) else { return nil }
        return (Int(sequence), value)
    }

    func advance(for store: any SecureStore, to head: AuditLog.Head) {
        guard head.sequence > 0 else { return }
        marks.advance(name(for: store), header: Self.header, sequence: UInt64(head.sequence), value: head.hash)
    }

    func reset(for store: any SecureStore) {
        try? marks.remove(name(for: store))
    }

    /// Forgets the head recorded for a store: for a store created new where another one was
    /// (`keysmith init` at a path that held a vault), whose log starts again from entry 1.
    public func forget(_ store: any SecureStore) {
        reset(for: store)
    }
}

/// One entry of the audit log: a change of token state, chained to the entry before it.
///
/// `hash` is SHA-256 over the entry's canonical form (docs/guide.md, "The audit log"), which
/// includes `previousHash`; editing, reordering or deleting an entry breaks the chain.
public struct AuditEntry: Sendable, Hashable, Codable {
    /// The entry's position, from 1.
    public var sequence: Int
    /// When the change happened.
    public var time: Date
    /// What happened: one of ``events``.
    public var event: String
    /// Every event an entry can record: a token `import`ed, `replace`d (`--replace`) or
    /// `update`d by a new response, an `import-batch`, a `revoke`, `revoke-all`, `refresh`
    /// or incremental `grant`, a `delete`, a `bulk-revoke`; an `audit-repair`, the
    /// `damaged` marker a repair puts in place of an entry that did not read, and a
    /// `store-repair` (`keysmith vault repair`).
    public static let events = ["import", "replace", "update", "import-batch", "revoke", "revoke-all", "refresh", "grant", "delete", "bulk-revoke",
                                "audit-repair", "damaged", "store-repair",
                                "provider-revoke", "provider-revoke-retry", "provider-revoke-failed", "provider-revoke-queued", "provider-revoke-dropped"]

    /// Whether the entry is about the token of `service` and `account` (either `nil`: any):
    /// its own service and account, or, for a bulk change (service or account `*`), one of
    /// the tokens it changed.
    public func concerns(service: String?, account: String?) -> Bool {
        if (service == nil || self.service == service) && (account == nil || self.account == account) { return true }
        // Each token is `ACCOUNT at SERVICE`, matched from its ends.
        return tokens.contains { token in
            switch (service, account) {
            case let (service?, account?): token == "\(account) at \(service)"
            case let (service?, nil): token.hasSuffix(" at " + service)
            case let (nil, account?): token.hasPrefix(account + " at ")
            case (nil, nil): true
            }
        }
    }
    /// The token's service.
    public var service: String
    /// The token's account.
    public var account: String
    /// The scopes the change touched.
    public var scopes: [String]
    /// Why, in words.
    public var detail: String
    /// For a bulk change, every token it changed (`ACCOUNT at SERVICE`); empty otherwise.
    public var tokens: [String]
    /// Who made the change (`nil` in entries written before Keysmith recorded it).
    public var actor: AuditActor?
    /// The previous entry's hash (64 zeros for the first).
    public var previousHash: String
    /// This entry's hash.
    public var hash: String

    /// The canonical bytes that `hash` covers: every field but `hash`, as sorted-key JSON.
    func canonicalBytes() throws -> [UInt8] {
        var copy = self
        copy.hash = ""
        return Array(try TokenCoding.encode(copy))
    }

    func computedHash() throws -> String {
        SHA256.hash(try canonicalBytes()).hexString
    }
}

/// The result of checking the audit log's hash chain.
public struct AuditVerification: Sendable, Hashable {
    /// How many entries the log holds.
    public var entries: Int
    /// What is wrong, entry by entry; empty when the chain is intact.
    public var problems: [String]
    /// Whether the chain is intact.
    public var isIntact: Bool { problems.isEmpty }

    /// A verification's answer: `entries` read, `problems` found (none: intact).
    public init(entries: Int, problems: [String]) {
        self.entries = entries
        self.problems = problems
    }
}

/// Where the audit log lives in a store: Keysmith records in the reserved namespace, one
/// `KeysmithRecordType.auditEntry` per entry (service `audit`, accounts `000000000001`,
/// `000000000002`, …), and one `KeysmithRecordType.auditHead` (service `audit`, account `head`)
/// that names the last entry and its hash. Appends are conditional: an entry is created only if
/// its sequence is free, the head replaced only if unchanged.
enum AuditLog {
    static let service = "audit"
    static let headAccount = "head"
    static let genesis = String(repeating: "0", count: 64)

    /// A change to record: the event, where, which scopes, why, and for bulk changes the tokens.
    struct Event {
        var event: String
        var service: String
        var account: String
        var scopes: [String]
        var detail: String
        var tokens: [String] = []

        init(_ event: String, _ service: String, _ account: String, _ scopes: [String], _ detail: String, tokens: [String] = []) {
            self.event = event
            self.service = service
            self.account = account
            self.scopes = scopes
            self.detail = detail
            self.tokens = tokens
        }
    }

    struct Head: Codable {
        var sequence: Int
        var hash: String
    }

    static func entryKey(_ sequence: Int) -> ItemKey {
        let digits = String(sequence)
        return .keysmithRecord(KeysmithRecordKey(
            recordType: .auditEntry, service: service, account: String(repeating: "0", count: max(0, 12 - digits.count)) + digits))
    }

    static let headKey = ItemKey.keysmithRecord(KeysmithRecordKey(recordType: .auditHead, service: service, account: headAccount))

    /// The head as read, with the version of its record (`nil` when the log is empty).
    struct ReadHead {
        var head: Head
        var version: ItemVersion?
    }

    static func head(in store: any SecureStore) throws -> ReadHead {
        try head(from: try store.read(headKey))
    }

    /// The head in its record as read (`nil`: the log is empty).
    static func head(from record: SecureRecord?) throws -> ReadHead {
        guard let record else { return ReadHead(head: Head(sequence: 0, hash: genesis), version: nil) }
        return ReadHead(head: try TokenCoding.decode(Head.self, from: record.secret, what: "the audit log's head"),
                        version: record.info.version)
    }

    /// Operations that append `events` after the current head: entry creates (which fail with
    /// a duplicate if another writer appended first) and the head's update.
    static func appendOperations(_ events: [Event], after read: ReadHead, at time: Date, actor: AuditActor?) throws
        -> (operations: [StoreOperation], head: Head)
    {
        var operations: [StoreOperation] = []
        var previous = read.head
        for event in events {
            var entry = AuditEntry(
                sequence: previous.sequence + 1, time: time, event: event.event, service: event.service,
                account: event.account, scopes: event.scopes.sorted(), detail: event.detail, tokens: event.tokens,
                actor: actor, previousHash: previous.hash, hash: "")
            entry.hash = try entry.computedHash()
            operations.append(.create(ItemAttributes(key: entryKey(entry.sequence)), secret: try TokenCoding.encode(entry)))
            previous = Head(sequence: entry.sequence, hash: entry.hash)
        }
        let headSecret = try TokenCoding.encode(previous)
        if let version = read.version {
            operations.append(.update(ItemAttributes(key: headKey), secret: headSecret, ifVersion: version))
        } else {
            operations.append(.create(ItemAttributes(key: headKey), secret: headSecret))
        }
        return (operations, previous)
    }

    static func verify(in store: any SecureStore, anchor: AuditAnchor? = nil) throws -> AuditVerification {
        // The mark first, then the head: a writer moves the mark only after its commit is
        // durable, so a head read afterwards is never behind it unless the log went back.
        let seenBefore = anchor?.read(for: store)
        let head = try head(in: store).head
        var problems: [String] = []
        var previousHash = genesis
        for sequence in stride(from: 1, through: head.sequence, by: 1) {
            let read: SecureRecord?
            do {
                read = try store.read(entryKey(sequence))
            } catch let error as KeysmithError where error.code == .corruptData {
                problems.append("entry \(sequence) does not read (damaged; `keysmith audit repair` puts a marker in its place)")
                previousHash = ""
                continue
            }
            guard let record = read else {
                problems.append("entry \(sequence) is missing (deleted)")
                previousHash = ""
                continue
            }
            guard let entry = try? TokenCoding.decode(AuditEntry.self, from: record.secret, what: "audit entry \(sequence)") else {
                problems.append("entry \(sequence) does not decode (edited)")
                previousHash = ""
                continue
            }
            if entry.event == damagedEvent, entry.service == "*", entry.account == "*" {
                // A repair's marker: the entry it replaced is lost, and stays reported.
                problems.append("entry \(sequence) was lost to damage: an audit repair put a marker in its place on \(entry.time)")
                previousHash = ""
                continue
            }
            if entry.sequence != sequence {
                problems.append("entry \(sequence) says it is entry \(entry.sequence) (reordered)")
            }
            if try entry.computedHash() != entry.hash {
                problems.append("entry \(sequence) does not match its hash (edited)")
            }
            if !previousHash.isEmpty, entry.previousHash != previousHash {
                problems.append("entry \(sequence) does not follow entry \(sequence - 1) (reordered, or one was edited or replaced)")
            }
            previousHash = entry.hash
        }
        if head.sequence > 0, !previousHash.isEmpty, previousHash != head.hash {
            problems.append("the log's head does not name the last entry's hash")
        }
        // What this machine saw last: the log must reach it, with the same entry there.
        if let seen = seenBefore {
            if head.sequence < seen.sequence {
                problems.append("the log ends at entry \(head.sequence) but this machine saw entry \(seen.sequence): entries were removed, "
                                + "or the log was deleted or put back (`keysmith audit verify --accept-rollback` after a deliberate restore)")
            } else if let record = try store.read(entryKey(seen.sequence)),
                      let entry = try? TokenCoding.decode(AuditEntry.self, from: record.secret, what: "audit entry \(seen.sequence)"),
                      entry.hash != seen.hash
            {
                problems.append("entry \(seen.sequence) is not the one this machine saw: the log was rewritten")
            }
        }
        // Entries beyond the head. A store with damage elsewhere cannot be listed: then the log
        // cannot be vouched for whole, and says so.
        var stored = 0
        do {
            stored = try store.search(ItemQuery(service: service, recordType: .auditEntry)).count
        } catch let error as KeysmithError where error.code == .corruptData {
            problems.append("entries beyond the head cannot be counted: the store has damage (\(error.message))")
        }
        if stored > head.sequence {
            problems.append("\(stored - head.sequence) entr\(stored - head.sequence == 1 ? "y lies" : "ies lie") beyond the log's head (inserted, or the head was rolled back)")
        }
        if problems.isEmpty { anchor?.advance(for: store, to: head) }
        return AuditVerification(entries: head.sequence, problems: problems)
    }

    static func entries(in store: any SecureStore) throws -> [AuditEntry] {
        let head = try head(in: store).head
        return try stride(from: 1, through: head.sequence, by: 1).compactMap { sequence in
            try store.read(entryKey(sequence)).map {
                try TokenCoding.decode(AuditEntry.self, from: $0.secret, what: "audit entry \(sequence)")
            }
        }
    }
}

/// What ``TokenKeeper/repairAuditLog()`` did.
public struct AuditRepair: Sendable, Hashable {
    /// Whether the head (the record naming the last entry) was rebuilt: it did not read, or
    /// did not name the last entry.
    public var headRebuilt: Bool
    /// The entries that did not read (damaged) and were replaced by a marker saying so.
    public var entriesReplaced: [Int]
    /// The entries that did not read and could not be replaced (a PostgreSQL audit log is
    /// append-only): they stay damaged.
    public var entriesLeft: [Int]
    /// Whether anything was changed.
    public var changed: Bool { headRebuilt || !entriesReplaced.isEmpty }
}

extension AuditLog {
    /// The event of a marker that replaced a damaged entry.
    static let damagedEvent = "damaged"

    /// What a repair would write: a marker for each entry that does not read, and the head
    /// to write (`nil` when the one there is right), conditional on the version read when it
    /// read.
    struct RepairPlan {
        var markers: [(sequence: Int, operation: StoreOperation)]
        var head: StoreOperation?
        var headDamaged: Bool
    }

    /// Plans a repair. Refuses (`KeysmithError.Code.corruptData`) a store that cannot say
    /// which records are absent (a vault with a lost commit or log directory, or rolled back):
    /// there a read of an intact entry, or of one past the end, is refused too, and a repair
    /// would put markers over readable history, or never find the end.
    /// `markDamaged: false` plans no markers (an append-only log refuses them): the head is then
    /// planned from the entries as they are.
    static func planRepair(in store: any SecureStore, at time: Date, actor: AuditActor?, markDamaged: Bool = true) throws -> RepairPlan {
        // A key that is never written: reading it must answer "absent".
        let probe = ItemKey.keysmithRecord(KeysmithRecordKey(recordType: .auditEntry, service: service, account: "repair-probe"))
        do {
            _ = try store.read(probe)
        } catch let error as KeysmithError where error.code == .corruptData {
            throw KeysmithError(.corruptData, "the store cannot tell which records exist (\(error.message)); an audit repair would guess, "
                                + "so none was made: restore from a backup, or accept the rollback if that is what it is")
        }
        var read: ReadHead?
        var headDamaged = false
        do {
            read = try head(in: store)
        } catch let error as KeysmithError where error.code == .corruptData {
            headDamaged = true
        }
        let named = read?.head.sequence ?? 0
        var markers: [(sequence: Int, operation: StoreOperation)] = []
        var previousHash = genesis
        var sequence = 1
        // The entries the head names, and any after them, until one is absent.
        while true {
            var entry: AuditEntry?
            var damaged = false
            do {
                guard let record = try store.read(entryKey(sequence)) else {
                    if sequence > named { break }
                    previousHash = ""  // deleted: the chain stays broken there; a repair does not hide it
                    sequence += 1
                    continue
                }
                entry = try? TokenCoding.decode(AuditEntry.self, from: record.secret, what: "audit entry \(sequence)")
                damaged = entry == nil
            } catch let error as KeysmithError where error.code == .corruptData {
                damaged = true
            }
            if damaged && !markDamaged {
                previousHash = ""  // its hash is lost with it
            } else if damaged {
                var marker = AuditEntry(
                    sequence: sequence, time: time, event: damagedEvent, service: "*", account: "*", scopes: [],
                    detail: "entry \(sequence) did not read (damaged); an audit repair put this marker in its place", tokens: [],
                    actor: actor, previousHash: previousHash.isEmpty ? genesis : previousHash, hash: "")
                marker.hash = try marker.computedHash()
                markers.append((sequence, .upsert(ItemAttributes(key: entryKey(sequence)), secret: try TokenCoding.encode(marker))))
                previousHash = marker.hash
            } else if let entry {
                previousHash = entry.hash
            }
            sequence += 1
        }
        let last = Head(sequence: sequence - 1, hash: previousHash.isEmpty ? genesis : previousHash)
        let current = read?.head
        guard headDamaged || current?.sequence != last.sequence || current?.hash != last.hash else {
            return RepairPlan(markers: markers, head: nil, headDamaged: false)
        }
        let secret = try TokenCoding.encode(last)
        let head: StoreOperation = if let version = read?.version {
            .update(ItemAttributes(key: headKey), secret: secret, ifVersion: version)
        } else {
            .upsert(ItemAttributes(key: headKey), secret: secret)
        }
        return RepairPlan(markers: markers, head: head, headDamaged: headDamaged)
    }
}
