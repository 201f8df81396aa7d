import Foundation
import Keysmith
import KeysmithTokens
import KeysmithVault
import Testing

/// The directory of the built products (the test runner sits beside `vault-stress`).
let productsDirectory: String = {
    let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    var url = URL(fileURLWithPath: executable).deletingLastPathComponent()
    // On Linux the runner is `.build/<config>/<Package>PackageTests.xctest`.
    if url.pathExtension == "xctest" { url.deleteLastPathComponent() }
    return url.path
}()

/// Runs `vault-stress` and returns the process and a pipe of its stdout.
func startStress(_ mode: String, vault: String, keyfile: String, prefix: String, count: Int) throws -> (Process, Pipe) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: productsDirectory + "/vault-stress")
    process.arguments = [mode, vault, keyfile, prefix, String(count)]
    let output = Pipe()
    process.standardOutput = output
    process.standardError = FileHandle.nullDevice
    try process.run()
    return (process, output)
}

/// What the writer's acknowledgements promise: the last acknowledged state of each key, and
/// the keys of the one operation in flight at the kill (either outcome is allowed for those).
struct Acknowledged {
    var state: [String: String?] = [:]
    var inFlight: Set<String> = []
    /// Whether the writer's token was acknowledged, and which scope revocations were.
    var tokenImported = false
    var revoked: Set<String> = []
    var revokeInFlight: String?

    mutating func read(_ output: String) {
        var pending: [(String, String?)] = []
        for line in output.split(separator: "\n") {
            let words = line.split(separator: " ").map(String.init)
            if words.count >= 2, words[1] == "token" {
                if words[0] == "ack" { tokenImported = true }
                continue
            }
            if words.count == 4, words[1] == "revoke" {
                if words[0] == "begin" { revokeInFlight = words[3] } else { revoked.insert(words[3]); revokeInFlight = nil }
                continue
            }
            if words.count >= 2, words[1] == "keys" { continue }
            let parts = line.split(separator: " ", maxSplits: 1).map(String.init)
            guard parts.count == 2 else { continue }
            let operations: [(String, String?)] = parts[1].components(separatedBy: " | ").map { item in
                let words = item.split(separator: " ").map(String.init)
                return words[0] == "put" ? (words[1], words[2]) : (words[1], nil)
            }
            if parts[0] == "begin" {
                pending = operations
            } else if parts[0] == "ack" {
                for (key, value) in operations { state[key] = .some(value) }
                pending = []
            }
        }
        inFlight = Set(pending.map(\.0))
    }
}

@Suite("file vault: processes", .serialized)
struct ProcessTests {
    @Test("SIGKILL at random instants loses no acknowledged write and leaves a vault that opens")
    func crashConsistency() throws {
        let directory = TemporaryDirectory()
        let keyfile = directory.sub("keyfile")
        try VaultCredential.generateKeyfile(at: keyfile)
        let path = directory.sub("vault")
        _ = try FileVault.create(at: path, credential: .keyfile(at: keyfile))

        var everything: [String: String?] = [:]
        var kills = 0, acknowledged = 0, lost = 0
        // A short run in the test command; KEYSMITH_CRASH_ROUNDS=500 for a long one.
        let rounds = Int(ProcessInfo.processInfo.environment["KEYSMITH_CRASH_ROUNDS"] ?? "") ?? 30
        for round in 0..<rounds {
            let (process, output) = try startStress("write", vault: path, keyfile: keyfile, prefix: "r\(round)", count: 100_000)
            usleep(UInt32.random(in: 5_000...120_000))
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            kills += 1
            let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            var acks = Acknowledged()
            acks.read(text)

            let vault = try FileVault.open(at: path, credential: .keyfile(at: keyfile))
            #expect(try vault.verify().isEmpty, "round \(round): the vault reports damage after a kill")
            for (account, expected) in acks.state where !acks.inFlight.contains(account) {
                acknowledged += 1
                let secret = try vault.read(.genericPassword(service: "stress", account: account))?.secret
                if secret != expected.map({ Data($0.utf8) }) {
                    lost += 1
                    Issue.record("round \(round): \(account) should be \(expected ?? "absent")")
                }
                everything[account] = expected
            }
            // The token and every acknowledged revocation survived, and the audit chain is whole.
            if acks.tokenImported {
                let keeper = TokenKeeper(store: vault)
                let token = try #require(try keeper.token(service: "stress-token", account: "r\(round)"), "round \(round): the token was lost")
                for scope in acks.revoked {
                    acknowledged += 1
                    if token.scopes[try Scope(scope)]?.state != .revoked {
                        lost += 1
                        Issue.record("round \(round): the revocation of \(scope) was lost")
                    }
                }
                #expect(try keeper.verifyAuditLog().isIntact, "round \(round): the audit chain is broken")
            }
        }
        // Every acknowledged write of every round is still there at the end.
        let vault = try FileVault.open(at: path, credential: .keyfile(at: keyfile))
        for (account, expected) in everything {
            #expect(try vault.read(.genericPassword(service: "stress", account: account))?.secret == expected.map { Data($0.utf8) })
        }
        print("crash consistency: \(kills) kills survived, \(acknowledged) acknowledged writes checked, \(lost) lost")
        #expect(acknowledged > 100)
        #expect(lost == 0)
    }

    @Test("several processes writing one vault at once lose nothing")
    func concurrentProcesses() throws {
        let directory = TemporaryDirectory()
        let keyfile = directory.sub("keyfile")
        try VaultCredential.generateKeyfile(at: keyfile)
        let path = directory.sub("vault")
        _ = try FileVault.create(at: path, credential: .keyfile(at: keyfile))

        let writers = try (0..<4).map { try startStress("shared", vault: path, keyfile: keyfile, prefix: "p\($0)", count: 150) }
        // Meanwhile, this process reads: every value it sees is whole.
        let reader = try FileVault.open(at: path, credential: .keyfile(at: keyfile))
        var reads = 0
        while writers.contains(where: { $0.0.isRunning }) {
            if let shared = try reader.read(.genericPassword(service: "stress", account: "shared")) {
                let text = String(decoding: shared.secret, as: UTF8.self)
                #expect(text.range(of: #"^p[0-3]-[0-9]+$"#, options: .regularExpression) != nil, "torn read: \(text)")
                reads += 1
            }
        }
        var expected: [String: String?] = [:]
        for (process, output) in writers {
            process.waitUntilExit()
            #expect(process.terminationStatus == 0)
            let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            #expect(text.hasSuffix("done\n"))
            var acks = Acknowledged()
            acks.read(text)
            expected.merge(acks.state) { $1 }
        }
        let vault = try FileVault.open(at: path, credential: .keyfile(at: keyfile))
        for (account, value) in expected {
            #expect(try vault.read(.genericPassword(service: "stress", account: account))?.secret == value.map { Data($0.utf8) })
        }
        let shared = try #require(try vault.read(.genericPassword(service: "stress", account: "shared")))
        #expect(["p0-149", "p1-149", "p2-149", "p3-149"].contains(String(decoding: shared.secret, as: UTF8.self)))
        #expect(try vault.verify().isEmpty)
        #expect(reads > 0)
    }
}
