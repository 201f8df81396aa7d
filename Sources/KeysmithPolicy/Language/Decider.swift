import FoundationEssentials
import Keysmith

/// A policy decision point: policies, an optional schema and the entities, deciding one request
/// after another as `keysmith policy check` and `keysmith policy decide` do.
///
/// Each request is checked against the schema when there is one (its action declared, its
/// principal and resource of types the action applies to, its context typed as declared; the
/// principal's token is Keysmith's, never the schema's), then decided; a denial can say what
/// would allow it, and a decision is written as the one JSON document docs/cli.md describes.
///
/// ```swift
/// let decider = PolicyDecider(policies: policies, schema: schema, entities: entities)
/// let answer = try decider.decide(request, explaining: true)
/// if !answer.decision.isAllowed { print(answer.json) }   // {"decision":"deny",…,"wouldAllow":[…]}
/// ```
public struct PolicyDecider: Sendable {
    /// The policies.
    public var policies: Policies
    /// The schema requests are checked against; `nil` checks nothing.
    public var schema: Schema?
    /// The entities (with the schema's action entities added by the caller when wanted).
    public var entities: EntityStore

    /// A decider.
    public init(policies: Policies, schema: Schema? = nil, entities: EntityStore) {
        self.policies = policies
        self.schema = schema
        self.entities = entities
    }

    /// A decision, and for a denial asked to be explained, what would allow it.
    public struct Answer: Sendable {
        /// The decision.
        public var decision: AuthorizationDecision
        /// What would allow a denial: `nil` when not asked for, empty for an allow.
        public var remedies: [Remedy]?

        /// The decision as one JSON document: `decision`, `determining`, `errors`, `unmet`, and
        /// `wouldAllow` when remedies were asked for (docs/cli.md, `policy check --json`).
        public var json: String {
            var out: [UInt8] = []
            appendJSON(to: &out)
            return String(decoding: out, as: UTF8.self)
        }

        /// Appends ``json`` to `out` as UTF-8 (a service answering many requests reuses one
        /// buffer).
        public func appendJSON(to out: inout [UInt8]) {
            decision.appendJSON(remedies: remedies, to: &out)
        }
    }

    /// Checks `request` against the schema, if there is one.
    ///
    /// - Parameter location: Where the request came from, for the problems.
    /// - Throws: ``PolicyDiagnostics`` of kind validation, every problem of the request.
    public func validate(_ request: AuthorizationRequest, location: SourceLocation = SourceLocation(file: "<request>", line: 1, column: 1))
        throws(PolicyDiagnostics)
    {
        try schema?.validate(request, location: location)
    }

    /// Checks `request` against the schema, then decides it.
    ///
    /// - Parameters:
    ///   - request: The request, with the principal's token when there is one.
    ///   - location: Where the request came from, for the problems.
    ///   - explaining: For a denial, also work out what would allow it (slower).
    /// - Returns: The decision, with remedies when `explaining` (empty for an allow).
    /// - Throws: ``PolicyDiagnostics`` when the schema refuses the request; nothing is decided.
    public func decide(_ request: AuthorizationRequest, location: SourceLocation = SourceLocation(file: "<request>", line: 1, column: 1),
                       explaining: Bool = false) throws(PolicyDiagnostics) -> Answer
    {
        try validate(request, location: location)
        let decision = policies.isAuthorized(request, entities: entities)
        guard explaining else { return Answer(decision: decision, remedies: nil) }
        return Answer(decision: decision, remedies: decision.isAllowed ? [] : policies.remedies(for: request, entities: entities))
    }
}

extension AuthorizationDecision {
    /// Appends the decision as one JSON document to `out` (hand-written, straight into the
    /// bytes: a decider answers one per request).
    func appendJSON(remedies: [Remedy]?, to out: inout [UInt8]) {
        func add(_ text: String) { out.append(contentsOf: text.utf8) }
        func string(_ text: String) { JSONOutput.append(text, to: &out) }
        func location(_ location: SourceLocation) {
            add("\"file\":")
            string(location.file)
            add(",\"line\":")
            add(String(location.line))
            add(",\"column\":")
            add(String(location.column))
        }
        func time(_ date: Date?) {
            guard let date, date.timeIntervalSince1970 > 0 else { add("null"); return }
            string(iso8601(date))
        }
        add("{\"decision\":\"")
        add(outcome)
        add("\",\"determining\":[")
        for (index, policy) in determining.enumerated() {
            if index > 0 { add(",") }
            add("{\"id\":")
            string(policy.id)
            add(",\"effect\":\"")
            add(policy.effect.rawValue)
            add("\",")
            location(policy.location)
            add("}")
        }
        add("],\"errors\":[")
        for (index, failure) in failures.enumerated() {
            if index > 0 { add(",") }
            add("{\"policy\":")
            string(failure.policy.id)
            add(",\"kind\":\"")
            add(failure.error.kind.rawValue)
            add("\",\"message\":")
            string(failure.error.message)
            if let place = failure.error.location {
                add(",")
                location(place)
            }
            add("}")
        }
        add("],\"unmet\":[")
        for (index, clause) in unmet.enumerated() {
            if index > 0 { add(",") }
            add("{\"policy\":")
            string(clause.policy.id)
            add(",\"clause\":\"")
            add(clause.clause)
            add("\",\"value\":")
            add(clause.value ? "true" : "false")
            add(",\"text\":")
            string(clause.text)
            add(",")
            location(clause.location)
            add(",\"scopes\":[")
            for (number, fact) in clause.scopes.enumerated() {
                if number > 0 { add(",") }
                add("{\"scope\":")
                string(fact.scope)
                add(",\"state\":")
                if let state = fact.state { string(state.rawValue) } else { add("null") }
                add(",\"changedAt\":")
                time(fact.changedAt)
                add(",\"reason\":")
                if let reason = fact.reason { string(reason) } else { add("null") }
                add("}")
            }
            add("]}")
        }
        add("]")
        if let remedies {
            add(",\"wouldAllow\":[")
            for (index, remedy) in remedies.enumerated() {
                if index > 0 { add(",") }
                let names: [String]
                switch remedy {
                case .grant(let scopes):
                    add("{\"grant\":[")
                    names = scopes
                case .membership(let entities):
                    add("{\"memberOf\":[")
                    names = entities.map(\.description)
                }
                for (number, name) in names.enumerated() {
                    if number > 0 { add(",") }
                    string(name)
                }
                add("]}")
            }
            add("]")
        }
        add("}")
    }
}
