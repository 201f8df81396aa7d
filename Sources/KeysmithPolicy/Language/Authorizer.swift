public import FoundationEssentials
public import Keysmith

/// A principal's token as policies see it: `context.token.granted`, `.declined`, `.expired` and
/// `.revoked` (sets of scope names), and, for explanations, when each scope last changed.
///
/// The engine reads scopes by name and knows nothing of where they come from. A Keysmith token
/// or permission manager becomes a view through the adapter module, KeysmithTokenPolicy:
///
/// ```swift
/// import KeysmithTokenPolicy
/// let view = TokenView(token: token, at: .now)            // a stored token at an instant
/// let live = TokenView(watching: manager)                 // read at every decision: revocations apply at once
/// let plain = TokenView.granted(names: ["posts:read"])    // names alone, from anywhere
/// ```
public struct TokenView: Sendable {
    enum Source: Sendable {
        case statuses([String: ScopeStatus])
        /// The granted scope names now, asked at every decision.
        case live(@Sendable () -> Set<String>)
        /// A snapshot by name (a what-if copy of another view).
        case fixedSnapshot([String: ScopeStatus?])
        /// Granted scopes by name, with no times (``TokenView/granted(_:)``).
        case grantedNames(Set<String>)
    }

    /// What the view holds, in one object: copying a view (with each request) is one reference.
    final class Storage: Sendable {
        /// Whether `fixedRecord` is there (asked once per decision, without copying it). First,
        /// with `few` after it: the bytes a decision reads are at the start of the object.
        let keepsRecord: Bool
        /// The scope names and their sets, in this object itself, when the sets hold at most
        /// ``FewScopes/capacity`` names in all (most tokens do): a test then reads no other memory.
        private let few: FewScopes
        let source: Source
        /// `context.token` for a view that does not change (all but live ones), built once.
        let fixedRecord: PolicyValue?
        /// That record's five fields in ``TokenField`` order, for conditions that read one.
        let fixedFields: [PolicyValue]?
        /// `fixedFields` that are sets, as sets (`nil` for the others): the four scope sets, kept
        /// in this object itself (not in an array of their own), so testing one reads this
        /// object, then the set's elements.
        private let granted, declined, expired, revoked: PolicyValueSet?

        /// Whether the field at `index` (in ``TokenField`` order) holds every one of `members`
        /// (`all`) or at least one, when the view keeps its fields and that field is a set;
        /// `nil` otherwise. Tested in place: nothing of the set is copied.
        func field(_ index: Int, holds members: [PolicyValue], all: Bool) -> Bool? {
            if let answer = few.field(index, holds: members, all: all) { return answer }
            return switch index {
            case 0: Self.holds(granted, members, all: all)
            case 1: Self.holds(declined, members, all: all)
            case 2: Self.holds(expired, members, all: all)
            case 3: Self.holds(revoked, members, all: all)
            default: nil
            }
        }

        @inline(__always)
        private static func holds(_ set: PolicyValueSet?, _ members: [PolicyValue], all: Bool) -> Bool? {
            guard let set else { return nil }
            for member in members where set.contains(member) != all { return !all }
            return all
        }

        /// The scope sets of `fields` (in ``TokenField`` order; `nil` for a field that is not a set).
        private static func sets(_ fields: [PolicyValue]?) -> (PolicyValueSet?, PolicyValueSet?, PolicyValueSet?, PolicyValueSet?) {
            func set(_ field: TokenField) -> PolicyValueSet? {
                guard let fields, case .set(let set) = fields[TokenField.allCases.firstIndex(of: field)!] else { return nil }
                return set
            }
            return (set(.granted), set(.declined), set(.expired), set(.revoked))
        }

        init(source: Source, fixedRecord: PolicyValue, fields: [PolicyValue]) {
            self.source = source
            self.fixedRecord = fixedRecord
            self.fixedFields = fields
            self.keepsRecord = true
            (granted, declined, expired, revoked) = Self.sets(fields)
            few = FewScopes(granted, declined, expired, revoked)
        }

        init(source: Source, fixedRecord: PolicyValue?) {
            self.source = source
            self.fixedRecord = fixedRecord
            self.keepsRecord = fixedRecord != nil
            if case .record(let fields)? = fixedRecord {
                let parts = TokenField.allCases.compactMap { fields[$0.rawValue] }
                self.fixedFields = parts.count == TokenField.allCases.count ? parts : nil
            } else {
                self.fixedFields = nil
            }
            (granted, declined, expired, revoked) = Self.sets(fixedFields)
            few = FewScopes(granted, declined, expired, revoked)
        }
    }

    /// A token's scope names with the set each is in (its place in ``TokenField`` order), held
    /// in place when there are at most ``capacity`` of them, all strings: four strings and a
    /// few bytes, where the sets would be four arrays elsewhere in memory.
    struct FewScopes: Sendable {
        /// The most names held in place.
        static let capacity = 4
        /// How many names, or `UInt8.max` when they are not held here (more than
        /// ``capacity``, an element that is not a string, or a field that is not a set).
        private var count: UInt8 = .max
        /// The set of each name: byte `i` (from the lowest) for name `i`.
        private var sets: UInt32 = 0
        private var names: (String, String, String, String) = ("", "", "", "")

        /// The names of these sets (in ``TokenField`` order), when they fit.
        init(_ sets: PolicyValueSet?...) {
            guard sets.allSatisfy({ $0 != nil }),
                  sets.reduce(0, { $0 + $1!.count }) <= Self.capacity else { return }
            var count: UInt8 = 0
            for (place, set) in sets.enumerated() {
                for element in set!.elements {
                    guard case .string(let name) = element else { return }
                    switch count {
                    case 0: names.0 = name
                    case 1: names.1 = name
                    case 2: names.2 = name
                    default: names.3 = name
                    }
                    self.sets |= UInt32(place) << (8 * UInt32(count))
                    count += 1
                }
            }
            self.count = count
        }

        /// Whether the set at `index` holds every one of `members` (`all`) or at least one;
        /// `nil` when the names are not held here or the field is not one of the four sets
        /// (`since` is a record).
        @inline(__always)
        func field(_ index: Int, holds members: [PolicyValue], all: Bool) -> Bool? {
            guard count != .max, (0..<4).contains(index) else { return nil }
            for member in members where holds(index, member) != all { return !all }
            return all
        }

        private func holds(_ index: Int, _ member: PolicyValue) -> Bool {
            guard case .string(let text) = member else { return false }  // the sets hold strings only
            for place in 0..<Int(count) where Int(truncatingIfNeeded: sets >> (8 * UInt32(place))) & 0xFF == index {
                let name = switch place { case 0: names.0; case 1: names.1; case 2: names.2; default: names.3 }
                if PolicyValue.sameBytes(name, text) { return true }
            }
            return false
        }
    }

    let storage: Storage
    var source: Source { storage.source }
    var fixedRecord: PolicyValue? { storage.fixedRecord }
    var fixedFields: [PolicyValue]? { storage.fixedFields }

    init(source: Source) {
        storage = Storage(source: source, fixedRecord: nil)
    }

    private init(source: Source, record: PolicyValue) {
        storage = Storage(source: source, fixedRecord: record)
    }

    /// The view with its record built once (every source but a live one).
    func cached() -> TokenView {
        if case .live = source { return self }
        return TokenView(source: source, record: Self.record(snapshot()))
    }

    /// `context.token` now.
    func currentRecord() -> PolicyValue { fixedRecord ?? Self.record(snapshot()) }

    /// A token's scopes by name, each with its state and when and why it entered it.
    ///
    /// ```swift
    /// let view = TokenView(scopes: ["posts:read": ScopeStatus(state: .granted, changedAt: issued, reason: "granted"),
    ///                               "posts:write": ScopeStatus(state: .revoked, changedAt: .now, reason: "incident")])
    /// ```
    ///
    /// Names are taken as given; the adapter's `TokenView(token:at:)` gives a stored token's.
    public init(scopes: [String: ScopeStatus]) {
        self = TokenView(source: .statuses(scopes)).cached()
    }

    /// Granted scope names asked for at every decision: a revocation that changes what
    /// `grantedNames` returns changes the very next decision. Only granted scopes are known
    /// (no declined, expired or revoked ones, no times). The adapter's
    /// `TokenView(watching:)` reads a `PermissionManager` this way.
    public static func live(grantedNames: @escaping @Sendable () -> Set<String>) -> TokenView {
        TokenView(source: .live(grantedNames))
    }

    /// A fixed set of granted scope names, with no history.
    public static func granted(names: Set<String>) -> TokenView {
        // The record straight from the names (what `record(snapshot())` builds, without the
        // intermediate dictionaries: no times are known, so `since` is empty).
        let granted = PolicyValue.set(PolicyValueSet(names.map { .string($0) }))
        var record = grantedTemplate.record
        record[TokenField.granted.rawValue] = granted
        var fields = grantedTemplate.fields
        fields[TokenField.allCases.firstIndex(of: .granted)!] = granted
        return TokenView(storage: Storage(source: .grantedNames(names), fixedRecord: .record(record), fields: fields))
    }

    /// What every ``granted(names:)`` view shares: no scope declined, expired or revoked, no times;
    /// as the record and as its fields in ``TokenField`` order (`granted` filled in per view).
    private static let grantedTemplate: (record: [String: PolicyValue], fields: [PolicyValue]) = {
        let none = PolicyValue.set(PolicyValueSet([]))
        let fields = TokenField.allCases.map { $0 == .since ? PolicyValue.record([:]) : none }
        return (Dictionary(uniqueKeysWithValues: zip(TokenField.allCases.map(\.rawValue), fields)), fields)
    }()

    private init(storage: Storage) { self.storage = storage }

    /// Each scope's status now (a live view knows granted scopes only, with no time).
    func snapshot() -> [String: ScopeStatus?] {
        switch source {
        case .statuses(let statuses):
            return statuses.mapValues { Optional($0) }
        case .live(let grantedNames):
            return Dictionary(uniqueKeysWithValues: grantedNames().map { ($0, ScopeStatus?.none) })
        case .fixedSnapshot(let snapshot):
            return snapshot
        case .grantedNames(let scopes):
            return Dictionary(uniqueKeysWithValues: scopes.map {
                ($0, Optional(ScopeStatus(state: .granted, changedAt: Date(timeIntervalSince1970: 0), reason: "")))
            })
        }
    }

    /// The `context.token` record: the four sets, and `since`, each scope's time in its state as
    /// a `datetime` (only scopes whose time is known: not live views, not `granted(names:)`).
    static func record(_ snapshot: [String: ScopeStatus?]) -> PolicyValue {
        var sets: [ScopeState: [PolicyValue]] = [:]
        var since: [String: PolicyValue] = [:]
        for (name, status) in snapshot {
            sets[status?.state ?? .granted, default: []].append(.string(name))
            if let milliseconds = status?.knownMilliseconds { since[name] = .datetime(milliseconds) }
        }
        var fields: [String: PolicyValue] = ["since": .record(since)]
        for state in ScopeState.allCases { fields[state.rawValue] = .set(PolicyValueSet(sets[state] ?? [])) }
        return .record(fields)
    }
}

/// The fields of `context.token`, in the order ``TokenView`` keeps them.
enum TokenField: String, CaseIterable {
    case granted, declined, expired, revoked, since
}

extension ScopeStatus {
    /// When the scope entered its state, in milliseconds since 1970 (rounded down), or `nil` when
    /// the time is not known (views built from bare scope names carry the time 0).
    var knownMilliseconds: Int64? { Self.knownMilliseconds(of: changedAt) }

    /// `date` in milliseconds since 1970 (rounded down), or `nil` when it is not after 1970 or
    /// is after 9999-12-31 (a later one would not fit the conversion).
    static func knownMilliseconds(of date: Date) -> Int64? {
        let seconds = date.timeIntervalSince1970
        guard seconds > 0, seconds < 253_402_300_800 else { return nil }  // up to 9999-12-31
        return Int64((seconds * 1000).rounded(.down))
    }
}

/// One question: may this principal do this action to this resource, in this context?
///
/// ```swift
/// let request = AuthorizationRequest(principal: EntityUID(type: "User", id: "alice"),
///                                    action: EntityUID(type: "Action", id: "delete"),
///                                    resource: EntityUID(type: "Photo", id: "42"),
///                                    context: ["ip": .ip(IPAddress("10.0.0.7")!)],
///                                    token: .granted(names: ["photos:write"]))
/// ```
public struct AuthorizationRequest: Sendable {
    /// Who.
    public var principal: EntityUID
    /// What: an entity of type `Action` (or `Namespace::Action`).
    public var action: EntityUID
    /// To what.
    public var resource: EntityUID
    /// Facts about the request (`context.…` in conditions). The name `token` is reserved.
    public var context: [String: PolicyValue]
    /// The principal's token, `context.token` in conditions; `nil` for a principal without one
    /// (`context has token` is then false).
    public var token: TokenView?

    /// A request.
    public init(principal: EntityUID, action: EntityUID, resource: EntityUID, context: [String: PolicyValue] = [:],
                token: TokenView? = nil) {
        self.principal = principal
        self.action = action
        self.resource = resource
        self.context = context
        self.token = token
    }
}

/// A policy named in a decision: its id and where it is written.
public struct PolicyReference: Sendable, Hashable, CustomStringConvertible {
    /// The policy's `@id`, or `policyN` (its index in the set) when it has none.
    public var id: String
    /// Permit or forbid.
    public var effect: Effect
    /// Where its text starts.
    public var location: SourceLocation

    /// `id (file:line:column)`.
    public var description: String { "\(id) (\(location))" }
}

/// A scope a condition names, and its state in the principal's token.
public struct ScopeFact: Sendable, Hashable, CustomStringConvertible {
    /// The scope's name.
    public var scope: String
    /// Its state; `nil` when the token never held it, or there is no token.
    public var state: ScopeState?
    /// When it last changed, when known.
    public var changedAt: Date?
    /// Why it changed, when known.
    public var reason: String?

    /// `posts:write revoked at 2026-11-20T10:00:00Z (reason)`, or `posts:write not in the token`.
    public var description: String {
        guard let state else { return OneLine.escaped("\(scope) is not in the token") }
        var text = "\(scope) is \(state.rawValue)"
        if let milliseconds = changedAt.flatMap(ScopeStatus.knownMilliseconds(of:)) {
            text += " since " + DateTimeText.format(milliseconds: milliseconds)
        }
        if let reason, !reason.isEmpty { text += " (\(reason))" }
        return OneLine.escaped(text)
    }
}

/// A clause that decided a policy's fate: for a permit that did not apply, the `when` that was
/// false or the `unless` that was true; for a forbid that applied, each of its clauses.
public struct ClauseOutcome: Sendable, Hashable, CustomStringConvertible {
    /// The policy.
    public var policy: PolicyReference
    /// `when` or `unless`.
    public var clause: String
    /// What the deciding part evaluated to.
    public var value: Bool
    /// The deciding part of the clause as written (the first false conjunct of a `when`).
    public var text: String
    /// Where it is.
    public var location: SourceLocation
    /// Scopes the clause names (`context.token.granted.contains("posts:write")`) and their state.
    public var scopes: [ScopeFact]

    /// `policy (file:line:column): when { text } is false: scopes…`.
    public var description: String {
        var line = "\(OneLine.escaped(policy.id)) (\(OneLine.escaped(location.description))): \(clause) { \(OneLine.policyText(text)) } is \(value)"
        if !scopes.isEmpty { line += ": " + scopes.map(\.description).joined(separator: "; ") }
        return line
    }
}

/// A condition that could not be evaluated, in one policy.
public struct PolicyFailure: Sendable, Hashable, CustomStringConvertible {
    /// The policy.
    public var policy: PolicyReference
    /// The error.
    public var error: EvaluationError

    /// `policy: error`.
    public var description: String { OneLine.escaped("\(policy.id): \(error)") }
}

/// The answer to a request, with everything that decided it.
public struct AuthorizationDecision: Sendable, CustomStringConvertible {
    /// Allowed only when a permit applies, no forbid applies, and no forbid failed to evaluate.
    public var isAllowed: Bool
    /// The permits that allowed, or the forbids that denied (empty for a denial because nothing
    /// permits).
    public var determining: [PolicyReference]
    /// Policies whose condition could not be evaluated. A failed forbid denies; a failed permit
    /// does not allow.
    public var failures: [PolicyFailure]
    /// For a denial: for each forbid that denied, the clauses that made it apply; for each permit
    /// that would have applied but for a clause, that clause and the scopes it names. Worked
    /// out when asked for (deciding does not pay for it).
    public var unmet: [ClauseOutcome] { explainer?.clauses() ?? [] }

    let explainer: Policies.Explainer?

    /// `allow` or `deny`.
    public var outcome: String { isAllowed ? "allow" : "deny" }

    /// One line per reason, first line `allow: permitted by …` or `deny: …`. Names and texts
    /// that hold line breaks or other control characters are escaped (`\n`), so each reason is
    /// one line whatever the policies, scopes and reasons say.
    public var description: String {
        var lines: [String]
        if isAllowed {
            lines = ["allow: permitted by " + determining.map { OneLine.escaped($0.id) }.joined(separator: ", ")]
        } else if !determining.isEmpty {
            lines = ["deny: forbidden by " + determining.map { OneLine.escaped($0.id) }.joined(separator: ", ")]
        } else if !failures.isEmpty, failures.contains(where: { $0.policy.effect == .forbid }) {
            lines = ["deny: a forbid could not be evaluated, so it counts as applying"]
        } else if unmet.isEmpty {
            lines = ["deny: no permit applies to this principal, action and resource"]
        } else {
            lines = ["deny: no permit's conditions hold"]
        }
        let unmet = self.unmet
        lines += failures.map { "  error in \($0)" }
        lines += unmet.map { "  \($0)" }
        return lines.joined(separator: "\n")
    }
}

/// A set of policies in Keysmith's policy language, and the authorizer that applies them.
///
/// The language is Cedar's policy syntax and meaning (docs/policy-language.md), failing closed:
/// a forbid whose condition cannot be evaluated denies, where Cedar would skip it.
///
/// ```swift
/// let policies = try Policies(text: """
///     @id("owner-delete")
///     permit (principal, action == Action::"delete", resource is Photo)
///     when { resource.owner == principal && context.token.granted.contains("photos:write") };
///     """, file: "photos.cedar")
/// let decision = policies.isAuthorized(request, entities: entities)
/// if decision.isAllowed { … } else { print(decision) }   // says what was missing
/// ```
public struct Policies: Sendable {
    let policies: [ParsedPolicy]
    /// Which policies' heads can match a request (what deciding walks).
    let heads: HeadIndex
    /// Each policy's id, effect and place, made once (decisions name them).
    let references: [PolicyReference]
    var source: String = ""

    /// Parses policy text; every problem is reported at once, with file:line:column.
    public init(text: String, file: String = "<policies>") throws(PolicyDiagnostics) {
        let (all, problems) = Self.read([(file: file, text: text)], readingJSON: false)
        if !problems.isEmpty { throw PolicyDiagnostics(kind: .syntax, problems: problems) }
        self.init(parsed: all)
        source = text
    }

    /// The policies' text (for policies built in Swift, the text they became).
    public var text: String { source }

    /// Reads Cedar's JSON policy format: a policy set `{"staticPolicies": {"id": {…}}, …}` or one
    /// policy object (docs/policy-language.md, "JSON forms"). Every problem is reported.
    public init(json bytes: [UInt8], file: String = "<policies>") throws(PolicyDiagnostics) {
        self.init(parsed: try PolicyJSON.parse(bytes, file: file))
        source = formatted
    }

    /// The policies as a Cedar JSON policy set, keyed by id.
    public var json: String { PolicyJSON.write(policies) }

    /// The policies printed from their syntax: comments dropped, one layout.
    public var formatted: String { policies.map(PolicyPrinter.print).joined(separator: "\n\n") + (policies.isEmpty ? "" : "\n") }

    init(parsed: [ParsedPolicy], listingBound: Int = HeadIndex.listingBound) {
        policies = parsed
        heads = HeadIndex(parsed, listingBound: listingBound)
        references = parsed.map { PolicyReference(id: $0.id, effect: $0.effect, location: $0.location) }
    }

    /// Parses several files as one set: every problem of every file is reported, and a policy
    /// id used in two files is an error. Policies without an `@id` are numbered across files. A
    /// file whose first character is `{` is read as Cedar's JSON policy format.
    public init(files: [(file: String, text: String)]) throws(PolicyDiagnostics) {
        let (all, problems) = Self.read(files)
        if !problems.isEmpty { throw PolicyDiagnostics(kind: .syntax, problems: problems) }
        self.init(parsed: all)
        source = files.map(\.text).joined(separator: "\n")
    }

    /// What ``init(files:)`` reads, problems and all: every policy that parses (a syntax error
    /// stops only its own policy; a file the lexer refuses, or a JSON file that does not read,
    /// contributes none) and every problem found, ids used twice included. For reporting every
    /// problem in one run: a schema can type-check what did read (`policy validate`).
    package static func readingWhatParses(_ files: [(file: String, text: String)]) -> (policies: Policies, problems: [PolicyDiagnostic]) {
        let (all, problems) = read(files)
        var policies = Policies(parsed: all)
        policies.source = files.map(\.text).joined(separator: "\n")
        return (policies, problems)
    }

    /// Every policy of `files` that reads and every problem, each file's problems in the order
    /// of their place in it; with `readingJSON`, a file whose first character is `{` is Cedar's
    /// JSON policy format (``init(text:file:)`` reads text only).
    private static func read(_ files: [(file: String, text: String)], readingJSON: Bool = true)
        -> (policies: [ParsedPolicy], problems: [PolicyDiagnostic])
    {
        var all: [ParsedPolicy] = []
        var problems: [PolicyDiagnostic] = []
        var ids: [String: SourceLocation] = [:]
        for (file, text) in files {
            // A text file's policies that parse are kept beside its syntax problems (each stops
            // only its own policy); a JSON file is read whole or not at all.
            var parsedPolicies: [ParsedPolicy] = []
            var fileProblems: [PolicyDiagnostic] = []
            if readingJSON, text.first(where: { !$0.isWhitespace }) == "{" {
                do { parsedPolicies = try PolicyJSON.parse(Array(text.utf8), file: file) } catch { fileProblems += error.problems }
            } else {
                (parsedPolicies, fileProblems) = PolicyParser.parseReportingAll(text, file: file)
            }
            for parsed in parsedPolicies {
                let policy = parsed.hasExplicitID ? parsed : parsed.renamed("policy\(all.count)")
                if let earlier = ids[policy.id] {
                    fileProblems.append(PolicyDiagnostic(location: policy.location, message: "the policy id \(PolicyValue.quoted(policy.id)) is used twice (first at \(earlier))"))
                }
                ids[policy.id] = policy.location
                all.append(policy)
            }
            problems += fileProblems.sorted { ($0.location.line, $0.location.column) < ($1.location.line, $1.location.column) }
        }
        return (all, problems)
    }

    /// The policies' ids, in file order.
    public var ids: [String] { policies.map(\.id) }

    /// Decides a request. The request is taken (`consuming`): one built for the call is moved
    /// in, not copied; one the caller goes on using is copied once. A live token view is read
    /// once, and every condition of the decision, and its explanation read later, sees that
    /// reading.
    ///
    /// ```swift
    /// let decision = policies.isAuthorized(AuthorizationRequest(principal: alice, action: edit, resource: photo,
    ///                                                           token: .granted(names: ["posts:write"])), entities: entities)
    /// ```
    public func isAuthorized(_ request: consuming AuthorizationRequest, entities: EntityStore) -> AuthorizationDecision {
        let evaluator = Evaluator(request, entities: entities)
        let heads = self.heads, bucket = heads.bucket(evaluator.request)
        var head = HeadState()
        var permits: [PolicyReference] = []
        var forbids: [Int] = []
        var failures: [PolicyFailure] = []
        var forbidFailed = false
        // The bucket's forbids and permits, merged back into policy order.
        var nextForbid = heads.forbids(bucket).lowerBound, nextPermit = heads.permits(bucket).lowerBound
        let forbidEnd = heads.forbids(bucket).upperBound, permitEnd = heads.permits(bucket).upperBound
        while nextForbid < forbidEnd || nextPermit < permitEnd {
            let candidate: HeadIndex.Candidate
            if nextPermit == permitEnd || (nextForbid < forbidEnd && heads.listed[nextForbid].policy < heads.listed[nextPermit].policy) {
                candidate = heads.listed[nextForbid]
                nextForbid += 1
            } else {
                candidate = heads.listed[nextPermit]
                nextPermit += 1
            }
            let index = Int(candidate.policy)
            let policy = policies[index]
            guard listedHeadMatches(candidate, policy, evaluator, &head) else { continue }
            let failedClause: Int?
            do {
                failedClause = try firstFailedClause(policy, evaluator)
            } catch {
                failures.append(PolicyFailure(policy: references[index], error: error))
                forbidFailed = forbidFailed || policy.effect == .forbid
                continue
            }
            guard failedClause == nil else { continue }
            if policy.effect == .forbid { forbids.append(index) } else { permits.append(references[index]) }
        }
        if !forbids.isEmpty || forbidFailed {
            return AuthorizationDecision(isAllowed: false, determining: forbids.map { references[$0] }, failures: failures,
                                         explainer: Explainer(policies: self, decided: evaluator.take(), entities: entities, applied: forbids, explainsPermits: false))
        }
        if !permits.isEmpty {
            return AuthorizationDecision(isAllowed: true, determining: permits, failures: failures, explainer: nil)
        }
        return AuthorizationDecision(isAllowed: false, determining: [], failures: failures,
                                     explainer: Explainer(policies: self, decided: evaluator.take(), entities: entities, applied: [], explainsPermits: true))
    }

    /// Whether the request is allowed: always the answer of
    /// `isAuthorized(request, entities: entities).isAllowed`, found without working out which
    /// policies decided it (for callers that need only the answer). Forbids are tried first,
    /// and the first that applies, or fails to evaluate, ends it; then permits, until one applies.
    ///
    /// ```swift
    /// guard policies.isAllowed(request, entities: entities) else { throw Denied() }
    /// ```
    public func isAllowed(_ request: consuming AuthorizationRequest, entities: EntityStore) -> Bool {
        let evaluator = Evaluator(request, entities: entities)
        let heads = self.heads, bucket = heads.bucket(evaluator.request)
        var head = HeadState()
        for slot in heads.forbids(bucket) {
            let candidate = heads.listed[slot]
            let policy = policies[Int(candidate.policy)]
            guard listedHeadMatches(candidate, policy, evaluator, &head) else { continue }
            do {
                if try firstFailedClause(policy, evaluator) == nil { return false }
            } catch {
                return false  // a forbid that cannot be evaluated counts as applying
            }
        }
        for slot in heads.permits(bucket) {
            let candidate = heads.listed[slot]
            let policy = policies[Int(candidate.policy)]
            guard listedHeadMatches(candidate, policy, evaluator, &head) else { continue }
            do {
                if try firstFailedClause(policy, evaluator) == nil { return true }
            } catch {
                continue  // a permit that cannot be evaluated does not allow
            }
        }
        return false
    }

    /// For a policy whose head matched: the first clause that keeps it from applying (a `when`
    /// that is false or an `unless` that is true), or `nil` when it applies.
    fileprivate func firstFailedClause(_ policy: ParsedPolicy, _ evaluator: borrowing Evaluator) throws(EvaluationError) -> Int? {
        try policy.compiled.firstFailed(evaluator)
    }

    /// Works out a denial's clauses when they are asked for, from the request as it was
    /// decided (a live token as the decision read it).
    struct Explainer: Sendable {
        let policies: Policies
        let decided: Evaluator.Taken
        let entities: EntityStore
        /// Forbids that applied: every clause is reported. When none did, the permits whose
        /// head matched are reported with the clause that failed.
        let applied: [Int]
        /// Whether to report the permits whose head matched and the clause that failed: only
        /// for a denial that no forbid caused (neither applied nor failed to evaluate).
        let explainsPermits: Bool

        func clauses() -> [ClauseOutcome] {
            let evaluator = Evaluator(decided, entities: entities)
            // The token's scopes, read when a clause first names one (most do not).
            var snapshot: [String: ScopeStatus?]?? = nil
            func facts(_ names: [String]) -> [ScopeFact] {
                guard !names.isEmpty else { return [] }
                if snapshot == nil { snapshot = .some(decided.snapshot()) }
                return Policies.scopeFacts(names, snapshot ?? nil)
            }
            var out: [ClauseOutcome] = []
            for index in applied {
                let policy = policies.policies[index]
                for (number, clause) in policy.conditions.enumerated() {
                    out.append(ClauseOutcome(policy: policies.references[index], clause: clause.isWhen ? "when" : "unless", value: clause.isWhen,
                                             text: clause.body.text, location: clause.body.location, scopes: facts(policy.scopeNames[number])))
                }
            }
            var missed: [(policy: Int, clause: Int)] = []
            var actionRecord: EntityRecord?? = nil
            for index in policies.policies.indices where explainsPermits && policies.policies[index].effect == .permit {
                let policy = policies.policies[index]
                guard policies.headMatches(policy, evaluator, &actionRecord),
                      let clause = try? policies.firstFailedClause(policy, evaluator) else { continue }
                missed.append((index, clause))
            }
            for (index, clauseIndex) in missed {
                let policy = policies.policies[index], clause = policy.conditions[clauseIndex]
                let deciding = clause.isWhen ? policies.firstFalseConjunct(clause.body, evaluator) : clause.body
                // The clause's names, found once, when it is reported whole; a conjunct's, now.
                let isConjunction = if case .binary(.and, _, _) = clause.body.kind { true } else { false }
                let names = clause.isWhen && isConjunction ? Policies.scopeNames(in: deciding) : policy.scopeNames[clauseIndex]
                out.append(ClauseOutcome(policy: policies.references[index], clause: clause.isWhen ? "when" : "unless", value: !clause.isWhen,
                                         text: deciding.text, location: deciding.location, scopes: facts(names)))
            }
            return out
        }
    }

    /// What matching heads of one decision found once: the action's record, and the codes of
    /// the principal's and the resource's types (-2 until needed).
    struct HeadState {
        var actionRecord: EntityRecord?? = nil
        var principalType: Int32 = -2
        var resourceType: Int32 = -2
    }

    /// Whether the head of a policy its bucket lists matches the request: what the bucket did
    /// not settle, checked. Always ``headMatches(_:_:_:)``'s answer.
    func listedHeadMatches(_ candidate: HeadIndex.Candidate, _ policy: ParsedPolicy, _ evaluator: borrowing Evaluator,
                           _ state: inout HeadState) -> Bool {
        let checks = candidate.checks
        if checks & HeadIndex.Candidate.wholeHead != 0 { return headMatches(policy, evaluator, &state.actionRecord) }
        if candidate.principalType >= 0 {
            if state.principalType == -2 { state.principalType = heads.typeCode(evaluator.request.principal.type) }
            guard state.principalType == candidate.principalType else { return false }
        }
        if candidate.resourceType >= 0 {
            if state.resourceType == -2 { state.resourceType = heads.typeCode(evaluator.request.resource.type) }
            guard state.resourceType == candidate.resourceType else { return false }
        }
        if checks & HeadIndex.Candidate.actionGroups != 0 {
            guard case .within(let groups) = policy.action else { return false }
            if state.actionRecord == nil { state.actionRecord = .some(evaluator.actionRecord) }
            guard let record = state.actionRecord ?? nil, groups.contains(where: record.isIn) else { return false }
        }
        func rest(_ constraint: EntityConstraint, _ uid: EntityUID) -> Bool {
            switch constraint {
            case .any, .isType: true
            case .equal(let other): uid == other
            case .within(let container), .isTypeWithin(_, let container): evaluator.isIn(uid, container)
            }
        }
        if checks & HeadIndex.Candidate.principalRest != 0, !rest(policy.principal, evaluator.request.principal) { return false }
        if checks & HeadIndex.Candidate.resourceRest != 0, !rest(policy.resource, evaluator.request.resource) { return false }
        return true
    }

    /// The policies whose head matches the request, in policy order, found through the
    /// index (what deciding walks).
    func matchingHeads(_ request: consuming AuthorizationRequest, entities: EntityStore) -> [Int] {
        let evaluator = Evaluator(request, entities: entities)
        let bucket = heads.bucket(evaluator.request)
        var head = HeadState()
        var matching: [Int] = []
        for slot in heads.forbids(bucket).lowerBound..<heads.permits(bucket).upperBound {
            let candidate = heads.listed[slot]
            if listedHeadMatches(candidate, policies[Int(candidate.policy)], evaluator, &head) { matching.append(Int(candidate.policy)) }
        }
        return matching.sorted()
    }

    /// Whether the policy's head matches the request. `actionRecord` is the action's record
    /// once looked up (`nil` before): a decision looks it up at most once, and only for a
    /// policy whose head says `action in` a group that is not the action itself (a
    /// condition that reads the action's record looks it up again).
    func headMatches(_ policy: ParsedPolicy, _ evaluator: borrowing Evaluator, _ actionRecord: inout EntityRecord??) -> Bool {
        func matches(_ constraint: EntityConstraint, _ uid: EntityUID) -> Bool {
            switch constraint {
            case .any: true
            case .equal(let other): uid == other
            case .within(let container): evaluator.isIn(uid, container)
            case .isType(let type): PolicyValue.sameBytes(uid.type, type)
            case .isTypeWithin(let type, let container): PolicyValue.sameBytes(uid.type, type) && evaluator.isIn(uid, container)
            }
        }
        // The action first: it rules out most policies with a comparison or two.
        switch policy.action {
        case .any: break
        case .equal(let action): guard evaluator.request.action == action else { return false }
        case .within(let groups):
            // Equality first: the action record (one lookup) only when no group is the action.
            if !groups.contains(where: { evaluator.request.action == $0 }) {
                if actionRecord == nil { actionRecord = .some(evaluator.actionRecord) }
                guard let record = actionRecord ?? nil, groups.contains(where: record.isIn) else { return false }
            }
        }
        // The request's uids read in place (`evaluator.principal` would copy them).
        return matches(policy.principal, evaluator.request.principal) && matches(policy.resource, evaluator.request.resource)
    }

    /// The first conjunct of `a && b && …` that is false (the whole expression otherwise).
    func firstFalseConjunct(_ expression: Expression, _ evaluator: borrowing Evaluator) -> Expression {
        guard case .binary(.and, let left, let right) = expression.kind else { return expression }
        if (try? evaluator.bool(left)) == false { return firstFalseConjunct(left, evaluator) }
        if (try? evaluator.bool(right)) == false { return firstFalseConjunct(right, evaluator) }
        return expression
    }

    /// Scope names in `context.token.…` set tests and `context.token.since` reads within
    /// `expression`, each once, in the order written.
    static func scopeNames(in expression: Expression) -> [String] {
        var names: [String] = []
        expression.forEachExpression { expression in
            names += expression.testedScopeNames
            switch expression.kind {
            case .has(let inner, let name), .attribute(let inner, let name):
                if inner.tokenField == "since" { names.append(name) }
            default:
                break
            }
        }
        var seen: Set<String> = []
        return names.filter { seen.insert($0).inserted }
    }

    /// The named scopes with their state in the token's snapshot (`nil`: no token).
    static func scopeFacts(_ names: [String], _ snapshot: [String: ScopeStatus?]?) -> [ScopeFact] {
        names.map { name in
            guard let snapshot, let entry = snapshot[name] else { return ScopeFact(scope: name) }
            guard let status = entry else { return ScopeFact(scope: name, state: .granted) }
            return ScopeFact(scope: name, state: status.state, changedAt: status.changedAt, reason: status.reason)
        }
    }
}

/// Whether a policy allows or forbids.
public enum Effect: String, Sendable, Hashable {
    /// Allows, unless a forbid applies.
    case permit
    /// Denies, whatever permits say.
    case forbid
}
