/// An entity: a principal, a resource, a group, a role or an action, with attributes and parents.
///
/// Membership is through parents, transitively: a user whose parent is a team whose parent is an
/// org is `in` the org.
///
/// ```swift
/// let alice = Entity(uid: EntityUID(type: "User", id: "alice"), parents: [EntityUID(type: "Team", id: "infra")])
/// let photo = Entity(uid: EntityUID(type: "Photo", id: "42"),
///                    attributes: ["owner": .entity(alice.uid), "tags": .set(.init([.string("beach")]))],
///                    parents: [EntityUID(type: "Album", id: "7")])
/// ```
public struct Entity: Sendable, Hashable {
    /// The entity's type and id.
    public var uid: EntityUID
    /// Attributes that conditions read.
    public var attributes: [String: PolicyValue]
    /// The entities it is directly `in`.
    public var parents: [EntityUID]

    /// An entity.
    public init(uid: EntityUID, attributes: [String: PolicyValue] = [:], parents: [EntityUID] = []) {
        self.uid = uid
        self.attributes = attributes
        self.parents = parents
    }
}

/// The entities a decision may read, with every entity's ancestors computed once.
///
/// Read from Cedar's JSON entity format (a JSON array of `{"uid": {"type", "id"}, "attrs", "parents"}`,
/// entity references as `{"__entity": {"type", "id"}}`, extension values as
/// `{"__extn": {"fn": "ip", "arg": "10.0.0.1"}}`) or built in Swift.
public struct EntityStore: Sendable {
    /// Everything in one object, so copying a store (into each decision) is one reference.
    private final class Storage: Sendable {
        let entities: [EntityUID: Entity]
        /// Every entity with its ancestors, found with one lookup per request variable.
        let records: [EntityUID: EntityRecord]
        /// The same records in one list, which ``EntityRecord/linked`` indexes.
        let recordList: [EntityRecord]
        /// The records by uid again, with a cheaper hash than `records` (`nil` when its probes
        /// would be long: then `records` answers).
        let places: PlaceIndex?
        let locations: [EntityUID: SourceLocation]

        init(entities: [EntityUID: Entity], records: [EntityUID: EntityRecord], recordList: [EntityRecord],
             locations: [EntityUID: SourceLocation]) {
            self.entities = entities
            self.records = records
            self.recordList = recordList
            self.places = PlaceIndex(recordList)
            self.locations = locations
        }
    }

    private var storage: Storage

    /// Every entity by uid.
    public var entities: [EntityUID: Entity] { storage.entities }

    /// Where the entity was read from (its JSON object), for error messages.
    public func location(of uid: EntityUID) -> SourceLocation {
        storage.locations[uid] ?? SourceLocation(file: "<entities>", line: 1, column: 1)
    }

    /// No entities (what constant parts of conditions are evaluated with).
    static let empty = EntityStore(storage: Storage(entities: [:], records: [:], recordList: [], locations: [:]))

    private init(storage: Storage) { self.storage = storage }

    /// A store of these entities; a uid given twice is an error.
    public init(_ entities: [Entity] = []) throws(PolicyDiagnostics) {
        try self.init(entities, locations: [:])
    }

    /// A store whose entities may have at most `ancestorLinks` ancestors in all (tests use a
    /// smaller bound than ``maximumAncestorLinks``).
    init(_ entities: [Entity], ancestorLinks: Int) throws(PolicyDiagnostics) {
        try self.init(entities, locations: [:], ancestorLinks: ancestorLinks)
    }

    private init(_ entities: [Entity], locations: [EntityUID: SourceLocation],
                 ancestorLinks: Int = EntityStore.maximumAncestorLinks) throws(PolicyDiagnostics) {
        var byUID: [EntityUID: Entity] = [:]
        var problems: [PolicyDiagnostic] = []
        for entity in entities {
            if byUID.updateValue(entity, forKey: entity.uid) != nil {
                problems.append(PolicyDiagnostic(location: SourceLocation(file: "<entities>", line: 1, column: 1),
                                                 message: "the entity \(entity.uid) is given twice"))
            }
        }
        if !problems.isEmpty { throw PolicyDiagnostics(kind: .input, problems: problems) }
        storage = try Self.build(byUID, locations: locations, ancestorLinks: ancestorLinks)
    }

    /// Adds entities (action entities from a schema, say); a uid already present is an error.
    public mutating func add(_ more: [Entity]) throws(PolicyDiagnostics) {
        var problems: [PolicyDiagnostic] = []
        var entities = storage.entities
        for entity in more {
            if entities.updateValue(entity, forKey: entity.uid) != nil {
                problems.append(PolicyDiagnostic(location: SourceLocation(file: "<entities>", line: 1, column: 1),
                                                 message: "the entity \(entity.uid) is given twice"))
            }
        }
        if !problems.isEmpty { throw PolicyDiagnostics(kind: .input, problems: problems) }
        storage = try Self.build(entities, locations: storage.locations)
    }

    /// Every entity's record and ancestors; an entity that is its own ancestor (a cycle of
    /// parents) is an error, as in Cedar: membership must be a hierarchy.
    private static func build(_ entities: [EntityUID: Entity], locations: [EntityUID: SourceLocation],
                              ancestorLinks: Int = maximumAncestorLinks) throws(PolicyDiagnostics) -> Storage {
        var result: [EntityUID: EntityRecord] = [:]
        var links = 0
        for (uid, entity) in entities {
            var seen: Set<EntityUID> = []
            var order: [EntityUID] = []
            var pending = entity.parents
            while let next = pending.popLast() {
                // Every step counts, an ancestor met again too: a hub with many parents under
                // many entities costs its parents for each of them.
                links += 1
                guard links <= ancestorLinks else {
                    throw PolicyDiagnostics(kind: .input, problems: [PolicyDiagnostic(
                        location: SourceLocation(file: locations[uid]?.file ?? "<entities>", line: 1, column: 1),
                        message: "the entities' hierarchy takes more than \(ancestorLinks) steps to walk (an entity counts once for every entity it is in, "
                            + "directly or through its parents, and once more for each other way it is reached): a chain of parents this long, "
                            + "or a cycle this large, is refused")])
                }
                guard seen.insert(next).inserted else { continue }
                order.append(next)
                pending.append(contentsOf: entities[next]?.parents ?? [])
            }
            result[uid] = EntityRecord(entity: entity, ancestors: order, ancestorSet: seen)
        }
        let list = Array(result.values)
        let places = Dictionary(uniqueKeysWithValues: list.enumerated().map { ($1.entity.uid, $0) })
        for (place, record) in list.enumerated() {
            record.place = place
            record.linked = record.values.map { if case .entity(let uid) = $0 { places[uid] ?? -1 } else { -1 } }
            record.placeSets = record.values.map { value in
                guard case .set(let set) = value else { return nil }
                var members: [Int] = []
                for element in set.elements {
                    guard case .entity(let uid) = element, let member = places[uid] else { return nil }
                    members.append(member)
                }
                return members.sorted()
            }
            record.ancestorPlaces = record.ancestors.compactMap { places[$0] }.sorted()
        }
        let storage = Storage(entities: entities, records: result, recordList: list, locations: locations)
        let cyclic = result.filter { $0.value.isIn($0.key) }.keys.sorted()
        if !cyclic.isEmpty {
            let store = EntityStore(storage: storage)
            var problems = cyclic.prefix(10).map {
                PolicyDiagnostic(location: store.location(of: $0), message: "\($0) is its own ancestor: the parents form a cycle")
            }
            if cyclic.count > 10 {
                problems.append(PolicyDiagnostic(location: store.location(of: cyclic[10]),
                                                 message: "and \(cyclic.count - 10) more entities are their own ancestors (the first ten are listed)"))
            }
            throw PolicyDiagnostics(kind: .input, problems: problems)
        }
        return storage
    }

    /// How many steps walking every entity's ancestors may take in all (an entity counts once
    /// for each entity it is in, and again for each other way it is reached). Each ancestor is
    /// kept with its entity, so a chain of n parents keeps n²/2 of them: 4,000 entities in one
    /// chain took 1 GB; ten million is about 1.3 GB and 13 s in a debug build.
    public static let maximumAncestorLinks = 10_000_000

    /// The entity, if the store holds it.
    public subscript(uid: EntityUID) -> Entity? { storage.entities[uid] }

    /// Every entity `uid` is in, directly or through its parents (not itself).
    public func ancestors(of uid: EntityUID) -> Set<EntityUID> { Set(storage.records[uid]?.ancestors ?? []) }

    /// Whether `uid` is `container` or is in it.
    public func isDescendant(_ uid: EntityUID, of container: EntityUID) -> Bool {
        uid == container || storage.records[uid]?.isIn(container) == true
    }

    /// The entity and its ancestors, when the store holds it.
    func record(_ uid: EntityUID) -> EntityRecord? {
        guard let places = storage.places else { return storage.records[uid] }
        return places.record(of: uid)
    }

    /// The record at `place` in the list (from ``EntityRecord/linked``), or `nil` for -1.
    @inline(__always)
    func record(at place: Int) -> EntityRecord? { place < 0 ? nil : storage.recordList[place] }

    /// Reads Cedar's JSON entity format; every malformed entity is reported, with its line.
    public init(json bytes: [UInt8], file: String = "<entities>") throws(PolicyDiagnostics) {
        let document = try JSONValues.document(bytes, file: file, kind: .input)
        var problems: [PolicyDiagnostic] = []
        var list: [Entity] = []
        var seen: [EntityUID: Int] = [:]
        var locations: [EntityUID: SourceLocation] = [:]
        guard case .array(let items) = document.value else {
            throw PolicyDiagnostics(kind: .input, problems: [PolicyDiagnostic(
                location: SourceLocation(file: file, line: document.line, column: document.column),
                message: "the entities must be a JSON array of {\"uid\", \"attrs\", \"parents\"}")])
        }
        for item in items {
            do {
                let entity = try JSONValues.entity(item, file: file)
                if let line = seen[entity.uid] {
                    problems.append(PolicyDiagnostic(location: SourceLocation(file: file, line: item.line, column: item.column),
                                                     message: "the entity \(entity.uid) is given twice (first at line \(line))"))
                } else {
                    seen[entity.uid] = item.line
                    locations[entity.uid] = SourceLocation(file: file, line: item.line, column: item.column)
                    list.append(entity)
                }
            } catch {
                problems.append(error)
            }
        }
        if !problems.isEmpty { throw PolicyDiagnostics(kind: .input, problems: problems) }
        try self.init(list, locations: locations)
    }
}

/// A store's records by uid: an open-addressing table hashed with FNV-1a over the id's bytes
/// from a random seed, which for the short ids of a decision costs a fraction of the standard
/// library's SipHash. Each slot keeps 32 more bits of the hash beside the record, so a probe
/// that passes another uid is told apart without reading that uid (nor its record). The table
/// is built from a store's entities (not from requests), at most half full; a table whose
/// longest probe would exceed ``maximumProbe`` is not built (the caller keeps its dictionary),
/// so a lookup, whatever its key, reads at most that many slots.
struct PlaceIndex: Sendable {
    /// A slot: the hash check (high 32 bits of the uid's hash) and the record, side by side, so
    /// a lookup reads the slot and then the record (two dependent memory reads, not three).
    private struct Slot: Sendable {
        var check: UInt32 = 0
        var record: EntityRecord?
    }
    private let slots: [Slot]
    private let mask: Int
    private let seed: UInt64
    static let maximumProbe = 32

    /// The index of `records` (distinct uids), or `nil` when some probe would be too long.
    init?(_ records: [EntityRecord]) {
        var capacity = 8
        while capacity < records.count * 2 { capacity *= 2 }
        var slots = [Slot](repeating: Slot(), count: capacity)
        let seed = UInt64.random(in: .min ... .max)
        for record in records {
            let hash = Self.hash(record.entity.uid.id, seed)
            var slot = Int(truncatingIfNeeded: hash) & (capacity - 1), probes = 1
            while slots[slot].record != nil {
                slot = (slot + 1) & (capacity - 1)
                probes += 1
                if probes > Self.maximumProbe { return nil }
            }
            slots[slot] = Slot(check: UInt32(truncatingIfNeeded: hash >> 32), record: record)
        }
        self.slots = slots
        self.mask = capacity - 1
        self.seed = seed
    }

    /// The record of `uid`, if the list holds it.
    func record(of uid: EntityUID) -> EntityRecord? {
        let hash = Self.hash(uid.id, seed), check = UInt32(truncatingIfNeeded: hash >> 32)
        var slot = Int(truncatingIfNeeded: hash) & mask
        for _ in 0..<Self.maximumProbe {
            if slots[slot].record == nil { return nil }
            if slots[slot].check == check, let record = slots[slot].record, record.entity.uid == uid { return record }
            slot = (slot + 1) & mask
        }
        return nil
    }

    @inline(__always)
    private static func hash(_ id: String, _ seed: UInt64) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325 ^ seed
        for byte in id.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        hash ^= hash >> 29  // mix the high bits into the low ones the mask keeps
        hash = hash &* 0xbf58_476d_1ce4_e5b9
        return hash ^ (hash >> 32)
    }
}

/// An entity and every entity it is in, made once per store, so a decision looks each request
/// variable up once and tests membership without hashing.
final class EntityRecord: @unchecked Sendable {  // `linked` is written only while its store is built
    let entity: Entity
    /// Every ancestor, once (not the entity itself).
    let ancestors: [EntityUID]
    /// The same, hashed, for entities with many ancestors.
    let ancestorSet: Set<EntityUID>?
    /// The attributes' names and values in one order, found by comparing names (no hashing);
    /// empty for an entity with more than ``PolicyValueSet/linearLimit`` attributes, which
    /// are looked up in `entity.attributes`.
    let names: [String]
    let values: [PolicyValue]
    /// Each name's hash value, compared before the name.
    let nameHashes: [Int]
    /// Whether every name is ASCII (then a name of the same length that Swift calls equal has
    /// the same bytes: a look-alike of an ASCII name, such as a Kelvin sign for K, is longer).
    let namesAreASCII: Bool
    /// For each value that refers to an entity of the same store, that entity's place in the
    /// store's list of records, or -1 (so `resource.list.owner` follows a reference without
    /// hashing; places, not references, so records never keep each other alive). Set once by
    /// the store that made the record, before the store is used, and never changed after.
    fileprivate(set) var linked: [Int] = []
    /// This record's place in its store's list (set with `linked`).
    fileprivate(set) var place = -1
    /// For each value that is a set of entities all held by the store, their places, sorted;
    /// `nil` for other values (set with `linked`).
    fileprivate(set) var placeSets: [[Int]?] = []
    /// The places of the ancestors the store holds, sorted (set with `linked`). An ancestor the
    /// store lacks (a parent named but not given) has no place: it is in `ancestors` only.
    fileprivate(set) var ancestorPlaces: [Int] = []

    init(entity: Entity, ancestors: [EntityUID], ancestorSet: Set<EntityUID>) {
        self.entity = entity
        self.ancestors = ancestors
        self.ancestorSet = ancestors.count > PolicyValueSet.linearLimit ? ancestorSet : nil
        if entity.attributes.count <= PolicyValueSet.linearLimit {
            names = Array(entity.attributes.keys)
            values = names.map { entity.attributes[$0]! }
        } else {
            names = []
            values = []
        }
        nameHashes = names.map(\.hashValue)
        namesAreASCII = names.allSatisfy { $0.utf8.allSatisfy { $0 < 0x80 } }
    }

    /// Whether the attribute name at `index` is `name`, byte for byte (as Cedar compares names).
    @inline(__always)
    private func nameIs(_ index: Int, _ name: String) -> Bool {
        let stored = names[index]
        return namesAreASCII ? stored.utf8.count == name.utf8.count && stored == name : PolicyValue.sameBytes(stored, name)
    }

    /// The attribute `name` (whose hash value the caller, a compiled node, worked out once),
    /// and the place of the entity it refers to in the store's list of records (-1 when it is
    /// not an entity the store holds).
    @inline(__always)
    func attribute(_ name: String, hash: Int) -> (value: PolicyValue, linked: Int)? {
        if names.isEmpty {
            return entity.attributes.exactly(name).map { ($0, -1) }
        }
        for index in nameHashes.indices where nameHashes[index] == hash && nameIs(index, name) {
            return (values[index], linked[index])
        }
        return nil
    }

    /// Whether the entity at `place` in this record's store is this one or one of its
    /// ancestors (what `in` asks, by places: no uid compared).
    @inline(__always)
    func isIn(place container: Int) -> Bool {
        container == place || Self.holds(ancestorPlaces, container)
    }

    /// For the attribute `name`, when its value is a set of entities all held by this record's
    /// store: whether it holds `member` (`contains`), or, with `container`, the entity
    /// `member` is or one `member` is in (`member in set`); with `container`, also when the
    /// value is one entity of the store: whether `member` is it or in it (`member in entity`).
    /// `nil` when the attribute is none of these, or not found by name here: then the caller
    /// computes the value.
    @inline(__always)
    func setHolds(_ name: String, hash: Int, _ member: EntityRecord, container: Bool) -> Bool? {
        for index in nameHashes.indices where nameHashes[index] == hash && nameIs(index, name) {
            guard let places = placeSets[index] else {
                return container && linked[index] >= 0 ? member.isIn(place: linked[index]) : nil
            }
            return container ? places.contains(where: member.isIn(place:)) : Self.holds(places, member.place)
        }
        return nil
    }

    /// Whether the sorted `places` hold `place`: in order when few, by halves when many.
    private static func holds(_ places: [Int], _ place: Int) -> Bool {
        if places.count <= PolicyValueSet.linearLimit { return places.contains(place) }
        var low = 0, high = places.count
        while low < high {
            let middle = (low + high) / 2
            if places[middle] < place { low = middle + 1 } else { high = middle }
        }
        return low < places.count && places[low] == place
    }

    /// Whether `container` is one of the ancestors.
    func isIn(_ container: EntityUID) -> Bool {
        if let ancestorSet { return ancestorSet.contains(container) }
        return ancestors.contains(container)
    }
}

extension Dictionary where Key == String {
    /// The value of the key with exactly `name`'s bytes. A Swift dictionary finds keys by
    /// canonical equivalence (a precomposed `café` finds `cafe` with a combining accent, a
    /// Kelvin sign finds K); the language compares attribute and field names by bytes, as Cedar
    /// does, so a key found that way is only the same key when its bytes are.
    func exactly(_ name: String) -> Value? {
        guard let index = index(forKey: name) else { return nil }
        let entry = self[index]
        return PolicyValue.sameBytes(entry.key, name) ? entry.value : nil
    }
}

/// Conversions between Cedar's JSON forms and ``PolicyValue``.
enum JSONValues {
    /// A JSON document, or its syntax error as a diagnostic of `kind` at its line and column.
    static func document(_ bytes: [UInt8], file: String, kind: PolicyDiagnostics.Kind,
                         maximumDepth: Int = JSONReader.maximumDepth) throws(PolicyDiagnostics) -> Located {
        do {
            return try JSONReader.parse(bytes, maximumDepth: maximumDepth)
        } catch {
            throw PolicyDiagnostics(kind: kind, problems: [PolicyDiagnostic(
                location: SourceLocation(file: file, line: error.line, column: error.column), message: error.message)])
        }
    }

    static func problem(_ value: Located, _ file: String, _ message: String) -> PolicyDiagnostic {
        PolicyDiagnostic(location: SourceLocation(file: file, line: value.line, column: value.column), message: message)
    }

    static func members(_ value: Located, _ file: String, _ what: String, allowed: Set<String>) throws(PolicyDiagnostic)
        -> [String: Located]
    {
        guard case .object(let members) = value.value else { throw problem(value, file, "\(what) must be a JSON object") }
        var out: [String: Located] = [:]
        for (key, member) in members {
            guard allowed.contains(key) else {
                throw problem(member, file, "\(what) has an unknown field \(PolicyValue.quoted(key)) (fields: \(allowed.sorted().joined(separator: ", ")))")
            }
            out[key] = member
        }
        return out
    }

    static func string(_ value: Located?, _ file: String, _ what: String, in parent: Located) throws(PolicyDiagnostic) -> String {
        guard let value else { throw problem(parent, file, "\(what) is missing") }
        guard case .string(let text) = value.value else { throw problem(value, file, "\(what) must be a string") }
        return text
    }

    /// `{"type": "User", "id": "alice"}`, or `{"__entity": {…}}`, or `User::"alice"`.
    static func uid(_ value: Located, _ file: String, _ what: String, naming: Bool = true) throws(PolicyDiagnostic) -> EntityUID {
        if case .string(let text) = value.value {
            guard let uid = parseUID(text) else {
                let why = naming ? EntityUID.problem(parsing: text) ?? "" : "is not an entity"
                throw problem(value, file, "\(what) \(why): an entity is written User::\"alice\"")
            }
            return uid
        }
        var fields = try members(value, file, what, allowed: ["type", "id", "__entity"])
        if let inner = fields["__entity"] {
            guard fields.count == 1 else { throw problem(value, file, "\(what): __entity must be the only field") }
            fields = try members(inner, file, what, allowed: ["type", "id"])
        }
        let type = try string(fields["type"], file, "\(what)'s type", in: value)
        let id = try string(fields["id"], file, "\(what)'s id", in: value)
        // Named (escaped, so a look-alike shows) where it names an entity: an entity's uid or
        // parent, a request's principal, action or resource; not in a value, which is data.
        let shown = naming ? " " + PolicyValue.quoted(type, escapingNonASCII: true) : ""
        guard isTypeName(type) else { throw problem(value, file, "\(what)'s type\(shown) is not a type name (Name or Namespace::Name, not a reserved word)") }
        return EntityUID(type: type, id: id)
    }

    static func isTypeName(_ text: String) -> Bool {
        // Identifiers (ASCII letters, digits, `_`; not starting with a digit; not a word Cedar
        // reserves, as in policy text: `when::"a"` is an entity, `if::"a"` is not) separated by
        // `::`, read byte by byte.
        let bytes = Array(text.utf8)
        func isIdentifier(_ range: Range<Int>) -> Bool {
            func letter(_ byte: UInt8) -> Bool { byte == 0x5F || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) }
            guard let first = range.first, letter(bytes[first]) else { return false }
            guard range.allSatisfy({ letter(bytes[$0]) || (0x30...0x39).contains(bytes[$0]) }) else { return false }
            // Every reserved word starts with a lowercase letter or `_` (type names seldom do).
            guard (0x61...0x7A).contains(bytes[first]) || bytes[first] == 0x5F else { return true }
            return !PolicyParser.cedarReserved.contains(String(decoding: bytes[range], as: UTF8.self))
        }
        var start = 0, index = 0
        while index + 1 < bytes.count {
            if bytes[index] == 0x3A, bytes[index + 1] == 0x3A {
                guard isIdentifier(start..<index) else { return false }
                index += 2
                start = index
            } else {
                index += 1
            }
        }
        return isIdentifier(start..<bytes.count)
    }

    /// `Type::"id"` (the id with policy-text escapes).
    static func parseUID(_ text: String) -> EntityUID? {
        // The usual case first: `Type::"id"` whose id has no quote, backslash or control
        // character, so no escape to undo (anything else takes the lexer's way below).
        let bytes = Array(text.utf8)
        if let separator = bytes.indices.dropLast(2).first(where: { bytes[$0] == 0x3A && bytes[$0 + 1] == 0x3A && bytes[$0 + 2] == 0x22 }),
           bytes.count > separator + 3, bytes[bytes.count - 1] == 0x22,
           bytes[(separator + 3)..<(bytes.count - 1)].allSatisfy({ $0 >= 0x20 && $0 != 0x22 && $0 != 0x5C && $0 != 0x7F }) {
            let type = String(decoding: bytes[..<separator], as: UTF8.self)
            guard isTypeName(type) else { return nil }
            return EntityUID(type: type, id: String(decoding: bytes[(separator + 3)..<(bytes.count - 1)], as: UTF8.self),
                             isASCII: bytes.allSatisfy { $0 < 0x80 })
        }
        guard let separator = text.utf8.ranges(of: "::\"".utf8).last, text.hasSuffix("\""), text.count >= 4 else { return nil }
        let type = String(text[..<separator.lowerBound])
        guard isTypeName(type) else { return nil }
        var lexer = Lexer(text: String(text[text.index(separator.lowerBound, offsetBy: 2)...]), file: "")
        // The quoted id and nothing after it: no white space, no `//` comment (as in Cedar, whose
        // entity text must be in its normal form).
        guard let tokens = try? lexer.tokens(), tokens.count == 2, case .string(let id, _) = tokens[0].token,
              tokens[1].start == tokens[0].end else { return nil }
        return EntityUID(type: type, id: id)
    }

    static func entity(_ value: Located, file: String) throws(PolicyDiagnostic) -> Entity {
        let fields = try members(value, file, "an entity", allowed: ["uid", "attrs", "parents", "tags"])
        guard let uidValue = fields["uid"] else { throw problem(value, file, "an entity has no \"uid\"") }
        let uid = try uid(uidValue, file, "the entity's uid")
        var attributes: [String: PolicyValue] = [:]
        if let attrs = fields["attrs"] {
            guard case .object(let members) = attrs.value else { throw problem(attrs, file, "\(uid)'s attrs must be an object") }
            for (key, member) in members { attributes[key] = try policyValue(member, file, "\(uid).\(key)") }
        }
        var parents: [EntityUID] = []
        if let parentsValue = fields["parents"] {
            guard case .array(let items) = parentsValue.value else { throw problem(parentsValue, file, "\(uid)'s parents must be an array") }
            for item in items { parents.append(try self.uid(item, file, "a parent of \(uid)")) }
        }
        if let tags = fields["tags"], case .object(let members) = tags.value, !members.isEmpty {
            throw problem(tags, file, "entity tags are not supported")
        }
        return Entity(uid: uid, attributes: attributes, parents: parents)
    }

    /// A JSON value as a policy value: numbers must be integers; `null` is not a value.
    static func policyValue(_ value: Located, _ file: String, _ what: String) throws(PolicyDiagnostic) -> PolicyValue {
        switch value.value {
        case .bool(let flag): return .bool(flag)
        case .integer(let number): return .long(number)
        case .number: throw problem(value, file, "\(what) is not a whole number that fits in 64 bits (use decimal(\"…\") for fractions)")
        case .string(let text): return .string(text)
        case .null: throw problem(value, file, "\(what) is null: leave the attribute out instead")
        case .array(let items):
            var values: [PolicyValue] = []
            for item in items { values.append(try policyValue(item, file, what)) }
            return .set(PolicyValueSet(values))
        case .object(let members):
            if members.count == 1, members[0].key == "__entity" { return .entity(try uid(value, file, what, naming: false)) }
            if members.count == 1, members[0].key == "__extn" {
                let (function, arguments) = try extensionCall(members[0].value, file, what, in: value)
                guard arguments.count == 1, case .string(let argument) = arguments[0].value else {
                    throw problem(value, file, "\(what): \(function)() takes one string argument")
                }
                do {
                    // Data is not echoed: a value in the wrong place may be a secret.
                    return try Evaluator.extensionValue(function, argument, quoting: false)
                } catch {
                    throw problem(value, file, "\(what): \(error.message)")
                }
            }
            var record: [String: PolicyValue] = [:]
            for (key, member) in members { record[key] = try policyValue(member, file, "\(what).\(key)") }
            return .record(record)
        }
    }

    /// An extension value's parts, `{"fn": "ip", "arg": "10.0.0.1"}` or, as Cedar also writes it,
    /// `{"fn": "ip", "args": ["10.0.0.1"]}`: the function (one of the language's constructors)
    /// and its arguments, not yet read.
    static func extensionCall(_ value: Located, _ file: String, _ what: String, in parent: Located) throws(PolicyDiagnostic)
        -> (function: String, arguments: [Located])
    {
        let fields = try members(value, file, what, allowed: ["fn", "arg", "args"])
        let function = try string(fields["fn"], file, "\(what)'s fn", in: parent)
        guard PolicyParser.extensionFunctions.contains(function) else {
            throw problem(value, file, "\(what): its fn is not an extension function (ip, decimal, datetime, duration)")
        }
        switch (fields["arg"], fields["args"]) {
        case (let argument?, nil):
            return (function, [argument])
        case (nil, let list?):
            guard case .array(let items) = list.value else { throw problem(list, file, "\(what)'s args must be an array") }
            return (function, items)
        case (nil, nil):
            throw problem(value, file, "\(what)'s arg is missing")
        case (_?, _?):
            throw problem(value, file, "\(what) has both arg and args: write one")
        }
    }

    /// A policy value in Cedar's JSON form.
    static func json(_ value: PolicyValue) -> JSONValue {
        func at(_ value: JSONValue) -> Located { Located(value: value, line: 0) }
        switch value {
        case .bool(let flag): return .bool(flag)
        case .long(let number): return .integer(number)
        case .string(let text): return .string(text)
        case .entity(let uid):
            return .object([("__entity", at(.object([("type", at(.string(uid.type))), ("id", at(.string(uid.id)))])))])
        case .set(let set): return .array(set.elements.map { at(json($0)) })
        case .record(let fields): return .object(fields.sorted { $0.key < $1.key }.map { ($0.key, at(json($0.value))) })
        case .ip, .decimal, .datetime, .duration:
            let text = value.description
            let open = text.firstIndex(of: "(")!
            let function = String(text[..<open])
            let argument = String(text[text.index(open, offsetBy: 2)..<text.index(text.endIndex, offsetBy: -2)])
            return .object([("__extn", at(.object([("fn", at(.string(function))), ("arg", at(.string(argument)))])))])
        }
    }
}
