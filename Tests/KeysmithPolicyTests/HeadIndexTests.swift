import Foundation
@testable import KeysmithPolicy
import KeysmithTestSupport
import Testing

/// Deciding walks only the policies the head index lists for the request's action and
/// resource type (HeadIndex.swift); these tests hold it to the definition, matching every head.
@Suite("Policy heads found by index")
struct HeadIndexTests {
    typealias Generator = SplitMix64

    static let actionIDs = ["read", "write", "edit", "delete", "share", "admin"]

    /// Users in teams, documents in folders, actions in groups (edit and delete in write, write
    /// in admin); a document whose type is written with a Kelvin sign (`Key` is not it).
    static func entities() throws -> EntityStore {
        var all: [Entity] = []
        for team in 0..<3 { all.append(Entity(uid: EntityUID(type: "Team", id: "t\(team)"))) }
        for folder in 0..<3 { all.append(Entity(uid: EntityUID(type: "Folder", id: "f\(folder)"))) }
        for user in 0..<6 {
            all.append(Entity(uid: EntityUID(type: "User", id: "u\(user)"), attributes: ["level": .long(Int64(user))],
                              parents: [EntityUID(type: "Team", id: "t\(user % 3)")]))
        }
        for document in 0..<6 {
            all.append(Entity(uid: EntityUID(type: document % 2 == 0 ? "Doc" : "NS::Doc", id: "d\(document)"),
                              parents: [EntityUID(type: "Folder", id: "f\(document % 3)")]))
        }
        all.append(Entity(uid: EntityUID(type: "Key", id: "k1"), parents: [EntityUID(type: "Folder", id: "f0")]))
        all.append(Entity(uid: EntityUID(type: "\u{212A}ey", id: "k1"), parents: [EntityUID(type: "Folder", id: "f0")]))
        let action = { (id: String) in EntityUID(type: "Action", id: id) }
        all.append(Entity(uid: action("admin")))
        all.append(Entity(uid: action("write"), parents: [action("admin")]))
        for id in ["edit", "delete"] { all.append(Entity(uid: action(id), parents: [action("write")])) }
        for id in ["read", "share"] { all.append(Entity(uid: action(id))) }
        return try EntityStore(all)
    }

    static func pick<T>(_ items: [T], _ generator: inout Generator) -> T { items[Int.random(in: 0..<items.count, using: &generator)] }

    /// A random policy: every form of head, a condition that holds, fails or errs.
    static func policy(_ index: Int, _ generator: inout Generator) -> String {
        let principal = pick(["principal", "principal == User::\"u1\"", "principal in Team::\"t0\"", "principal is User",
                              "principal is User in Team::\"t1\"", "principal is Team", "principal == Doc::\"d0\"",
                              "principal is Key"], &generator)
        let action = pick(["action", "action == Action::\"read\"", "action == Action::\"edit\"", "action == Action::\"nope\"",
                           "action in [Action::\"share\", Action::\"delete\"]", "action in Action::\"write\"",
                           "action in [Action::\"admin\"]", "action in [Action::\"read\", Action::\"write\"]"], &generator)
        let resource = pick(["resource", "resource == Doc::\"d2\"", "resource in Folder::\"f0\"", "resource is Doc",
                             "resource is Doc in Folder::\"f1\"", "resource is NS::Doc", "resource is Key",
                             "resource == NS::Doc::\"d1\"", "resource is Folder"], &generator)
        let condition = pick(["", " when { true }", " when { false }", " unless { principal has level && principal.level > 2 }",
                              " when { principal.level > 1 }"], &generator)
        return "@id(\"p\(index)\")\n\(pick(["permit", "forbid"], &generator)) (\(principal), \(action), \(resource))\(condition);"
    }

    static func requests(_ generator: inout Generator, count: Int) -> [AuthorizationRequest] {
        let principals = (0..<6).map { EntityUID(type: "User", id: "u\($0)") }
            + [EntityUID(type: "Team", id: "t1"), EntityUID(type: "User", id: "ghost"), EntityUID(type: "Doc", id: "d0"),
               EntityUID(type: "\u{212A}ey", id: "k1")]
        let resources = (0..<6).map { EntityUID(type: $0 % 2 == 0 ? "Doc" : "NS::Doc", id: "d\($0)") }
            + [EntityUID(type: "Folder", id: "f1"), EntityUID(type: "Key", id: "k1"), EntityUID(type: "\u{212A}ey", id: "k1"),
               EntityUID(type: "Doc", id: "missing"), EntityUID(type: "Other", id: "o")]
        let actions = (actionIDs + ["nope", "unknown"]).map { EntityUID(type: "Action", id: $0) } + [EntityUID(type: "NS::Action", id: "read")]
        return (0..<count).map { _ in
            AuthorizationRequest(principal: pick(principals, &generator), action: pick(actions, &generator), resource: pick(resources, &generator))
        }
    }

    @Test("the index lists exactly the policies whose head matches, in every layout, and decisions do not change")
    func indexAgreesWithEveryHead() throws {
        let entities = try Self.entities()
        var generator = Generator(state: 14)
        var layouts = Set<String>()
        var matched = 0
        for round in 0..<150 {
            let text = (0..<Int.random(in: 1...14, using: &generator)).map { Self.policy($0, &generator) }.joined(separator: "\n")
            let parsed = try Policies(text: text).policies
            // Bound 0: one bucket, every head matched whole (the definition, as deciding used to walk it).
            let reference = Policies(parsed: parsed, listingBound: 0)
            #expect(reference.heads.layout == .whole)
            for bound in [4, 16, 48, 200, HeadIndex.listingBound] {
                let policies = Policies(parsed: parsed, listingBound: bound)
                layouts.insert("\(policies.heads.layout)")
                for request in Self.requests(&generator, count: 40) {
                    let evaluator = Evaluator(request, entities: entities)
                    var actionRecord: EntityRecord?? = nil
                    let expected = parsed.indices.filter { policies.headMatches(parsed[$0], evaluator, &actionRecord) }
                    let listed = policies.matchingHeads(request, entities: entities)
                    #expect(listed == expected, "round \(round), bound \(bound), \(request.principal) \(request.action) \(request.resource)\n\(text)")
                    matched += expected.count
                    let decision = policies.isAuthorized(request, entities: entities)
                    let before = reference.isAuthorized(request, entities: entities)
                    #expect(decision.isAllowed == before.isAllowed && decision.determining == before.determining
                        && decision.failures.map(\.policy) == before.failures.map(\.policy))
                    #expect(policies.isAllowed(request, entities: entities) == before.isAllowed)
                }
            }
        }
        #expect(layouts == ["byActionAndResourceType", "byAction", "whole"])
        #expect(matched > 5_000)
    }

    @Test("an entity type is its bytes: a type written with a Kelvin sign is not `Key`, in a head or with `is`")
    func typesCompareByBytes() throws {
        let entities = try Self.entities()
        let kelvin = EntityUID(type: "\u{212A}ey", id: "k1")
        for text in ["permit (principal, action, resource is Key);", "permit (principal is Key, action, resource);",
                     "permit (principal, action, resource) when { resource is Key };",
                     "permit (principal, action, resource is Key in Folder::\"f0\");"] {
            let policies = try Policies(text: text)
            for (principal, resource) in [(kelvin, kelvin), (EntityUID(type: "User", id: "u1"), kelvin)] {
                let request = AuthorizationRequest(principal: principal, action: EntityUID(type: "Action", id: "read"), resource: resource)
                #expect(!policies.isAuthorized(request, entities: entities).isAllowed, "\(text)")
                #expect(!policies.isAllowed(request, entities: entities), "\(text)")
            }
            let key = EntityUID(type: "Key", id: "k1")
            let request = AuthorizationRequest(principal: key, action: EntityUID(type: "Action", id: "read"), resource: key)
            #expect(policies.isAllowed(request, entities: entities), "\(text)")
        }
    }

    /// More than 16 action and type names (the codes are found by hashing, not a scan), with
    /// `Key` and a Kelvin-sign look-alike among them.
    static let manyTypes = (0..<30).map { "T\($0)" } + ["Key", "\u{212A}ey"]
    static let manyActions = (0..<40).map { "a\($0)" }

    static func manyEntities() throws -> EntityStore {
        var all = [Entity(uid: EntityUID(type: "Group", id: "g0")), Entity(uid: EntityUID(type: "Group", id: "g1"))]
        for (index, type) in manyTypes.enumerated() {
            all.append(Entity(uid: EntityUID(type: type, id: "x"), parents: [EntityUID(type: "Group", id: "g\(index % 2)")]))
        }
        for group in 0..<3 { all.append(Entity(uid: EntityUID(type: "Action", id: "group\(group)"))) }
        for (index, action) in manyActions.enumerated() {
            all.append(Entity(uid: EntityUID(type: "Action", id: action), parents: [EntityUID(type: "Action", id: "group\(index % 3)")]))
        }
        return try EntityStore(all)
    }

    static func manyNamesPolicy(_ index: Int, _ generator: inout Generator) -> String {
        let type = { (generator: inout Generator) in pick(manyTypes.dropLast().map { $0 }, &generator) }  // no look-alike in text
        let action = { (generator: inout Generator) in "Action::\"\(pick(manyActions, &generator))\"" }
        let principal = [
            "principal", "principal is \(type(&generator))", "principal == \(type(&generator))::\"x\"", "principal in Group::\"g0\"",
        ]
        let actions = [
            "action", "action == \(action(&generator))", "action in [\(action(&generator)), \(action(&generator))]",
            "action in Action::\"group\(Int.random(in: 0..<3, using: &generator))\"",
        ]
        let resource = [
            "resource", "resource is \(type(&generator))", "resource == \(type(&generator))::\"x\"",
            "resource is \(type(&generator)) in Group::\"g1\"",
        ]
        let effect = pick(["permit", "forbid"], &generator)
        let condition = pick(["", " when { false }", " when { principal.missing }"], &generator)
        return "@id(\"p\(index)\")\n\(effect) (\(pick(principal, &generator)), \(pick(actions, &generator)), \(pick(resource, &generator)))\(condition);"
    }

    @Test("with more than 16 action and type names the index still lists exactly the matching heads, and Key is not its look-alike")
    func manyNamesAgreeWithEveryHead() throws {
        let entities = try Self.manyEntities()
        var generator = Generator(state: 1_614)
        let uids = Self.manyTypes.map { EntityUID(type: $0, id: "x") } + [EntityUID(type: "Other", id: "x"), EntityUID(type: "T3", id: "y")]
        let actions = Self.manyActions.map { EntityUID(type: "Action", id: $0) } + [EntityUID(type: "Action", id: "unknown")]
        var layouts = Set<String>()
        for round in 0..<40 {
            // Policies written in the type syntax cannot name the look-alike type; the index is
            // built from parsed heads, so swap it in for Key in half of them.
            var parsed = try Policies(text: (0..<Int.random(in: 20...60, using: &generator)).map { Self.manyNamesPolicy($0, &generator) }
                .joined(separator: "\n")).policies
            for index in parsed.indices where index % 2 == 0 {
                let policy = parsed[index]
                parsed[index] = ParsedPolicy(id: policy.id, effect: policy.effect, principal: Self.lookAlike(policy.principal), action: policy.action,
                                             resource: Self.lookAlike(policy.resource), conditions: policy.conditions,
                                             annotations: policy.annotations, location: policy.location, principalLocation: policy.principalLocation,
                                             actionLocation: policy.actionLocation, resourceLocation: policy.resourceLocation)
            }
            let reference = Policies(parsed: parsed, listingBound: 0)
            for bound in [64, 2_000, HeadIndex.listingBound] {
                let policies = Policies(parsed: parsed, listingBound: bound)
                layouts.insert("\(policies.heads.layout)")
                for _ in 0..<60 {
                    let request = AuthorizationRequest(principal: Self.pick(uids, &generator), action: Self.pick(actions, &generator),
                                                       resource: Self.pick(uids, &generator))
                    let evaluator = Evaluator(request, entities: entities)
                    var actionRecord: EntityRecord?? = nil
                    let expected = parsed.indices.filter { policies.headMatches(parsed[$0], evaluator, &actionRecord) }
                    #expect(policies.matchingHeads(request, entities: entities) == expected,
                            "round \(round), bound \(bound), \(request.principal) \(request.action) \(request.resource)")
                    let decision = policies.isAuthorized(request, entities: entities), before = reference.isAuthorized(request, entities: entities)
                    #expect(decision.isAllowed == before.isAllowed && decision.determining == before.determining)
                    #expect(policies.isAllowed(request, entities: entities) == before.isAllowed)
                }
            }
        }
        #expect(layouts == ["byActionAndResourceType", "byAction", "whole"])
    }

    static func lookAlike(_ constraint: EntityConstraint) -> EntityConstraint {
        func swap(_ type: String) -> String { type == "Key" ? "\u{212A}ey" : type }
        return switch constraint {
        case .isType(let type): .isType(swap(type))
        case .isTypeWithin(let type, let uid): .isTypeWithin(swap(type), uid)
        case .equal(let uid): .equal(EntityUID(type: swap(uid.type), id: uid.id))
        case .any, .within: constraint
        }
    }

    @Test("many distinct action and type names make a coarser layout, not a bucket per pair", arguments: [200, 300, 10_000])
    func bucketCountIsBounded(policyCount: Int) throws {
        // Each policy names its own action and resource type: few listings, but (n + 1)² pairs.
        let text = (0..<policyCount).map { "permit (principal, action == Action::\"a\($0)\", resource is T\($0));" }.joined(separator: "\n")
        let policies = try Policies(text: text)
        let pairs = (policyCount + 1) * (policyCount + 1)
        let bound = max(HeadIndex.listingBound, 8 * policyCount)
        #expect(policies.heads.layout == (pairs <= bound ? .byActionAndResourceType : .byAction), "\(policyCount) policies")
        #expect(policies.heads.listed.count == policyCount)
        let entities = try EntityStore([])
        for probe in [0, policyCount / 2, policyCount - 1] {
            let request = AuthorizationRequest(principal: EntityUID(type: "User", id: "u"), action: EntityUID(type: "Action", id: "a\(probe)"),
                                               resource: EntityUID(type: "T\(probe)", id: "r"))
            #expect(policies.isAllowed(request, entities: entities))
            #expect(policies.matchingHeads(request, entities: entities) == [probe])
            let other = AuthorizationRequest(principal: request.principal, action: request.action, resource: EntityUID(type: "T\(probe + 1)", id: "r"))
            #expect(!policies.isAllowed(other, entities: entities))
        }
    }
}
