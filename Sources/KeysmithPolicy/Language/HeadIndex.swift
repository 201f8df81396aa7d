/// Which policies' heads can match a request, found with small integers instead of comparing
/// the request with every head. Made once per policy set (it does not depend on the entities).
///
/// Every action a head names (with `==` or in an `in [...]` list) and every entity type a head
/// names gets a code; a request's action and resource type are turned into codes once (a scan
/// of at most 16 names, else a hash lookup), and pick a bucket listing only the policies whose
/// head can match them. What a code cannot settle — `principal == User::"alice"`,
/// `resource in Album::"a"`, `action in Action::"write"` when the request's action is not
/// `write` itself — each listed policy still checks (``Candidate``), so a bucket's policies that
/// pass their checks are exactly the policies whose head matches (``Policies/headMatches``, the
/// definition; a test compares the two on random requests).
///
/// Names compare as Cedar compares them, byte by byte: a type written with a Kelvin sign is
/// not the type `Key`. A class: a decision takes it as one reference.
final class HeadIndex: Sendable {
    /// A policy a bucket lists, and what its head still has to check.
    struct Candidate: Sendable {
        /// The policy's index in the set.
        let policy: Int32
        /// The code of the principal's type the head requires (`is T`), or -1.
        let principalType: Int32
        /// The code of the resource's type the head requires when buckets do not already
        /// separate resource types, or -1.
        let resourceType: Int32
        /// What else to check: ``principalRest``, ``resourceRest``, ``actionGroups``, ``wholeHead``.
        let checks: UInt8

        /// The principal constraint's uid comparison or `in` (`==`, `in`, `is T in`).
        static let principalRest: UInt8 = 1
        /// The resource constraint's uid comparison or `in`.
        static let resourceRest: UInt8 = 2
        /// `action in [...]` whose list does not name the request's action: the action's
        /// record must be in one of the groups.
        static let actionGroups: UInt8 = 4
        /// Nothing settled: the whole head is matched (a policy set too large to bucket).
        static let wholeHead: UInt8 = 8
    }

    /// The policies one bucket lists, forbids and permits apart, each in policy order (while
    /// the index is built).
    private struct Bucket: Sendable {
        var forbids: [Candidate] = []
        var permits: [Candidate] = []
    }

    /// Codes of the actions heads name (their count is the code of every other action).
    private let actions: CodeTable<EntityUID>
    /// Codes of the entity types heads name (their count is the code of every other type).
    private let types: CodeTable<ExactString>
    /// Whether buckets separate resource types as well as actions.
    private let byResourceType: Bool
    /// Every bucket's forbids then permits, one bucket after another (one array: a decision
    /// reads it in place). Bucket `b` is `actionCode * (typeCount + 1) + resourceTypeCode` when
    /// ``byResourceType``, else the action code; one bucket in all when the set is too large
    /// to bucket.
    let listed: [Candidate]
    /// Where each bucket's forbids start in ``listed``, then its permits, then the next
    /// bucket's forbids: bucket `b`'s forbids are `bounds[2b]..<bounds[2b + 1]`, its permits
    /// `bounds[2b + 1]..<bounds[2b + 2]`.
    private let bounds: [Int]
    /// Whether there is a single bucket (a set too large to bucket: every head matched whole).
    private let single: Bool

    /// At most this many listings over all buckets (a policy is listed once per bucket it can
    /// match), or `8 ×` the number of policies when that is more; past it, a coarser layout.
    static let listingBound = 65_536

    /// How the buckets are laid out (the finest whose listings fit the bound).
    enum Layout: Sendable { case byActionAndResourceType, byAction, whole }

    var layout: Layout { single ? .whole : byResourceType ? .byActionAndResourceType : .byAction }

    /// The index of a policy set; `listingBound` (tests) replaces ``listingBound``.
    init(_ policies: [ParsedPolicy], listingBound: Int = HeadIndex.listingBound) {
        var actionNames: [EntityUID] = []
        var typeNames: [ExactString] = []
        var seenActions = Set<EntityUID>(), seenTypes = Set<ExactString>()
        func noteType(_ type: String) {
            if seenTypes.insert(ExactString(type)).inserted { typeNames.append(ExactString(type)) }
        }
        for policy in policies {
            switch policy.action {
            case .any: break
            case .equal(let action): if seenActions.insert(action).inserted { actionNames.append(action) }
            case .within(let groups): for group in groups where seenActions.insert(group).inserted { actionNames.append(group) }
            }
            for constraint in [policy.principal, policy.resource] {
                switch constraint {
                case .isType(let type), .isTypeWithin(let type, _): noteType(type)
                case .equal(let uid): noteType(uid.type)
                case .any, .within: break
                }
            }
        }
        let actions = CodeTable(actionNames), types = CodeTable(typeNames)
        self.actions = actions
        self.types = types
        let actionCount = actionNames.count + 1, typeCount = typeNames.count + 1
        let bound = listingBound == Self.listingBound ? max(listingBound, 8 * policies.count) : listingBound

        // The buckets a policy's action constraint lists it in, and whether each needs the
        // group check.
        func actionBuckets(_ policy: ParsedPolicy) -> [(code: Int, groups: Bool)] {
            switch policy.action {
            case .any: return (0..<actionCount).map { ($0, false) }
            case .equal(let action): return [(actions.code(action), false)]
            case .within(let groups):
                let named = Set(groups.map { actions.code($0) })
                return (0..<actionCount).map { ($0, !named.contains($0)) }
            }
        }
        func resourceTypeCode(_ constraint: EntityConstraint) -> Int? {
            switch constraint {
            case .isType(let type), .isTypeWithin(let type, _): types.code(ExactString(type))
            case .equal(let uid): types.code(ExactString(uid.type))
            case .any, .within: nil
            }
        }
        func hasRest(_ constraint: EntityConstraint) -> Bool {
            switch constraint {
            case .equal, .within, .isTypeWithin: true
            case .any, .isType: false
            }
        }
        func principalTypeCode(_ policy: ParsedPolicy) -> Int32 {
            switch policy.principal {
            case .isType(let type), .isTypeWithin(let type, _): Int32(types.code(ExactString(type)))
            case .any, .within, .equal: -1
            }
        }

        // The finest layout whose listings stay within the bound.
        // Listings counted without making them: a head with `action` or `action in` is listed
        // in every action bucket (so is one with no resource type, in every type bucket).
        func actionListings(_ policy: ParsedPolicy) -> Int {
            if case .equal = policy.action { return 1 } else { return actionCount }
        }
        // The bucket count is bounded too (buckets exist whether or not anything is listed).
        let byActionAndType = actionCount * typeCount > bound ? Int.max
            : policies.reduce(0) { $0 + actionListings($1) * (resourceTypeCode($1.resource) == nil ? typeCount : 1) }
        let byAction = policies.reduce(0) { $0 + actionListings($1) }
        if byActionAndType <= bound || byAction <= bound {
            let byResourceType = byActionAndType <= bound
            self.byResourceType = byResourceType
            single = false
            var lists = [Bucket](repeating: Bucket(), count: byResourceType ? actionCount * typeCount : actionCount)
            for (index, policy) in policies.enumerated() {
                let resourceType = resourceTypeCode(policy.resource)
                let rest = (hasRest(policy.principal) ? Candidate.principalRest : 0) | (hasRest(policy.resource) ? Candidate.resourceRest : 0)
                for (code, groups) in actionBuckets(policy) {
                    let candidate = Candidate(policy: Int32(index), principalType: principalTypeCode(policy),
                                              resourceType: byResourceType ? -1 : Int32(resourceType ?? -1),
                                              checks: rest | (groups ? Candidate.actionGroups : 0))
                    let slots = !byResourceType ? [code] : resourceType.map { [code * typeCount + $0] } ?? (0..<typeCount).map { code * typeCount + $0 }
                    for slot in slots {
                        if policy.effect == .forbid { lists[slot].forbids.append(candidate) } else { lists[slot].permits.append(candidate) }
                    }
                }
            }
            (listed, bounds) = Self.flatten(lists)
        } else {
            byResourceType = false
            single = true
            var whole = Bucket()
            for (index, policy) in policies.enumerated() {
                let candidate = Candidate(policy: Int32(index), principalType: -1, resourceType: -1, checks: Candidate.wholeHead)
                if policy.effect == .forbid { whole.forbids.append(candidate) } else { whole.permits.append(candidate) }
            }
            (listed, bounds) = Self.flatten([whole])
        }
    }

    private static func flatten(_ buckets: [Bucket]) -> ([Candidate], [Int]) {
        var listed: [Candidate] = [], bounds: [Int] = [0]
        for bucket in buckets {
            listed += bucket.forbids
            bounds.append(listed.count)
            listed += bucket.permits
            bounds.append(listed.count)
        }
        return (listed, bounds)
    }

    /// Where bucket `bucket`'s forbids are in ``listed``.
    func forbids(_ bucket: Int) -> Range<Int> { bounds[2 * bucket]..<bounds[2 * bucket + 1] }

    /// Where bucket `bucket`'s permits are in ``listed``.
    func permits(_ bucket: Int) -> Range<Int> { bounds[2 * bucket + 1]..<bounds[2 * bucket + 2] }

    /// The bucket of the request's action and resource type.
    func bucket(_ request: borrowing AuthorizationRequest) -> Int {
        if single { return 0 }
        let action = actions.code(request.action)
        return byResourceType ? action * (types.count + 1) + types.code(request.resource.type) : action
    }

    /// The code of an entity type (the number of types heads name, for any other type).
    func typeCode(_ type: String) -> Int32 { Int32(types.code(type)) }
}

/// Codes `0..<count` for distinct keys, found by a scan of at most 16 keys or by hashing; a
/// key not in the table has the code `count`. `Key`'s `==` compares bytes (``EntityUID``,
/// ``ExactString``), and its hash agrees.
struct CodeTable<Key: Hashable & Sendable>: Sendable {
    private let keys: [Key]
    /// For more than 16 keys: their codes, by hash (`Key`'s `==` compares bytes).
    private let byHash: [Key: Int]

    var count: Int { keys.count }

    init(_ keys: [Key]) {
        self.keys = keys
        self.byHash = keys.count > 16 ? Dictionary(uniqueKeysWithValues: keys.enumerated().map { ($1, $0) }) : [:]
    }

    func code(_ key: Key) -> Int {
        if keys.count <= 16 {
            for index in keys.indices where keys[index] == key { return index }
            return keys.count
        }
        return byHash[key] ?? keys.count
    }
}

extension CodeTable where Key == ExactString {
    /// The code of a type name (without wrapping it for the scan).
    func code(_ type: String) -> Int {
        if keys.count <= 16 {
            for index in keys.indices where keys[index].isSame(type) { return index }
            return keys.count
        }
        return code(ExactString(type))
    }
}

/// A string compared byte for byte (Swift's `==` on `String` is canonical equivalence).
struct ExactString: Hashable, Sendable {
    let text: String
    /// Whether `text` is all ASCII (entity type names almost always are).
    let isASCII: Bool
    init(_ text: String) {
        self.text = text
        isASCII = text.utf8.allSatisfy { $0 < 0x80 }
    }

    /// Whether `other` is the same bytes as `text`.
    @inline(__always)
    func isSame(_ other: String) -> Bool {
        // An ASCII string is canonically equivalent to another of the same UTF-8 length only
        // when they are the same bytes (a string equivalent to an ASCII one but not ASCII
        // itself, such as a Kelvin sign for K, is longer in UTF-8).
        isASCII ? text.utf8.count == other.utf8.count && text == other : PolicyValue.sameBytes(text, other)
    }

    static func == (lhs: ExactString, rhs: ExactString) -> Bool { lhs.isSame(rhs.text) }
    /// Swift's hash of the string: equal bytes are canonically equivalent, so they hash alike.
    func hash(into hasher: inout Hasher) { hasher.combine(text) }
}
