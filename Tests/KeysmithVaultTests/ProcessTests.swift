import Foundation
import Keysmith
import KeysmithTokens
import KeysmithVault
import KeysmithTestSupport
import Synchronization
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
func startStress(_ mode: String, vault: String, keyfile: String, prefix: String, count: Int) throws -> (SpawnedProcess, Pipe) {
    try startStress([mode, vault, keyfile, prefix, String(count)])
}

/// Runs `vault-stress` with `arguments` (and `environment` added to this process's).
func startStress(_ arguments: [String], environment: [String: String] = [:]) throws -> (SpawnedProcess, Pipe) {
    let output = Pipe()
    // Standard error goes to a file a failed test can show: `stressErrors(process)`.
    let errors = FileManager.default.temporaryDirectory.appendingPathComponent("vault-stress-\(UUID().uuidString).err").path
    let process = try SpawnedProcess(productsDirectory + "/vault-stress", arguments,
                                     environment: ProcessInfo.processInfo.environment.merging(environment) { $1 },
                                     standardOutput: .descriptor(output.fileHandleForWriting.fileDescriptor), standardError: .file(errors))
    try output.fileHandleForWriting.close()
    stressErrorFiles.withLock { $0[process.processIdentifier] = errors }
    return (process, output)
}

/// Runs `vault-stress` with `arguments`, armed to end (status 86, as a SIGKILL would) just before
/// the `step`th file-system step of the vault's durable writes; `true` when it finished first.
/// Any other end is a test failure.
func runStressKilled(at step: Int, _ arguments: [String]) throws -> Bool {
    let run = try startStress(arguments, environment: ["KEYSMITH_FAULT_EXIT_AT": String(step)])
    run.0.waitUntilExit()
    let finished = run.0.terminationStatus == 0
    #expect(finished || run.0.terminationStatus == 86, "step \(step): \(stressErrors(run.0))")
    return finished
}

/// What a `vault-stress` process wrote to standard error.
func stressErrors(_ process: SpawnedProcess) -> String {
    guard let path = stressErrorFiles.withLock({ $0[process.processIdentifier] }) else { return "" }
    defer { try? FileManager.default.removeItem(atPath: path) }
    return (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
}

let stressErrorFiles = Mutex<[Int32: String]>([:])

/// What the writer's acknowledgements promise: the last acknowledged state of each key, and
/// the keys of the one operation in flight at the kill (either outcome is allowed for those).
struct Acknowledged {
    var state: [String: String?] = [:]
    var inFlight: Set<String> = []
    /// The batch in flight at the kill: each key and the value it would get (`nil`: deleted).
    var inFlightBatch: [(key: String, value: String?)] = []
    /// Whether the writer's token was acknowledged, and which scope revocations were.
    var tokenImported = false
    var revoked: Set<String> = []
    var revokeInFlight: String?

    mutating func read(_ output: String) {
        var pending: [(String, String?)] = []
        // Only whole lines: a kill can cut the last one short (its batch had not started).
        var lines = output.split(separator: "\n", omittingEmptySubsequences: false)
        lines.removeLast()
        for line in lines {
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
            if words.count == 4, words[1] == "bulk", let count = Int(words[3]) {
                // "bulk PREFIX COUNT": bulk-N set to PREFIX-bulk-N for every N below COUNT.
                let operations: [(String, String?)] = (0..<count).map { ("bulk-\($0)", "\(words[2])-bulk-\($0)") }
                if words[0] == "begin" {
                    pending = operations
                } else {
                    for (key, value) in operations { state[key] = .some(value) }
                    pending = []
                }
                continue
            }
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
        inFlightBatch = pending.map { (key: $0.0, value: $0.1) }
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
            // A writer and, every other round, a process that compacts, re-keys and re-wraps the
            // keys at the same time; each is killed at its own random instant.
            // Every third round the writer also runs a bulk batch (compacted at once), so that
            // some kills land inside one; the others keep many small acknowledged writes.
            let (process, output) = try startStress(round % 3 == 2 ? "write-bulk" : "write", vault: path, keyfile: keyfile,
                                                    prefix: "r\(round)", count: 100_000)
            let maintainer = round % 2 == 1 ? try startStress("maintain", vault: path, keyfile: keyfile, prefix: "m", count: 100_000) : nil
            let first = UInt32.random(in: 5_000...120_000), second = UInt32.random(in: 5_000...120_000)
            usleep(min(first, second))
            kill((first <= second ? process : maintainer?.0 ?? process).processIdentifier, SIGKILL)
            usleep(max(first, second) - min(first, second))
            kill(process.processIdentifier, SIGKILL)
            if let maintainer { kill(maintainer.0.processIdentifier, SIGKILL); maintainer.0.waitUntilExit(); kills += 1 }
            process.waitUntilExit()
            kills += 1
            let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            var acks = Acknowledged()
            acks.read(text)

            let vault = try FileVault.open(at: path, credential: .keyfile(at: keyfile))
            // A kill between the two header writes leaves a copy of another generation, which the
            // open finishes: verify finds nothing at all.
            let damage = try vault.verify().filter { !$0.isSuperseded }
            #expect(damage.isEmpty, "round \(round): the vault reports damage after a kill: \(damage)")
            // The batch in flight at the kill is all or nothing, a bulk batch included.
            if !acks.inFlightBatch.isEmpty {
                var applied = 0, untouched = 0
                for (account, value) in acks.inFlightBatch {
                    let read = try vault.read(.genericPassword(service: "stress", account: account)).map { String(decoding: $0.secret, as: UTF8.self) }
                    let before: String?
                    if let acked = acks.state[account] { before = acked } else if let known = everything[account] { before = known } else { before = nil }
                    if read == value { applied += 1 } else if read == before { untouched += 1 }
                    everything[account] = read
                }
                #expect(applied == acks.inFlightBatch.count || untouched == acks.inFlightBatch.count,
                        "round \(round): the batch in flight was torn: \(applied) applied, \(untouched) untouched of \(acks.inFlightBatch.count)")
            }
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
        // The harness did its job: writers got writes acknowledged before most kills (a slow
        // or busy machine acknowledges fewer in the same kill windows).
        #expect(acknowledged > 2 * rounds)
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
            #expect(process.terminationStatus == 0, "\(stressErrors(process))")
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

    @Test("a passphrase change and a rekey run at once leave a vault that opens with the new credential", arguments: 0..<10)
    func passwdRacesRekey(trial: Int) throws {
        let directory = TemporaryDirectory()
        let old = directory.sub("old"), new = directory.sub("new")
        try VaultCredential.generateKeyfile(at: old)
        try VaultCredential.generateKeyfile(at: new)
        let path = directory.sub("vault")
        let vault = try FileVault.create(at: path, credential: .keyfile(at: old))
        try vault.perform((0..<200).map { .create(ItemAttributes(key: .genericPassword(service: "s", account: "a\($0)")), secret: Data("v\($0)".utf8)) })
        let passwd = try startStress(["passwd", path, old, new])
        let rekey = try startStress(["rekey", path, old])
        passwd.0.waitUntilExit()
        rekey.0.waitUntilExit()
        // The passphrase change always succeeds; the rekey succeeds, or refuses cleanly because
        // its credential no longer opens the vault (4: changed after it opened; 5: before).
        #expect(passwd.0.terminationStatus == 0, "\(stressErrors(passwd.0))")
        #expect([0, 4, 5].contains(rekey.0.terminationStatus), "\(stressErrors(rekey.0))")
        let reopened = try FileVault.open(at: path, credential: .keyfile(at: new))
        for index in 0..<200 {
            #expect(try reopened.read(.genericPassword(service: "s", account: "a\(index)"))?.secret == Data("v\(index)".utf8))
        }
        #expect(try reopened.verify().filter { !$0.isSuperseded }.isEmpty)
        #expect(throws: KeysmithError.self) { try FileVault.open(at: path, credential: .keyfile(at: old)) }
    }

    @Test("a writer opened before a passphrase change and a rekey never acknowledges a write it cannot keep")
    func staleWriterAfterPasswdAndRekey() throws {
        let directory = TemporaryDirectory()
        let old = directory.sub("old"), new = directory.sub("new")
        try VaultCredential.generateKeyfile(at: old)
        try VaultCredential.generateKeyfile(at: new)
        let path = directory.sub("vault")
        let writer = try FileVault.create(at: path, credential: .keyfile(at: old))
        try writer.create(ItemAttributes(key: .genericPassword(service: "s", account: "before")), secret: Data("1".utf8))
        // Another process changes the credential: the writer's data key is still the current one.
        let passwd = try startStress(["passwd", path, old, new])
        passwd.0.waitUntilExit()
        #expect(passwd.0.terminationStatus == 0)
        try writer.create(ItemAttributes(key: .genericPassword(service: "s", account: "after-passwd")), secret: Data("2".utf8))
        // Then re-keys under the new credential: the writer must refuse, not seal under a retired key.
        let rekey = try startStress(["rekey", path, new])
        rekey.0.waitUntilExit()
        #expect(rekey.0.terminationStatus == 0)
        let refused = #expect(throws: KeysmithError.self) {
            try writer.create(ItemAttributes(key: .genericPassword(service: "s", account: "after-rekey")), secret: Data("3".utf8))
        }
        #expect(refused?.code == .storeLocked)
        let reopened = try FileVault.open(at: path, credential: .keyfile(at: new))
        #expect(try reopened.read(.genericPassword(service: "s", account: "before"))?.secret == Data("1".utf8))
        #expect(try reopened.read(.genericPassword(service: "s", account: "after-passwd"))?.secret == Data("2".utf8))
        #expect(try reopened.read(.genericPassword(service: "s", account: "after-rekey")) == nil)
        try reopened.compact()
        try reopened.rekey()
        #expect(try reopened.verify().filter { !$0.isSuperseded }.isEmpty)
    }

    @Test("killing a passphrase change at each of its file-system steps leaves exactly one credential that opens the vault")
    func passwdKilledAtEveryStep() throws {
        let directory = TemporaryDirectory()
        let old = directory.sub("old"), new = directory.sub("new")
        try VaultCredential.generateKeyfile(at: old)
        try VaultCredential.generateKeyfile(at: new)
        let pristine = directory.sub("pristine")
        let vault = try FileVault.create(at: pristine, credential: .keyfile(at: old), anchorDirectory: nil)
        try vault.perform((0..<20).map { .create(ItemAttributes(key: .genericPassword(service: "s", account: "a\($0)")), secret: Data("v\($0)".utf8)) })
        var step = 1
        var sawOld = false, sawNew = false
        while true {
            let path = directory.sub("vault-\(step)")
            try FileManager.default.copyItem(atPath: pristine, toPath: path)
            let finished = try runStressKilled(at: step, ["passwd", path, old, new])
            let withOld = try? FileVault.open(at: path, credential: .keyfile(at: old), anchorDirectory: nil)
            let withNew = try? FileVault.open(at: path, credential: .keyfile(at: new), anchorDirectory: nil)
            #expect((withOld == nil) != (withNew == nil), "step \(step): old opens \(withOld != nil), new opens \(withNew != nil)")
            if withOld != nil { sawOld = true }
            if withNew != nil { sawNew = true }
            for opened in [withOld, withNew].compactMap({ $0 }) {
                #expect(try opened.read(.genericPassword(service: "s", account: "a7"))?.secret == Data("v7".utf8))
                #expect(try opened.verify().filter { !$0.isSuperseded }.isEmpty, "step \(step)")
                // The next write heals the header copies.
                try opened.create(ItemAttributes(key: .genericPassword(service: "s", account: "after")), secret: Data("x".utf8))
                #expect(try opened.verify().filter { !$0.isSuperseded }.isEmpty, "step \(step) after a write")
            }
            if finished { break }
            step += 1
            try #require(step < 100)
        }
        print("passwd fault injection: killed at each of \(step - 1) steps, then finished")
        #expect(sawOld && sawNew)
        #expect(step > 6)
    }

    @Test("a bulk batch killed at each of its file-system steps is all or nothing, and the vault opens clean")
    func bulkBatchKilledAtEveryStep() throws {
        let directory = TemporaryDirectory()
        let keyfile = directory.sub("keyfile")
        try VaultCredential.generateKeyfile(at: keyfile)
        let pristine = directory.sub("pristine")
        let vault = try FileVault.create(at: pristine, credential: .keyfile(at: keyfile), anchorDirectory: nil)
        // A snapshot, then two logs on top: the bulk batch merges over both.
        try vault.perform((0..<300).map { .create(ItemAttributes(key: .genericPassword(service: "s", account: "a\($0)")), secret: Data("v\($0)".utf8)) })
        try vault.compact()
        try vault.perform((0..<50).map { .upsert(ItemAttributes(key: .genericPassword(service: "stress", account: "bulk-\($0)")), secret: Data("old".utf8)) })
        try vault.perform([.delete(.genericPassword(service: "s", account: "a1"))])
        let count = 4200
        var step = 1
        var sawBefore = false, sawAfter = false
        while true {
            let path = directory.sub("vault-\(step)")
            try FileManager.default.copyItem(atPath: pristine, toPath: path)
            // Each copy is the same vault: each gets its own rollback anchor.
            let run = try startStress(["bulk", path, keyfile, "new", String(count)],
                                      environment: ["KEYSMITH_FAULT_EXIT_AT": String(step), "KEYSMITH_ANCHOR_DIR": directory.sub("anchors-\(step)")])
            run.0.waitUntilExit()
            let finished = run.0.terminationStatus == 0
            #expect(finished || run.0.terminationStatus == 86, "step \(step): \(stressErrors(run.0))")
            let opened = try FileVault.open(at: path, credential: .keyfile(at: keyfile), anchorDirectory: nil)
            #expect(try opened.verify().filter { !$0.isSuperseded }.isEmpty, "step \(step)")
            let values = try (0..<count).map { index in
                try opened.read(.genericPassword(service: "stress", account: "bulk-\(index)")).map { String(decoding: $0.secret, as: UTF8.self) }
            }
            let applied = values.enumerated().allSatisfy { $0.element == "new-bulk-\($0.offset)" }
            let untouched = values.enumerated().allSatisfy { $0.element == ($0.offset < 50 ? "old" : nil) }
            #expect(applied || untouched, "step \(step): the batch is torn")
            #expect(!finished || applied, "step \(step): an acknowledged batch is missing")
            if applied { sawAfter = true } else { sawBefore = true }
            #expect(try opened.read(.genericPassword(service: "s", account: "a7"))?.secret == Data("v7".utf8), "step \(step)")
            #expect(try opened.read(.genericPassword(service: "s", account: "a1")) == nil, "step \(step)")
            // The next writes work and compact what a kill left.
            try opened.perform([.create(ItemAttributes(key: .genericPassword(service: "s", account: "after")), secret: Data("x".utf8))])
            try opened.compact()
            #expect(try opened.statistics.logFiles == 0, "step \(step)")
            #expect(try opened.verify().filter { !$0.isSuperseded }.isEmpty, "step \(step) after compacting")
            try? FileManager.default.removeItem(atPath: path)
            if finished { break }
            step += 1
            try #require(step < 100)
        }
        print("bulk batch fault injection: killed at each of \(step - 1) steps, then finished")
        #expect(sawBefore && sawAfter)
        #expect(step > 6)
    }

    @Test("a long-lived handle never reads a value older than one acknowledged before its read began, while others compact")
    func noStaleReadDuringCompaction() throws {
        let directory = TemporaryDirectory()
        let keyfile = directory.sub("keyfile")
        try VaultCredential.generateKeyfile(at: keyfile)
        let path = directory.sub("vault")
        let reader = try FileVault.create(at: path, credential: .keyfile(at: keyfile))
        // One writer sets "counter" to 0, 1, … and says "ack N" after each; another process
        // compacts, re-keys and re-wraps the keys all the while.
        let writer = try startStress("counter", vault: path, keyfile: keyfile, prefix: "w", count: 400)
        let maintainer = try startStress("maintain", vault: path, keyfile: keyfile, prefix: "m", count: 100_000)
        let acknowledged = Mutex(-1)
        let lines = Thread {
            var buffer = Data()
            let handle = writer.1.fileHandleForReading
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                buffer.append(chunk)
                while let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                    let line = String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self)
                    buffer.removeSubrange(buffer.startIndex...newline)
                    if line.hasPrefix("ack "), let index = Int(line.dropFirst(4)) {
                        acknowledged.withLock { $0 = max($0, index) }
                    }
                }
            }
        }
        lines.start()
        var reads = 0, stale = 0
        while writer.0.isRunning {
            let floor = acknowledged.withLock { $0 }
            guard let record = try reader.read(.genericPassword(service: "stress", account: "counter")) else {
                if floor >= 0 { stale += 1 }
                continue
            }
            let value = Int(String(decoding: record.secret, as: UTF8.self)) ?? -1
            if value < floor {
                stale += 1
                if stale <= 5 { Issue.record("read \(value) after \(floor) was acknowledged") }
            }
            reads += 1
        }
        writer.0.waitUntilExit()
        kill(maintainer.0.processIdentifier, SIGKILL)
        maintainer.0.waitUntilExit()
        #expect(writer.0.terminationStatus == 0, "\(stressErrors(writer.0))")
        print("stale-read race: \(reads) reads during writes and compactions, \(stale) stale")
        #expect(reads > 100)
        #expect(stale == 0)
    }

    @Test("a rekey killed at each of its file-system steps, and twenty rekeys killed half-way in a row, lose nothing")
    func rekeyKilledAtEveryStep() throws {
        let directory = TemporaryDirectory()
        let keyfile = directory.sub("keyfile")
        try VaultCredential.generateKeyfile(at: keyfile)
        let pristine = directory.sub("pristine")
        let vault = try FileVault.create(at: pristine, credential: .keyfile(at: keyfile), anchorDirectory: nil)
        try vault.perform((0..<100).map { .create(ItemAttributes(key: .genericPassword(service: "s", account: "a\($0)")), secret: Data("v\($0)".utf8)) })
        func check(_ path: String, _ context: String) throws {
            let opened = try FileVault.open(at: path, credential: .keyfile(at: keyfile), anchorDirectory: nil)
            for index in stride(from: 0, to: 100, by: 7) {
                #expect(try opened.read(.genericPassword(service: "s", account: "a\(index)"))?.secret == Data("v\(index)".utf8), "\(context)")
            }
            #expect(try opened.verify().filter { !$0.isSuperseded }.isEmpty, "\(context)")
        }
        var step = 1
        var halfWay: Int?
        while true {
            let path = directory.sub("vault-\(step)")
            try FileManager.default.copyItem(atPath: pristine, toPath: path)
            let finished = try runStressKilled(at: step, ["rekey", path, keyfile])
            try check(path, "killed at step \(step)")
            let header = try String(contentsOfFile: path + "/header", encoding: .utf8)
            if halfWay == nil, header.components(separatedBy: "\"epoch\" : ").count == 4 { halfWay = step }  // id key + two data keys
            try FileVault.open(at: path, credential: .keyfile(at: keyfile), anchorDirectory: nil).rekey()
            try check(path, "rekeyed after a kill at step \(step)")
            if finished { break }
            step += 1
            try #require(step < 200)
        }
        print("rekey fault injection: killed at each of \(step - 1) steps, then finished")
        // The same half-way kill twenty times in a row, then a whole rekey: no key is retired
        // while a record needs it, and the header never grows past two data keys.
        let halfWayStep = try #require(halfWay)
        let path = directory.sub("repeated")
        try FileManager.default.copyItem(atPath: pristine, toPath: path)
        for round in 0..<20 {
            let run = try startStress(["rekey", path, keyfile], environment: ["KEYSMITH_FAULT_EXIT_AT": String(halfWayStep)])
            run.0.waitUntilExit()
            try check(path, "round \(round)")
            let header = try String(contentsOfFile: path + "/header", encoding: .utf8)
            #expect(header.components(separatedBy: "\"epoch\" : ").count <= 4, "round \(round): more than two data keys")
        }
        try FileVault.open(at: path, credential: .keyfile(at: keyfile), anchorDirectory: nil).rekey()
        try check(path, "after twenty interrupted rekeys")
    }
}
