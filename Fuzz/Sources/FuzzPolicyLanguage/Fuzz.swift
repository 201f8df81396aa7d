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

/// Every reader of the policy language gets the same bytes: policies, schemas, entities, requests,
/// decide lines and test files. Policies that parse are validated and evaluated.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let text = String(decoding: bytes, as: UTF8.self)
    if let policies = try? Policies(text: text) {
        _ = try? schema.validate(policies)
        let request = AuthorizationRequest(principal: EntityUID(type: "User", id: "u"), action: EntityUID(type: "Action", id: "view"),
                                           resource: EntityUID(type: "Group", id: "g"),
                                           context: ["ip": .ip(IPAddress("10.0.0.1")!), "now": .datetime(0)])
        _ = policies.isAuthorized(request, entities: entities).description
        _ = policies.remedies(for: request, entities: entities)
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
