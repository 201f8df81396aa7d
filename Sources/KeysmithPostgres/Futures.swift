import Keysmith
import NIOCore
import Dispatch

/// A future's result, waited for at most `timeout` (a connection that dies without the driver
/// noticing must not hang a caller forever).
struct WaitTimedOut: Error {}

final class ResultBox<Value>: @unchecked Sendable {
    // @unchecked: written once by the event loop before the semaphore is signalled, read after.
    var result: Result<Value, any Error>?
}

extension EventLoopFuture {
    func wait(timeout: Duration) throws -> Value {
        let semaphore = DispatchSemaphore(value: 0)
        let box = ResultBox<Value>()
        whenComplete { result in
            box.result = result
            semaphore.signal()
        }
        let nanoseconds = timeout.inNanoseconds
        guard semaphore.wait(timeout: .now() + .nanoseconds(nanoseconds)) == .success, let result = box.result else { throw WaitTimedOut() }
        return try result.get()
    }
}
