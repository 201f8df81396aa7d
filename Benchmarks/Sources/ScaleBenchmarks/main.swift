// Whole-process cost at any vault size: the built `keysmith` command run against a vault of 10
// items and one of 100,000, side by side in the same run (medians; peak RSS of each process from
// wait4). Figures printed, nothing asserted. See docs/benchmarks.md.
//   swift build -c release --product keysmith          (in the repository root)
//   cd Benchmarks && swift run -c release ScaleBenchmarks [--items 10,100000] [--runs 15] [--keysmith PATH]
//     [--only get,set,check,version,revoke] [--keep]    (--keep leaves the vaults, revoked, for profiling)
import Foundation
import Glibc
import Keysmith
import KeysmithTokens
import KeysmithVault

let arguments = CommandLine.arguments
func option(_ name: String) -> String? { arguments.firstIndex(of: name).map { arguments[$0 + 1] } }
let sizes = (option("--items") ?? "10,100000").split(separator: ",").compactMap { Int($0) }
let runs = Int(option("--runs") ?? "15") ?? 15
let only = option("--only").map { Set($0.split(separator: ",").map(String.init)) }
func wanted(_ row: String) -> Bool { only?.contains(row) ?? true }
let keysmith = option("--keysmith")
    ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent(".build/release/keysmith").path
guard FileManager.default.isExecutableFile(atPath: keysmith) else {
    print("build the command first: swift build -c release --product keysmith (looked for \(keysmith))")
    exit(2)
}

let root = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-scale-\(UUID().uuidString)").path
try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
defer { if !arguments.contains("--keep") { try? FileManager.default.removeItem(atPath: root) } else { print("kept \(root)") } }
let keyfile = root + "/keyfile"
try VaultCredential.generateKeyfile(at: keyfile)

/// Runs the command once; returns wall time (ns) and peak RSS (KiB) of that process alone.
func run(_ arguments: [String], vault: String, stdin: String? = nil, anchors: String? = nil) -> (nanoseconds: Double, maxRSS: Int, status: Int32) {
    var environment = ProcessInfo.processInfo.environment
    environment["KEYSMITH_VAULT"] = vault
    environment["KEYSMITH_KEYFILE"] = keyfile
    environment["KEYSMITH_BACKEND"] = "vault"
    environment["KEYSMITH_ANCHOR_DIR"] = anchors ?? root + "/anchors"
    var input: [Int32] = [0, 0]
    pipe(&input)
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    posix_spawn_file_actions_adddup2(&actions, input[0], 0)
    posix_spawn_file_actions_addclose(&actions, input[1])
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
    let argv = ([keysmith] + arguments).map { strdup($0) } + [nil]
    let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    var pid: pid_t = 0
    let start = DispatchTime.now().uptimeNanoseconds
    precondition(posix_spawn(&pid, keysmith, &actions, nil, argv, envp) == 0)
    close(input[0])
    if let stdin { _ = stdin.utf8CString.withUnsafeBufferPointer { write(input[1], $0.baseAddress, $0.count - 1) } }
    close(input[1])
    var status: Int32 = 0
    var usage = rusage()
    wait4(pid, &status, 0, &usage)
    let elapsed = Double(DispatchTime.now().uptimeNanoseconds - start)
    argv.forEach { free($0) }
    envp.forEach { free($0) }
    posix_spawn_file_actions_destroy(&actions)
    return (elapsed, usage.ru_maxrss, (status >> 8) & 0xFF)
}

func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

/// Peak RSS (KiB) of one run, measured through a small Python parent: a child spawned by this
/// (large) benchmark process would be charged this process's pages too (Linux counts the
/// parent's memory image at exec in `ru_maxrss`).
func peakRSS(_ arguments: [String], vault: String, stdin: String?, anchors: String? = nil) throws -> Double {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["python3", "-c", """
        import resource, subprocess, sys
        subprocess.run(sys.argv[1:], input=sys.stdin.buffer.read(), stdout=subprocess.DEVNULL)
        print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
        """, keysmith] + arguments
    var environment = ProcessInfo.processInfo.environment
    environment["KEYSMITH_VAULT"] = vault
    environment["KEYSMITH_KEYFILE"] = keyfile
    environment["KEYSMITH_BACKEND"] = "vault"
    environment["KEYSMITH_ANCHOR_DIR"] = anchors ?? root + "/anchors"
    process.environment = environment
    let input = Pipe(), output = Pipe()
    process.standardInput = input
    process.standardOutput = output
    try process.run()
    input.fileHandleForWriting.write(Data((stdin ?? "").utf8))
    try input.fileHandleForWriting.close()
    let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    return Double(text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
}

/// A vault with `size` generic passwords and `size` tokens, compacted as writes leave it.
func populate(_ size: Int) throws -> String {
    let path = root + "/vault-\(size)"
    let vault = try FileVault.create(at: path, credential: .keyfile(at: keyfile), anchorDirectory: root + "/anchors")
    let issued = Date()
    let scopes: Set<Scope> = [try Scope("groups:read"), try Scope("posts:write"), try Scope("posts:delete")]
    let token = try OAuthToken(
        response: Data(#"{"access_token":"a","token_type":"Bearer","expires_in":86400,"scope":"groups:read posts:write"}"#.utf8),
        requested: scopes, now: issued)
    var filled = 0
    while filled < size {
        let batch = min(10_000, size - filled)
        var operations: [StoreOperation] = (filled..<filled + batch).map {
            .create(ItemAttributes(key: .genericPassword(service: "bench", account: "user\($0)")), secret: Data(repeating: 0x61, count: 64))
        }
        operations += (filled..<filled + batch).map { index in
            var copy = token
            copy.accessToken = "access-\(index)"
            let item = StoredToken(service: "news", account: "user\(index)", token: copy)
            return .create(item.attributes, secret: item.secret)
        }
        try vault.perform(operations)
        filled += batch
    }
    return path
}

print("Keysmith whole-process scale benchmarks: \(keysmith), \(runs) runs each, medians")
var vaults: [Int: String] = [:]
for size in sizes {
    let start = DispatchTime.now().uptimeNanoseconds
    vaults[size] = try populate(size)
    print("populated \(size) items + \(size) tokens in \(String(format: "%.1f", Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9)) s")
}

struct Row { var id: String; var name: String; var arguments: [String]; var stdin: String? }
let rows = [
    Row(id: "get", name: "secret get", arguments: ["secret", "get", "--service", "bench", "--account", "user7"], stdin: nil),
    Row(id: "set", name: "secret set", arguments: ["secret", "set", "--service", "bench", "--account", "user7"], stdin: "new-secret"),
    Row(id: "check", name: "token check", arguments: ["token", "check", "--service", "news", "--account", "user7", "groups:read"], stdin: nil),
    Row(id: "version", name: "--version", arguments: ["--version"], stdin: nil),
]
for row in rows where wanted(row.id) {
    var line = "\(row.name):"
    var medians: [Double] = [], rss: [Double] = []
    for size in sizes {
        // Interleave sizes run by run so that machine noise hits both alike.
        var times: [Double] = [], peaks: [Double] = []
        for _ in 0..<runs {
            let result = run(row.arguments, vault: vaults[size]!, stdin: row.stdin)
            if result.status != 0 { print("  \(row.name) at \(size) exited \(result.status)") }
            times.append(result.nanoseconds)
        }
        for _ in 0..<3 { peaks.append(try peakRSS(row.arguments, vault: vaults[size]!, stdin: row.stdin)) }
        medians.append(median(times))
        rss.append(median(peaks))
        line += String(format: "  %d items %.1f ms %.0f MB", size, median(times) / 1e6, median(peaks) / 1024)
    }
    if medians.count == 2 {
        line += String(format: "  → ratio time %.2f×, RSS %.2f×", medians[1] / medians[0], rss[1] / rss[0])
    }
    print(line)
}

// Bulk revocation of one scope over every token, whole process: each run on a fresh copy of the
// vault (the command changes it), sizes interleaved; medians of time and of peak RSS.
let revokeRuns = max(3, runs / 3)
var revokeTimes: [Int: [Double]] = [:], revokePeaks: [Int: [Double]] = [:]
for attempt in 0..<revokeRuns where wanted("revoke") {
    for size in sizes {
        let copy = root + "/revoke-\(size)-\(attempt)"
        try FileManager.default.copyItem(atPath: vaults[size]!, toPath: copy)
        // A copy is the same vault set back: each gets its own rollback anchor.
        let result = run(["revoke", "--scope", "posts:write", "--service", "news"], vault: copy, anchors: copy + "-anchors")
        if result.status != 0 { print("  revoke at \(size) exited \(result.status)") }
        revokeTimes[size, default: []].append(result.nanoseconds)
        // Peak RSS of the same job on another fresh copy (measured through the Python parent).
        try FileManager.default.removeItem(atPath: copy)
        try FileManager.default.copyItem(atPath: vaults[size]!, toPath: copy)
        revokePeaks[size, default: []].append(try peakRSS(["revoke", "--scope", "posts:write", "--service", "news"], vault: copy, stdin: nil,
                                                          anchors: copy + "-anchors2"))
        try FileManager.default.removeItem(atPath: copy)
    }
}
if wanted("revoke") {
    var line = "revoke --scope over every token (\(revokeRuns) runs, fresh copies):"
    for size in sizes {
        let times = revokeTimes[size] ?? [], peaks = revokePeaks[size] ?? []
        line += String(format: "  %d tokens %.2f s (%.2f–%.2f) %.0f MB", size, median(times) / 1e9, (times.min() ?? 0) / 1e9,
                       (times.max() ?? 0) / 1e9, median(peaks) / 1024)
    }
    print(line)
}
