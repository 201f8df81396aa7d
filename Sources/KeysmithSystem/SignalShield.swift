import Dispatch
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Holds SIGINT, SIGTERM and SIGHUP over the windows in which dying would lose what cannot be
/// had again (docs/threat-model.md): from the moment a refresh request may have reached the
/// provider (which then spends the old refresh token) until its answer is committed, and while a
/// sign-in's answer is kept. A signal that arrives inside a window ends the process as it would
/// have, with the same status, as soon as the last window closes; outside one, at once.
///
/// The command enables it once, before any work; a library only marks its windows. The
/// handlers are installed when the first window opens (a command that never opens one, such as
/// `keysmith watch` with its own clean stop, keeps its own); without `enable()`, a window holds
/// nothing (a program that embeds the library keeps its signals as it set them).
///
/// ```swift
/// SignalShield.enable()                              // keysmith-net, at start
/// let token = try await SignalShield.holding {       // FreshTokens, around send-and-keep
///     try await send(refreshToken)
/// }
/// ```
package enum SignalShield {
    /// The signals held: the ones `timeout`, systemd, a terminal's Ctrl-C and a closed terminal send.
    package static let signals: [Int32] = [SIGINT, SIGTERM, SIGHUP]
    private static let depth = Atomic<Int>(0)
    private static let pending = Atomic<Int32>(0)
    private static let sources = Mutex<[any DispatchSourceSignal]>([])

    private static let enabled = Atomic<Bool>(false)

    /// Lets windows hold signals in this process (the handlers are installed when the first opens).
    package static func enable() {
        enabled.store(true, ordering: .sequentiallyConsistent)
    }

    /// Installs the shield for this process; a second call does nothing. A signal the process
    /// was started ignoring (`nohup`) stays ignored.
    package static func install() {
        sources.withLock { sources in
            guard sources.isEmpty else { return }
            for number in signals {
                // The disposition the process inherited: SIG_IGN is the handler value 1.
                var old = sigaction()
                sigaction(number, nil, &old)
                if unsafeBitCast(old.__sigaction_handler.sa_handler, to: Int.self) == 1 { continue }
                // Delivered to the dispatch source instead of ending the process.
                signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
                source.setEventHandler { arrived(number) }
                source.resume()
                sources.append(source)
            }
            var set = sigset_t()
            sigemptyset(&set)
            for number in signals { sigaddset(&set, number) }
            pthread_sigmask(SIG_UNBLOCK, &set, nil)
        }
    }

    /// Runs `body` with the signals held; windows nest and may overlap across tasks.
    package static func holding<T>(_ body: () async throws -> T) async rethrows -> T {
        if enabled.load(ordering: .sequentiallyConsistent) { install() }
        // A signal already waiting ends the process before anything new is started: windows
        // that keep opening must not hold it for ever.
        let waiting = pending.load(ordering: .sequentiallyConsistent)
        if waiting != 0 { die(waiting) }
        depth.add(1, ordering: .sequentiallyConsistent)
        defer { close() }
        return try await body()
    }

    /// Whether a held signal is waiting for the windows to close.
    package static var isPending: Bool { pending.load(ordering: .sequentiallyConsistent) != 0 }

    private static func close() {
        let left = depth.subtract(1, ordering: .sequentiallyConsistent).newValue
        let waiting = pending.load(ordering: .sequentiallyConsistent)
        if left == 0, waiting != 0 { die(waiting) }
    }

    private static func arrived(_ number: Int32) {
        guard depth.load(ordering: .sequentiallyConsistent) > 0 else { die(number) }
        _ = pending.compareExchange(expected: 0, desired: number, ordering: .sequentiallyConsistent)
        // The last window may have closed between the two reads: then nobody else will act.
        if depth.load(ordering: .sequentiallyConsistent) == 0 { die(number) }
    }

    /// Ends the process by the signal itself, so its parent sees the status it expects.
    private static func die(_ number: Int32) -> Never {
        signal(number, SIG_DFL)
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, number)
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
        raise(number)
        _exit(128 + number)
    }
}
