import ArgumentParser
import Keysmith

extension KeysmithCommand {
    /// Shows what Keysmith does, step by step, on a throwaway store.
    struct Walkthrough: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show what Keysmith does, step by step, on a throwaway store."
        )

        func run() throws {
            let store = MemoryStore()
            print("1. Store a generic password for service \"mail\", account \"bob\" in a \(store.storeDescription).")
            try Keysmith.save(Data("correct horse".utf8), forAccount: "bob", inService: "mail", in: store)
            let secret = try Keysmith.load(forAccount: "bob", inService: "mail", from: store)
            print("   Read back \(secret?.count ?? 0) bytes (the secret itself is not printed).")

            print("2. Store an internet password for https://example.com, account \"bob\".")
            let web = ItemKey.internetPassword(
                InternetPasswordKey(server: "example.com", port: 443, internetProtocol: .https, account: "bob"))
            try store.create(ItemAttributes(key: web, label: "Example login"), secret: Data("hunter2".utf8))

            print("3. Creating the first one again is refused:")
            do {
                try Keysmith.save(Data("other".utf8), forAccount: "bob", inService: "mail", in: store)
            } catch let error as KeysmithError {
                print("   \(error)")
            }

            print("4. List every item (secrets are never listed):")
            for info in try store.search(ItemQuery()).sorted(by: { "\($0.key)" < "\($1.key)" }) {
                print("   - \(info.key)")
            }

            print("5. Delete the mail password; reading it now finds nothing.")
            try Keysmith.delete(forAccount: "bob", inService: "mail", from: store)
            let after = try Keysmith.load(forAccount: "bob", inService: "mail", from: store)
            print("   load returned \(after == nil ? "nil" : "a value")")
        }
    }
}
