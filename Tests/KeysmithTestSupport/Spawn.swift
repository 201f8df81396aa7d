public import Foundation
import Synchronization
import Testing

/// A child process for the tests, started with `posix_spawn` and waited for with `waitpid` on
/// its own pid.
///
/// Not Foundation's `Process`: on Linux it learns of a child's exit only when a socket the child
/// inherits reaches end-of-file, on one shared thread that then waits for that child, so another
/// process that inherits the socket too (anything started by another thread at that instant)
/// hides the exit for as long as it lives, and `waitUntilExit` can wait forever. Here the child
/// inherits nothing but its three standard descriptors and starts with the default signal
/// handling, and one that has not ended after `deadline` seconds is a recorded test failure
/// naming what it was doing (its state, each thread's kernel wait channel and stack), then killed.
///
/// ```swift
/// let child = try SpawnedProcess("/bin/echo", ["hi"], standardOutput: .file("/tmp/out"))
/// child.waitUntilExit()
/// #expect(child.terminationStatus == 0)
/// ```
public final class SpawnedProcess: Sendable {
    /// Where one of the child's standard descriptors comes from or goes.
    public enum Stream {
        /// A file, created (or truncated) for output, read for input.
        case file(String)
        /// A descriptor of this process, duplicated into the child.
        case descriptor(Int32)
        /// `/dev/null`.
        case null
    }

    public let processIdentifier: pid_t
    private let started = Date()
    private let deadline: TimeInterval
    /// The raw wait status, once the child has been reaped.
    private let status = Mutex<Int32?>(nil)

    /// Starts `executable` with `arguments` and exactly `environment`.
    public init(_ executable: String, _ arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment,
                directory: String? = nil, standardInput: Stream = .null, standardOutput: Stream = .null,
                standardError: Stream = .null, deadline: TimeInterval = 300) throws {
        self.deadline = deadline
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (fd, stream) in [(Int32(0), standardInput), (1, standardOutput), (2, standardError)] {
            switch stream {
            case .file(let path): posix_spawn_file_actions_addopen(&actions, fd, path, fd == 0 ? O_RDONLY : O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            case .descriptor(let source): posix_spawn_file_actions_adddup2(&actions, source, fd)
            case .null: posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0)
            }
        }
        guard SpawnExtensions.addCloseFrom(&actions, 3) == 0 else { throw POSIXError(.EINVAL) }
        if let directory {
            guard directory.withCString({ SpawnExtensions.addChdir(&actions, $0) }) == 0 else { throw POSIXError(.EINVAL) }
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // The test runner blocks and ignores some signals, and children would inherit that.
        var signals = sigset_t()
        sigemptyset(&signals)
        posix_spawnattr_setsigmask(&attributes, &signals)
        for signal in [SIGTERM, SIGINT, SIGPIPE, SIGHUP, SIGQUIT] { sigaddset(&signals, signal) }
        posix_spawnattr_setsigdefault(&attributes, &signals)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard spawned == 0 else { throw POSIXError(POSIXErrorCode(rawValue: spawned) ?? .EIO) }
        processIdentifier = pid
    }

    /// Whether the child has not ended yet (reaping it if it has).
    public var isRunning: Bool { status.withLock { $0 } == nil && !reap(blocking: false) }

    /// Waits for the child to end; past the deadline, records what it was doing as a test
    /// issue and kills it.
    public func waitUntilExit() {
        while isRunning {
            if Date().timeIntervalSince(started) > deadline {
                Issue.record("process \(processIdentifier) has not ended after \(Int(deadline)) s; killed. \(diagnosis())")
                kill(processIdentifier, SIGKILL)
                _ = reap(blocking: true)
                return
            }
            usleep(1_000)
        }
    }

    /// The exit status, or 128 + the signal that ended the child (as a shell reports it).
    public var terminationStatus: Int32 {
        guard let raw = status.withLock({ $0 }) else { preconditionFailure("the process is still running") }
        return raw & 0x7f == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
    }

    /// `waitpid` on this child's pid only; true once it has been reaped.
    private func reap(blocking: Bool) -> Bool {
        status.withLock { status in
            if status != nil { return true }
            var raw: Int32 = 0
            while true {
                let result = waitpid(processIdentifier, &raw, blocking ? 0 : WNOHANG)
                if result == processIdentifier { status = raw; return true }
                if result == -1 && errno == EINTR { continue }
                return false
            }
        }
    }

    /// A hung child's state and, for each thread, its kernel wait channel and stack.
    private func diagnosis() -> String {
        let proc = "/proc/\(processIdentifier)"
        var lines = [(try? String(contentsOfFile: proc + "/cmdline", encoding: .utf8))?.replacingOccurrences(of: "\0", with: " ") ?? ""]
        let state = (try? String(contentsOfFile: proc + "/status", encoding: .utf8))?
            .split(separator: "\n").first { $0.hasPrefix("State:") } ?? "State: unknown"
        lines.append(String(state))
        for thread in (try? FileManager.default.contentsOfDirectory(atPath: proc + "/task")) ?? [] {
            let wchan = (try? String(contentsOfFile: "\(proc)/task/\(thread)/wchan", encoding: .utf8)) ?? "?"
            let stack = (try? String(contentsOfFile: "\(proc)/task/\(thread)/stack", encoding: .utf8)) ?? ""
            lines.append("thread \(thread): waiting in \(wchan) \(stack.replacingOccurrences(of: "\n", with: " | "))")
        }
        return lines.joined(separator: "\n")
    }
}

/// Runs a program to its end and returns its exit status and output: standard input from
/// `stdin`, standard output and error each into a file (never a pipe, so neither side can block
/// the other however much either writes). See ``SpawnedProcess`` for why not Foundation's `Process`.
public func spawnAndWait(_ executable: String, _ arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment,
                         directory: String? = nil, stdin: Data = Data(), deadline: TimeInterval = 300)
    throws -> (status: Int32, stdout: Data, stderr: Data)
{
    let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-spawn-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    defer { try? FileManager.default.removeItem(atPath: scratch) }
    let (inPath, outPath, errPath) = (scratch + "/in", scratch + "/out", scratch + "/err")
    try stdin.write(to: URL(fileURLWithPath: inPath))
    let child = try SpawnedProcess(executable, arguments, environment: environment, directory: directory, standardInput: .file(inPath),
                                   standardOutput: .file(outPath), standardError: .file(errPath), deadline: deadline)
    child.waitUntilExit()
    let stdout = (try? Data(contentsOf: URL(fileURLWithPath: outPath))) ?? Data()
    let stderr = (try? Data(contentsOf: URL(fileURLWithPath: errPath))) ?? Data()
    return (child.terminationStatus, stdout, stderr)
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
