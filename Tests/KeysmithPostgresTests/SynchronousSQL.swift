import Keysmith
@testable import KeysmithPostgres
import KeysmithSystem
import Logging
import PostgresNIO

// The tests play the database administrator with the module's own sessions, from synchronous
// code: these run the asynchronous calls through the store's own bridge (`Blocking.runOffEventLoop`), as the
// store's synchronous API does.

extension Session {
    static func connect(_ settings: PostgresConnectionSettings, logger: Logger, application: String = "keysmith") throws -> Session {
        try Blocking.runOffEventLoop { try await connect(settings, logger: logger, application: application) }
    }

    func transaction<T>(snapshot: Bool = false, _ body: (Transaction) throws -> T) throws -> T {
        try Blocking.runOffEventLoop { try await transaction(snapshot: snapshot) { (transaction) async throws -> T in try body(transaction) } }
    }
}

extension Transaction {
    @discardableResult
    func execute(_ query: PostgresQuery) throws -> [PostgresRow] {
        try Blocking.runOffEventLoop { try await execute(query) }
    }
}

extension RetryableConflict {
    static func retrying<T>(_ body: () throws -> T, failure: (String) -> KeysmithError) throws -> T {
        try Blocking.runOffEventLoop { try await retrying({ () async throws -> T in try body() }, failure: { failure($0) }) }
    }
}
