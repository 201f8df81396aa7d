import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Synchronization

/// The synchronous API's bridge to the asynchronous one: `run` executes async code to its end
/// on the calling thread, so the synchronous methods are the asynchronous ones, not a second copy.
///
/// The code runs as a task whose executor is the calling thread itself (``CallingThreadExecutor``):
/// every job of the task, and of any child task, runs on this thread while it waits, and the
/// thread sleeps between them. Nothing is handed to Swift's cooperative pool, so a synchronous
/// call made from a pool thread, or from many threads at once, can never wait for a pool thread
/// that is itself waiting (the deadlock of blocking on a `Task` from inside the pool).
package enum Blocking {
    /// The thread a ``run(_:)`` drives its task on (a task-local, so it is inherited by any task
    /// created inside; compared with the current thread, it is true only on that thread).
    @TaskLocal private static var runThread: pthread_t?

    /// Whether the running code is a task ``run(_:)`` drives on this thread: code that must not
    /// depend on Swift's cooperative pool (whose threads may all be blocked in synchronous
    /// calls) asks this. A task created inside a blocking call runs elsewhere: false there.
    package static var isActive: Bool {
        guard let thread = runThread else { return false }
        return pthread_equal(thread, pthread_self()) != 0
    }

    /// Pauses: the thread, inside ``run(_:)`` (its task owns the thread anyway, and a sleeping
    /// task's wake-up would need the cooperative pool); otherwise the task, ending early with
    /// `CancellationError` when it is cancelled.
    package static func pause(_ duration: Duration) async throws {
        if isActive {
            let (seconds, attoseconds) = duration.components
            usleep(UInt32(clamping: seconds * 1_000_000 + attoseconds / 1_000_000_000_000))
        } else {
            try await Task.sleep(for: duration)
        }
    }

    /// Runs `body` to its end on the calling thread and returns what it returned (or throws
    /// what it threw). The one bridge from synchronous code to asynchronous code in Keysmith:
    /// the PostgreSQL store's synchronous API and the command's calls into async libraries.
    ///
    /// ```swift
    /// let token = try Blocking.run { try await tokens.freshToken(service: "news", account: "alice") }
    /// ```
    package static func run<T, Failure: Error>(_ body: () async throws(Failure) -> T) throws(Failure) -> T {
        return try withoutActuallyEscaping(body) { (body) throws(Failure) -> T in
            let executor = CallingThreadExecutor()
            // Unchecked: the closure and the result are touched only on this thread (the task's
            // every job runs here, in `executor.run()`, while this function waits).
            let work = ThreadBound(body)
            let outcome = ThreadBound<Result<T, Failure>?>(nil)
            Task(executorPreference: executor) {
                outcome.value = await $runThread.withValue(pthread_self()) { () async -> Result<T, Failure> in
                    do throws(Failure) {
                        return .success(try await work.value())
                    } catch {
                        return .failure(error)
                    }
                }
                executor.finish()
            }
            executor.run()
            return try outcome.value!.get()
        }
    }
}

/// A value used by one thread only, carried across an isolation boundary the compiler cannot
/// see through (``Blocking/run(_:)``).
package final class ThreadBound<Value>: @unchecked Sendable {
    package var value: Value
    package init(_ value: Value) { self.value = value }
}

/// A task executor whose jobs run on the thread that calls ``run()``, until ``finish()``.
final class CallingThreadExecutor: TaskExecutor {
    private let jobs = Mutex<(queue: [UnownedJob], finished: Bool)>(([], false))
    /// One signal per job enqueued, and one for `finish`.
    private let ready = DispatchSemaphore(value: 0)

    func enqueue(_ job: consuming ExecutorJob) {
        enqueue(UnownedJob(job))
    }

    func enqueue(_ job: UnownedJob) {
        jobs.withLock { $0.queue.append(job) }
        ready.signal()
    }

    func finish() {
        jobs.withLock { $0.finished = true }
        ready.signal()
    }

    /// Runs jobs as they come until ``finish()`` has been called and none is left.
    func run() {
        while true {
            ready.wait()
            let (job, finished) = jobs.withLock { state -> (UnownedJob?, Bool) in
                (state.queue.isEmpty ? nil : state.queue.removeFirst(), state.finished)
            }
            if let job {
                job.runSynchronously(on: asUnownedTaskExecutor())
            } else if finished {
                return
            }
        }
    }
}
