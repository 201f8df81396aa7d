import Foundation
import InMemoryLogging
import Keysmith
import KeysmithVault
import Logging
import Testing

@Suite("the vault's diagnostics")
struct LoggingTests {
    @Test("commits and damage are logged; no level shows a secret, and names appear only at trace")
    func diagnosticsNeverLeak() throws {
        for level in [Logger.Level.debug, .trace] {
            let handler = InMemoryLogHandler()
            var logger = Logger(label: "test") { _ in handler }
            logger.logLevel = level
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-log-\(UUID().uuidString)").path
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let vault = try FileVault.create(at: directory, credential: .key([UInt8](repeating: 1, count: 32)), logger: logger)
            let key = ItemKey.genericPassword(service: "service-name-7", account: "account-name-7")
            try vault.create(ItemAttributes(key: key, label: "label-7"), secret: Data("SECRET-VALUE-7".utf8))
            _ = try vault.read(key)
            let lines = handler.entries.map { "\($0.message) \($0.metadata)" }
            #expect(lines.contains { $0.contains("committed") })
            #expect(!lines.contains { $0.contains("SECRET-VALUE-7") })
            #expect(lines.contains { $0.contains("account-name-7") } == (level == .trace))
        }
    }
}
