import FoundationEssentials
import Dispatch
import Synchronization

/// The results of `body` over `0..<count`, in order, split into one chunk per core when there
/// are at least `minimum` (a large batch's seals or blind indexes: each item independent), else
/// one chunk on this thread. `body` gets a chunk's range and may set up per-chunk state (a
/// cipher context) before mapping it; it must only read what it shares with other chunks. The
/// first error a chunk throws is rethrown (after every chunk ended).
///
/// ```swift
/// let sealed = try concurrentChunks(count: writes.count) { range in try range.map { try seal(writes[$0]) } }
/// ```
package func concurrentChunks<Result: Sendable>(count: Int, minimum: Int = 2048, _ body: (Range<Int>) throws -> [Result]) throws -> [Result] {
    let chunks = ProcessInfo.processInfo.activeProcessorCount
    guard count >= minimum, chunks > 1 else { return try body(0..<count) }
    let size = (count + chunks - 1) / chunks
    let results = Mutex<[Int: Swift.Result<[Result], any Error>]>([:])
    withoutActuallyEscaping(body) { body in
        let shared = ReadOnlyTransfer(body)
        DispatchQueue.concurrentPerform(iterations: chunks) { chunk in
            // With many cores the last chunks can be empty: clamp both ends.
            let range = min(count, chunk * size)..<min(count, (chunk + 1) * size)
            let mapped = Swift.Result { try shared.value(range) }
            results.withLock { $0[chunk] = mapped }
        }
    }
    return try results.withLock { results in try (0..<chunks).flatMap { try results[$0]?.get() ?? [] } }
}

/// A value handed to `concurrentPerform`'s threads, which only read through it.
private struct ReadOnlyTransfer<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
