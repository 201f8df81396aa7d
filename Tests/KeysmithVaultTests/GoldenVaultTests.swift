import Foundation
import Keysmith
import KeysmithVault
import Testing

/// The golden vaults in Keys/: written once by format version 1 and read by every later
/// Keysmith. Regenerate them only for a new format version (KEYSMITH_REGENERATE_GOLDEN=1).
enum Golden {
    static let passphrase = "keysmith-golden-v1"
    static let keysDirectory = repositoryRoot + "/Keys"
    static let passphraseVault = keysDirectory + "/golden-v1-passphrase"
    static let keyfileVault = keysDirectory + "/golden-v1-keyfile"
    static let keyfile = keysDirectory + "/test-keyfile"

    static let created = Date(timeIntervalSince1970: 1_790_000_000)

    static let web = ItemKey.internetPassword(InternetPasswordKey(
        server: "mail.example.com", port: 993, internetProtocol: .imaps, authenticationType: .default,
        securityDomain: "", path: "", account: "alice"))

    /// What each golden vault holds.
    static let records: [SecureRecord] = [
        SecureRecord(
            info: ItemInfo(
                attributes: ItemAttributes(key: .genericPassword(service: "mail", account: "bob"), label: "Bob's mail",
                                           comment: "golden", itemDescription: "Mail password", creator: "keysmith",
                                           type: "password", isInvisible: false, isNegative: false, generic: Data([1, 2, 3])),
                created: created, modified: created.addingTimeInterval(60)),
            secret: Data("bob-secret-v2".utf8)),
        SecureRecord(
            info: ItemInfo(attributes: ItemAttributes(key: web, label: "Alice IMAP", isInvisible: true),
                           created: created, modified: created),
            secret: Data((0...255).map(UInt8.init))),
        SecureRecord(
            info: ItemInfo(attributes: ItemAttributes(key: .genericPassword(service: "邮件", account: "李雷")),
                           created: created, modified: created),
            secret: Data()),
    ]
    static let deleted = ItemKey.genericPassword(service: "mail", account: "gone")

    /// Writes a golden vault: a snapshot and logs, with an update and a deletion.
    static func write(at path: String, credential: VaultCredential) throws {
        try? FileManager.default.removeItem(atPath: path)
        let clock: @Sendable () -> Date = { created }
        let vault = try FileVault.create(at: path, credential: credential, scrypt: ScryptParameters(n: 1 << 12), clock: clock)
        var first = records[0]
        first.secret = Data("bob-secret-v1".utf8)
        first.info.modified = created
        try vault.perform([.restore(first), .restore(records[1])])
        try vault.perform([.restore(SecureRecord(info: ItemInfo(attributes: ItemAttributes(key: deleted), created: created, modified: created), secret: Data("x".utf8)))])
        try vault.compact()
        try vault.perform([.restore(records[0]), .delete(deleted)])
        try vault.perform([.restore(records[2])])
        FileManager.default.createFile(atPath: path + "/lock", contents: Data())
    }

    static func copy(_ path: String) throws -> (TemporaryDirectory, String) {
        let directory = TemporaryDirectory()
        let destination = directory.sub("vault")
        try FileManager.default.copyItem(atPath: path, toPath: destination)
        return (directory, destination)
    }
}

@Suite("golden vaults (format version 1)")
struct GoldenVaultTests {
    @Test("regenerates the golden vaults only when asked",
          .enabled(if: ProcessInfo.processInfo.environment["KEYSMITH_REGENERATE_GOLDEN"] == "1"))
    func regenerate() throws {
        try Golden.write(at: Golden.passphraseVault, credential: .passphrase(Golden.passphrase))
        try Golden.write(at: Golden.keyfileVault, credential: .keyfile(at: Golden.keyfile))
    }

    @Test("today's code reads the version 1 vault unlocked by the documented test passphrase",
          arguments: [true, false])
    func readsGolden(passphrase: Bool) throws {
        let (directory, path) = try Golden.copy(passphrase ? Golden.passphraseVault : Golden.keyfileVault)
        _ = directory
        let credential: VaultCredential = passphrase ? .passphrase(Golden.passphrase) : .keyfile(at: Golden.keyfile)
        let vault = try FileVault.open(at: path, credential: credential)
        #expect(try vault.verify().isEmpty)
        for record in Golden.records {
            #expect(try vault.read(record.key) == record)
        }
        #expect(try vault.read(Golden.deleted) == nil)
        #expect(try vault.search(ItemQuery()).count == Golden.records.count)
        // And it stays writable.
        try vault.create(ItemAttributes(key: .genericPassword(service: "new", account: "n")), secret: Data("n".utf8))
        try vault.rekey()
        #expect(try FileVault.open(at: path, credential: credential).read(Golden.records[0].key) == Golden.records[0])
    }

    @Test("the golden vaults have the documented layout")
    func layout() throws {
        for path in [Golden.passphraseVault, Golden.keyfileVault] {
            let names = try files(in: path)
            #expect(names == ["header", "header.backup", "lock", "log/0000000000000003", "log/0000000000000004", "snapshot"])
        }
        let header = try String(contentsOfFile: Golden.passphraseVault + "/header", encoding: .utf8)
        #expect(header.contains("\"type\" : \"scrypt\""))
        #expect(header.contains("\"n\" : 4096"))
    }
}
