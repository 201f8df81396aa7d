import Foundation
import Synchronization
import Testing

/// Runs a program to its end and returns its exit status and output: standard input from
/// `stdin`, standard output and error each into a file (never a pipe, so neither side can block
/// the other however much either writes), started with `posix_spawn` and waited for with
/// `waitpid` on its own pid.
///
/// Not Foundation's `Process`: on Linux it learns of a child's exit through a socket the child
/// inherits, so another process that inherits that socket too delays or hides the exit, and
/// `waitUntilExit` can wait forever. Here the child inherits nothing but its three standard
/// descriptors, and one that has not ended after `deadline` seconds is killed and recorded as
/// a test failure naming what it was waiting in.
func spawnAndWait(_ executable: String, _ arguments: [String], environment: [String: String], directory: String? = nil,
                  stdin: Data = Data(), deadline: TimeInterval = 300) throws -> (status: Int32, stdout: Data, stderr: Data) {
    let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-spawn-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    defer { try? FileManager.default.removeItem(atPath: scratch) }
    let (inPath, outPath, errPath) = (scratch + "/in", scratch + "/out", scratch + "/err")
    try stdin.write(to: URL(fileURLWithPath: inPath))
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, inPath, O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, outPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    posix_spawn_file_actions_addopen(&actions, 2, errPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    guard SpawnExtensions.addCloseFrom(&actions, 3) == 0 else { throw POSIXError(.EINVAL) }
    if let directory {
        guard directory.withCString({ SpawnExtensions.addChdir(&actions, $0) }) == 0 else { throw POSIXError(.EINVAL) }
    }
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    // The test runner blocks and ignores some signals; the child starts with the defaults.
    var signals = sigset_t()
    sigemptyset(&signals)
    posix_spawnattr_setsigmask(&attributes, &signals)
    for signal in [SIGTERM, SIGINT, SIGPIPE, SIGHUP] { sigaddset(&signals, signal) }
    posix_spawnattr_setsigdefault(&attributes, &signals)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
    let argv = ([executable] + arguments).map { strdup($0) } + [nil]
    let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer { (argv + envp).forEach { free($0) } }
    var pid: pid_t = 0
    let spawned = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
    guard spawned == 0 else { throw POSIXError(POSIXErrorCode(rawValue: spawned) ?? .EIO) }
    let started = Date()
    var raw: Int32 = 0
    while true {
        let result = waitpid(pid, &raw, WNOHANG)
        if result == pid { break }
        if result == -1 && errno != EINTR { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        if Date().timeIntervalSince(started) > deadline {
            let wchan = (try? String(contentsOfFile: "/proc/\(pid)/wchan", encoding: .utf8)) ?? "?"
            Issue.record("\(executable) \(arguments.first ?? "") has not ended after \(Int(deadline)) s (waiting in \(wchan)); killed")
            kill(pid, SIGKILL)
            while waitpid(pid, &raw, 0) == -1 && errno == EINTR {}
            break
        }
        usleep(1_000)
    }
    let status = raw & 0x7f == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
    let stdout = (try? Data(contentsOf: URL(fileURLWithPath: outPath))) ?? Data()
    let stderr = (try? Data(contentsOf: URL(fileURLWithPath: errPath))) ?? Data()
    return (status, stdout, stderr)
}

/// glibc's spawn extensions (2.29 and 2.34 and later), which Swift's Glibc module does not import.
enum SpawnExtensions {
    typealias Actions = UnsafeMutablePointer<posix_spawn_file_actions_t>
    /// `posix_spawn_file_actions_addclosefrom_np`: the child closes every descriptor from the given one up.
    static let addCloseFrom = symbol("posix_spawn_file_actions_addclosefrom_np", as: (@convention(c) (Actions, Int32) -> Int32).self)
    /// `posix_spawn_file_actions_addchdir_np`: the child changes to the given directory.
    static let addChdir = symbol("posix_spawn_file_actions_addchdir_np", as: (@convention(c) (Actions, UnsafePointer<CChar>) -> Int32).self)

    private static func symbol<T>(_ name: String, as type: T.Type) -> T {
        // dlsym with RTLD_DEFAULT (a null handle) searches the libraries already loaded: glibc's.
        guard let pointer = dlsym(nil, name) else { fatalError("this C library has no \(name) (glibc 2.34 or later is needed)") }
        return unsafeBitCast(pointer, to: type)
    }
}
