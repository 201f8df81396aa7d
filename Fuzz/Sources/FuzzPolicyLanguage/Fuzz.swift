import Foundation
import FuzzDriver
import KeysmithPolicy

/// The example schema and entities every fuzzed policy text is validated and evaluated against.
let schema = try! Schema(text: """
    entity Group { public: Bool };
    entity User in [Group] { level: Long, tags: Set<String>, manager?: User };
    action view, post appliesTo { principal: [User], resource: [Group], context: { ip: ipaddr, now: datetime } };
    """)
let entities = try! EntityStore([
    Entity(uid: EntityUID(type: "Group", id: "g"), attributes: ["public": .bool(true)]),
    Entity(uid: EntityUID(type: "User", id: "u"), attributes: ["level": .long(3), "tags": .set(PolicyValueSet([.string("a")]))],
           parents: [EntityUID(type: "Group", id: "g")]),
] + schema.actionEntities)

/// Every reader of the policy language gets the same bytes: policies (as text and as Cedar's JSON
/// policy format), schemas, entities, requests, decide lines and test files. Policies that parse,
/// in either form, are validated, evaluated and printed.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let text = String(decoding: bytes, as: UTF8.self)
    for case let policies? in [try? Policies(text: text), try? Policies(json: bytes)] {
        _ = try? schema.validate(policies)
        let request = AuthorizationRequest(principal: EntityUID(type: "User", id: "u"), action: EntityUID(type: "Action", id: "view"),
                                           resource: EntityUID(type: "Group", id: "g"),
                                           context: ["ip": .ip(IPAddress("10.0.0.1")!), "now": .datetime(0)])
        let decision = policies.isAuthorized(request, entities: entities)
        _ = decision.description
        _ = policies.remedies(for: request, entities: entities)
        // What `policy format` prints reads back as policies that decide the same, and prints
        // the same from then on: the text at once; the JSON form once its ids have become `@id`
        // annotations (reading a policy set keeps each key as `@id`).
        func same(_ other: Policies) -> Bool {
            let again = other.isAuthorized(request, entities: entities)
            return again.isAllowed == decision.isAllowed && again.determining.map(\.id) == decision.determining.map(\.id)
                && again.failures.map(\.policy.id) == decision.failures.map(\.policy.id)
        }
        let formatted = policies.formatted
        guard let reread = try? Policies(text: formatted), reread.formatted == formatted, same(reread),
              let keyed = try? Policies(json: Array(policies.json.utf8)), same(keyed),
              (try? Policies(json: Array(keyed.json.utf8)).json) == keyed.json else {
            fatalError("printed policies do not read back as the same policies")
        }
    }
    _ = try? Schema(text: text)
    _ = try? EntityStore(json: bytes)
    _ = try? AuthorizationRequest(json: bytes)
    _ = try? AuthorizationRequest.decideLine(bytes, line: 1)
    _ = try? PolicyTestSuite(json: bytes, file: "fuzz")
    return 0
}

@_cdecl("FuzzPolicyLanguage_main")
public func fuzzMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runFuzzer(argc, argv, fuzz)
}
