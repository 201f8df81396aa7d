import Foundation
@testable import KeysmithPolicy
import Testing

/// Differential tests against Cedar itself: random policies, entities and requests, decided by
/// cedarpy (PyPI) and by Keysmith. Every decision, every set of deciding policies and every set
/// of policies in error must agree, except where Keysmith fails closed on purpose: a forbid in
/// error denies.
///
/// `KEYSMITH_ORACLE_SCENARIOS` (default 300, 25 requests each) runs more.
@Suite("Policy language: Cedar oracle")
struct OracleTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Oracle/cedar_oracle.py").path

    static func oracle(seed: Int, scenarios: Int, requests: Int, typed: Bool = false) throws -> [Located] {
        try jsonLines(python: script, [String(seed), String(scenarios), String(requests)] + (typed ? ["typed"] : []))
    }

    /// Runs a Python script of Oracle/ and reads its output, one JSON document per line.
    static func jsonLines(python script: String, _ arguments: [String]) throws -> [Located] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script] + arguments
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw OracleFailure(message: "\(URL(fileURLWithPath: script).lastPathComponent) exited \(process.terminationStatus): is cedarpy installed (scripts/bootstrap.sh)?")
        }
        return try data.split(separator: UInt8(ascii: "\n")).map { try JSONReader.parse(Array($0)) }
    }

    struct OracleFailure: Error { var message: String }

    static func strings(_ value: Located?) -> [String] {
        guard case .array(let items)? = value?.value else { return [] }
        return items.compactMap { if case .string(let text) = $0.value { text } else { nil } }
    }

    @Test("random policies decide as Cedar decides, errors included")
    func agreesWithCedar() throws {
        let scenarios = ProcessInfo.processInfo.environment["KEYSMITH_ORACLE_SCENARIOS"].flatMap(Int.init) ?? 300
        var compared = 0, allowed = 0, errored = 0, failClosed = 0, skipped = 0, scenarioCount = 0, refusedEntities = 0, clausesCompared = 0
        for scenario in try Self.oracle(seed: 20261122, scenarios: scenarios, requests: 25) {
            if case .string(let refused)? = scenario["refused"]?.value {
                #expect(throws: PolicyDiagnostics.self, "Cedar refuses this, and so must Keysmith:\n\(refused)") {
                    try Policies(text: refused, file: "oracle")
                }
                skipped += 1
                continue
            }
            if let refused = scenario["refusedEntities"] {
                #expect(throws: PolicyDiagnostics.self, "Cedar refuses these entities, and so must Keysmith") {
                    try EntityStore(json: Array(JSONOut.encode(refused.value).utf8))
                }
                refusedEntities += 1
                continue
            }
            guard case .string(let text)? = scenario["policies"]?.value, let entitiesValue = scenario["entities"],
                  case .array(let requests)? = scenario["requests"]?.value
            else { throw OracleFailure(message: "a malformed oracle line") }
            scenarioCount += 1
            let policies = try Policies(text: text, file: "oracle")
            // The same policies through Cedar's JSON form (as cedarpy writes it), through
            // Keysmith's own JSON, and printed back as text: every form decides alike.
            let cedarJSON = try Policies(json: Array(JSONOut.encode(scenario["json"]!.value).utf8), file: "cedar.json")
            let ownJSON = try Policies(json: Array(policies.json.utf8), file: "own.json")
            let printed = try Policies(text: policies.formatted, file: "printed")
            #expect(ownJSON.ids == policies.ids && printed.ids == policies.ids)
            #expect(cedarJSON.ids.sorted() == policies.ids.sorted())
            let entities = try EntityStore(json: Array(JSONOut.encode(entitiesValue.value).utf8))
            for item in requests {
                let request = try AuthorizationRequest.parseReportingAll(item, file: "oracle", allowing: ["decision", "reasons", "errors"], tokenInContext: true)
                let decision = policies.isAuthorized(request, entities: entities)
                for (form, other) in [("Cedar's JSON", cedarJSON), ("Keysmith's JSON", ownJSON), ("printed text", printed)] {
                    let again = other.isAuthorized(request, entities: entities)
                    #expect(again.isAllowed == decision.isAllowed && again.determining.map(\.id).sorted() == decision.determining.map(\.id).sorted()
                            && again.failures.map(\.policy.id).sorted() == decision.failures.map(\.policy.id).sorted(),
                            "\(form) decides differently:\n\(text)\nas \(other.formatted)")
                }
                let expected = Self.strings(item["decision"]).first ?? (item["decision"].flatMap { if case .string(let d) = $0.value { d } else { nil } } ?? "?")
                let reasons = Set(Self.strings(item["reasons"]))
                let errors = Set(Self.strings(item["errors"]))
                let context = "policies:\n\(text)\nrequest: \(request.principal) \(request.action) \(request.resource)"
                #expect(Set(decision.failures.map(\.policy.id)) == errors, "\(context)\nours: \(decision)")
                if decision.failures.contains(where: { $0.policy.effect == .forbid }) {
                    #expect(!decision.isAllowed, "\(context)")
                    if expected == "allow" { failClosed += 1 }
                } else {
                    #expect(decision.outcome == expected, "\(context)\nours: \(decision)")
                    #expect(Set(decision.determining.map(\.id)) == reasons, "\(context)\nours: \(decision)")
                }
                // Every clause, compiled (as decisions use it) and read by the evaluator from its
                // syntax tree: the same value, or the same error (kind, message and location).
                let evaluator = Evaluator(request, entities: entities)
                for policy in policies.policies {
                    for (index, clause) in policy.conditions.enumerated() {
                        let compiled = Result { () throws(EvaluationError) -> Bool in try policy.compiled.clauses[index].bool(evaluator) }
                        let read = Result { () throws(EvaluationError) -> Bool in try evaluator.bool(clause.body) }
                        #expect(compiled == read, "\(clause.body.text)")
                        clausesCompared += 1
                    }
                }
                #expect(policies.isAllowed(request, entities: entities) == decision.isAllowed, "isAllowed differs: \(context)")
                compared += 1
                if expected == "allow" { allowed += 1 }
                if !errors.isEmpty { errored += 1 }
            }
        }
        print("cedar oracle: \(compared) requests compared, \(allowed) allowed by Cedar, \(errored) with errors, \(failClosed) denied where Cedar allowed past a failed forbid, \(skipped) policy texts and \(refusedEntities) entity sets both refused")
        #expect(compared == scenarioCount * 25 && scenarioCount >= scenarios / 2)
        #expect(allowed > compared / 50)
        #expect(errored > compared / 50)
        #expect(clausesCompared > compared)
    }
}

/// Writes a parsed JSON value back as text (the oracle's entities go through the public reader).
enum JSONOut {
    static func encode(_ value: JSONValue) -> String { JSONOutput.render(value) }
}

/// The type checker against Cedar's validator, and its promise: a policy set that validates,
/// with entities and requests that validate, never meets a type error when it is evaluated.
@Suite("Policy language: schema validation against Cedar")
struct ValidationOracleTests {
    @Test("policies the type checker accepts never meet a type error; acceptance agrees with Cedar's validator")
    func soundAndAgrees() throws {
        let scenarios = ProcessInfo.processInfo.environment["KEYSMITH_ORACLE_SCENARIOS"].flatMap(Int.init) ?? 300
        var policiesCompared = 0, agreed = 0, accepted = 0, requestsEvaluated = 0
        var disagreements: [String] = []
        for scenario in try OracleTests.oracle(seed: 7, scenarios: scenarios, requests: 10, typed: true) {
            guard case .string(let schemaText)? = scenario["schema"]?.value, case .array(let each)? = scenario["each"]?.value,
                  case .string(let text)? = scenario["policies"]?.value, let entitiesValue = scenario["entities"],
                  case .array(let requests)? = scenario["requests"]?.value
            else { continue }
            let schema = try Schema(text: schemaText, file: "schema")
            for item in each {
                guard case .string(let policyText)? = item["text"]?.value, case .bool(let cedarValid)? = item["valid"]?.value else { continue }
                let ours: Bool
                do {
                    try schema.validate(try Policies(text: policyText, file: "p"))
                    ours = true
                } catch {
                    ours = false
                }
                policiesCompared += 1
                if ours == cedarValid { agreed += 1 } else { disagreements.append("cedar \(cedarValid), ours \(ours):\n\(policyText)\n\(item["errors"].map { JSONOut.encode($0.value) } ?? "")") }
            }
            let policies = try Policies(text: text, file: "oracle")
            guard (try? schema.validate(policies)) != nil else { continue }
            accepted += 1
            var entities = try EntityStore(json: Array(JSONOut.encode(entitiesValue.value).utf8))
            try schema.validate(entities)
            try entities.add(schema.actionEntities.filter { entities[$0.uid] == nil })
            for item in requests {
                var request = try AuthorizationRequest.parseReportingAll(item, file: "oracle", allowing: ["decision", "reasons", "errors"], tokenInContext: true)
                request.context["token"] = nil
                try schema.validate(request)
                request = try AuthorizationRequest.parseReportingAll(item, file: "oracle", allowing: ["decision", "reasons", "errors"], tokenInContext: true)
                let decision = policies.isAuthorized(request, entities: entities)
                requestsEvaluated += 1
                for failure in decision.failures {
                    #expect(failure.error.kind == .missingEntity || failure.error.kind == .overflow,
                            "a validated policy met \(failure.error.kind): \(failure)\n\(text)")
                }
            }
        }
        print("validation oracle: \(policiesCompared) policies, \(agreed) judged as Cedar judges them; \(accepted) policy sets accepted, \(requestsEvaluated) requests evaluated without a type error")
        for disagreement in disagreements.prefix(5) { print(disagreement) }
        #expect(disagreements.isEmpty)
        #expect(accepted > 0 && requestsEvaluated >= accepted * 10)
    }
}
