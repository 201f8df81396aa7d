import Keysmith
import Logging
import Synchronization

/// The connections of one ``PostgresStore`` handle: at most `limit`, opened when first needed and
/// kept, each lent to one operation at a time. An operation that finds them all lent waits
/// without blocking a thread (a continuation, resumed by the operation that gives one back), and
/// a cancelled task stops waiting at once.
final class SessionPool: Sendable {
    let settings: PostgresConnectionSettings
    let logger: Logger
    /// The most connections open at once.
    let limit: Int

    private struct Waiter {
        let id: Int
        /// Resumed with a connection handed over, or with `nil`: a place came free, open one.
        let continuation: CheckedContinuation<Session?, any Error>
    }

    private struct State {
        var idle: [Session] = []
        /// Connections open or being opened, lent or idle.
        var open = 0
        /// The most connections open at once so far (a test checks the limit holds).
        var peak = 0
        var waiters: [Waiter] = []
        var nextWaiter = 0
    }

    private let state = Mutex(State())
    /// How many operations this pool has lent a connection to (a test checks which pool an
    /// async caller uses).
    let lendings = Atomic<Int>(0)

    init(settings: PostgresConnectionSettings, logger: Logger, limit: Int, first: Session? = nil) {
        self.settings = settings
        self.logger = logger
        self.limit = max(1, limit)
        if let first { state.withLock { $0.idle = [first]; $0.open = 1; $0.peak = 1 } }
    }

    deinit {
        state.withLock { state in for session in state.idle { session.close() } }
    }

    /// How many connections are open now (idle or lent).
    var openCount: Int { state.withLock { $0.open } }

    /// The most connections that were open at once.
    var peakOpen: Int { state.withLock { $0.peak } }

    /// How many borrowers wait for a connection now (the tests wait for one to be waiting
    /// before they cancel it).
    var waitingCount: Int { state.withLock { $0.waiters.count } }

    /// Runs `body` with a connection. A connection that `body` found lost
    /// (`KeysmithError.Code.storeUnavailable`) is closed and not given back, so the next
    /// operation connects again.
    func withSession<T>(_ body: (Session) async throws -> T) async throws -> T {
        let session = try await checkOut()
        lendings.add(1, ordering: .relaxed)
        do {
            let result = try await body(session)
            checkIn(session)
            return result
        } catch let error as KeysmithError where error.code == .storeUnavailable {
            discard(session)
            throw error
        } catch {
            checkIn(session)
            throw error
        }
    }

    private enum Decision {
        case use(Session)
        case open
        case wait
    }

    /// What a caller asking for a connection does now: take an idle one, open one in a free
    /// place (counted here), or wait.
    private static func decide(_ state: inout State, limit: Int) -> Decision {
        if let session = state.idle.popLast() {
            if !session.isClosed { return .use(session) }
            // Lost while idle (the server restarted, say): a new connection takes its place.
            session.close()
            return .open
        }
        if state.open < limit {
            state.open += 1
            state.peak = max(state.peak, state.open)
            return .open
        }
        return .wait
    }

    private func checkOut() async throws -> Session {
        try Task.checkCancellation()
        switch state.withLock({ Self.decide(&$0, limit: limit) }) {
        case .use(let session): return session
        case .open: return try await open()
        case .wait:
            if let handed = try await waitForTurn() { return handed }
            return try await open()
        }
    }

    /// Opens a connection in a place already counted in `open`; gives the place back on failure.
    private func open() async throws -> Session {
        do {
            try Task.checkCancellation()
            return try await Session.connect(settings, logger: logger)
        } catch {
            freePlace()
            throw error
        }
    }

    /// Waits for a connection given back (returned) or a place come free (`nil`: open one).
    /// The state is decided again under the same lock that lists the waiter, so a connection
    /// given back between the first decision and the listing is taken, not missed.
    private func waitForTurn() async throws -> Session? {
        let id = state.withLock { state -> Int in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Session?, any Error>) in
                enum Now { case cancelled, use(Session), open, listed }
                let now = state.withLock { state -> Now in
                    // Cancelled before the waiter was listed: the handler below found nothing to end.
                    if Task.isCancelled { return .cancelled }
                    switch Self.decide(&state, limit: limit) {
                    case .use(let session): return .use(session)
                    case .open: return .open
                    case .wait:
                        state.waiters.append(Waiter(id: id, continuation: continuation))
                        return .listed
                    }
                }
                switch now {
                case .cancelled: continuation.resume(throwing: CancellationError())
                case .use(let session): continuation.resume(returning: session)
                case .open: continuation.resume(returning: nil)
                case .listed: break
                }
            }
        } onCancel: {
            let waiter = state.withLock { state -> Waiter? in
                guard let position = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return state.waiters.remove(at: position)
            }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    private func checkIn(_ session: Session) {
        guard !session.isClosed else { return discard(session) }
        let waiter = state.withLock { state -> Waiter? in
            if !state.waiters.isEmpty { return state.waiters.removeFirst() }
            state.idle.append(session)
            return nil
        }
        waiter?.continuation.resume(returning: session)
    }

    private func discard(_ session: Session) {
        session.close()
        freePlace()
    }

    /// A place came free: the first waiter opens a connection in it, else it is given back.
    private func freePlace() {
        let waiter = state.withLock { state -> Waiter? in
            if !state.waiters.isEmpty { return state.waiters.removeFirst() }
            state.open -= 1
            return nil
        }
        waiter?.continuation.resume(returning: nil)
    }
}
