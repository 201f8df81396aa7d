import Dispatch
import Glibc
import Keysmith
import NIOCore
import NIOPosix
import KeysmithSystem
import Synchronization

/// A statement, connection or close that did not complete within its bound (a connection that
/// dies without the driver noticing must not hang a caller forever).
struct WaitTimedOut: Error {}

extension EventLoopFuture where Value: Sendable {
    /// The future's value, awaited for at most `timeout` without blocking a thread: the wait is
    /// a timer on the future's own event loop. With `cancellable`, cancelling the task ends the
    /// wait at once with `CancellationError` (a statement still running then has its connection
    /// closed by the caller, `Transaction`); a `COMMIT` is awaited with `cancellable` false, so a
    /// caller is never told "not applied" about a commit the server may have made.
    func value(timeout: Duration, cancellable: Bool = true) async throws -> Value {
        let promise = eventLoop.makePromise(of: Value.self)
        let timer = eventLoop.scheduleTask(in: .nanoseconds(Int64(timeout.inNanoseconds))) { promise.fail(WaitTimedOut()) }
        cascade(to: promise)
        promise.futureResult.whenComplete { _ in timer.cancel() }
        guard cancellable else { return try await promise.futureResult.get() }
        return try await withTaskCancellationHandler {
            try await promise.futureResult.get()
        } onCancel: {
            promise.fail(CancellationError())
        }
    }
}

extension Blocking {
    /// ``Blocking/run(_:)`` for the PostgreSQL store's synchronous API, refused on a SwiftNIO
    /// event loop: the store's connections answer on SwiftNIO's shared event loops, so a
    /// blocking call made on one of them would wait for the very thread it holds, for ever.
    static func runOffEventLoop<T, Failure: Error>(_ body: () async throws(Failure) -> T) throws(Failure) -> T {
        if MultiThreadedEventLoopGroup.currentEventLoop != nil {
            fatalError("a blocking PostgresStore call on a SwiftNIO event loop can never finish (that loop answers it): use its async form")
        }
        return try Blocking.run(body)
    }
}
