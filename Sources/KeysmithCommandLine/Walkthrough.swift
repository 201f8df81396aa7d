import FoundationEssentials
import ArgumentParser
import Keysmith
import KeysmithPolicy
import KeysmithSystem
import KeysmithTokenPolicy
import KeysmithTokens
import KeysmithVault

extension KeysmithCommand {
    /// Shows what Keysmith does, step by step, on a throwaway vault.
    struct Walkthrough: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "walkthrough", 
            abstract: "Show what Keysmith does, step by step, on a throwaway vault that is removed afterwards."
        )

        @Option(help: ArgumentHelp("A directory that does not exist yet, to make, hold the throwaway vault and remove afterwards "
                                   + "(default: a new one under $TMPDIR). Exit 7 if something is already there.", valueName: "dir"))
        var directory: String?

        func run() throws {
            let base = directory ?? ((System.environment("TMPDIR") ?? "/tmp") + "/keysmith-walkthrough-\(System.processID)")
            let path = base + "/vault"
            let keyfile = base + "/keyfile"
            // Only a directory made here is removed afterwards: never one that was already there.
            guard try System.mkdir(base, mode: 0o700) else {
                throw CommandFailure(message: "\(base) already exists; the walkthrough makes its own directory and removes it afterwards, "
                                     + "so give a path that does not exist yet", exitCode: ExitCode(7))
            }
            defer { try? System.removeTree(base) }

            step(1, "Create a keyfile and a vault unlocked by it: \(path)")
            try VaultCredential.generateKeyfile(at: keyfile)
            let vault = try FileVault.create(at: path, credential: .keyfile(at: keyfile))

            step(2, "Store a generic password for service \"mail\", account \"bob\".")
            try Keysmith.create(Data("correct horse battery staple".utf8), forAccount: "bob", inService: "mail", in: vault)

            step(3, "Store an internet password for https://example.com:443, account \"alice\".")
            let web = ItemKey.internetPassword(
                InternetPasswordKey(server: "example.com", port: 443, internetProtocol: .https, authenticationType: .htmlForm, account: "alice"))
            try vault.create(ItemAttributes(key: web, label: "Example login"), secret: Data("hunter2".utf8))

            step(4, "Open the vault again, as another process would, and read the mail password back.")
            let again = try FileVault.open(at: path, credential: .keyfile(at: keyfile))
            let secret = try Keysmith.load(forAccount: "bob", inService: "mail", from: again)
            print("   read \(secret?.count ?? 0) bytes; they match what was stored: \(secret == Data("correct horse battery staple".utf8))")

            step(5, "Creating the mail password again is refused, and nothing changes:")
            do {
                try Keysmith.create(Data("other".utf8), forAccount: "bob", inService: "mail", in: again)
            } catch let error as KeysmithError {
                print("   \(error)")
            }

            step(6, "List the items (a listing never shows secrets):")
            for info in try again.search(ItemQuery()).sorted(by: { "\($0.key)" < "\($1.key)" }) {
                print("   - \(info.key)")
            }

            step(7, "Re-key: every record re-encrypted under a new data key.")
            try again.rekey()
            print("   the mail password still reads back: \(try Keysmith.load(forAccount: "bob", inService: "mail", from: vault) != nil)")

            step(8, "Change the mail password, flip one byte of its record on disk, then read it:")
            try Keysmith.update(Data("tr0ub4dor&3".utf8), forAccount: "bob", inService: "mail", in: again)
            try corruptNewestRecord(in: path)
            let damaged = try FileVault.open(at: path, credential: .keyfile(at: keyfile))
            do {
                _ = try damaged.read(.genericPassword(service: "mail", account: "bob"))
            } catch let error as KeysmithError {
                print("   \(error.code): \(error.message)")
            }
            print("   the internet password is unaffected: \(try damaged.read(web)?.secret == Data("hunter2".utf8))")
            print("   verify reports: \(try damaged.verify().map(\.description).joined(separator: "; "))")

            step(9, "Repair: write the mail password again. Until then a listing refuses the vault, since it would leave the item out:")
            do {
                _ = try damaged.search(ItemQuery())
            } catch let error as KeysmithError {
                print("   list: \(error.code): \(error.message)")
            }
            try damaged.perform([.upsert(ItemAttributes(key: .genericPassword(service: "mail", account: "bob")), secret: Data("tr0ub4dor&3".utf8))])
            print("   the mail password reads back: \(try damaged.read(.genericPassword(service: "mail", account: "bob"))?.secret == Data("tr0ub4dor&3".utf8)); "
                  + "verify now calls the damage superseded: \(try damaged.verify().allSatisfy(\.isSuperseded))")
            print("   then delete the internet password; reading it finds nothing:")
            try damaged.delete(web)
            print("   read returned \(try damaged.read(web) == nil ? "nil" : "a value")")

            step(10, "Import an OAuth token for bob at news: requested groups:read posts:write posts:delete.")
            let keeper = TokenKeeper(store: damaged)
            let response = #"{"access_token":"example-access-token","token_type":"Bearer","expires_in":3600,"scope":"groups:read posts:write"}"#
            let token = try keeper.importResponse(
                Data(response.utf8), service: "news", account: "bob",
                requested: try Scope.parseList("groups:read posts:write posts:delete"), clientID: "news-app", subject: "bob")
            for (scope, status) in token.statuses(at: keeper.now).sorted(by: { $0.key < $1.key }) {
                print("   \(scope): \(status.state.rawValue) (\(status.reason))")
            }

            step(11, "Check a scope: may this token post?")
            let postsWrite = try Scope("posts:write")
            print("   hasGranted(posts:write): \(token.hasGranted(postsWrite, at: keeper.now))")

            step(12, "Decide a news-groups request with the example policy (keysmith policy example): may alice, a member of g1, post there with this token?")
            let policies = try Policies(text: NewsGroupsExample.policies, file: "news-groups/policies.cedar")
            let entities = try EntityStore(json: Array(NewsGroupsExample.entities.utf8), file: "news-groups/entities.json")
            func decide() throws -> AuthorizationDecision {
                let current = try keeper.token(service: "news", account: "bob") ?? token
                // bob's token; the principal is alice, a member of g1, in the example entities.
                return policies.isAuthorized(
                    AuthorizationRequest(principal: EntityUID(type: "User", id: "alice"), action: EntityUID(type: "Action", id: "post"),
                                         resource: EntityUID(type: "Group", id: "g1"), token: TokenView(token: current, at: keeper.now)),
                    entities: entities)
            }
            print(try decide().description.split(separator: "\n").map { "   " + $0 }.joined(separator: "\n"))

            step(13, "Revoke posts:write from the token.")
            try keeper.revoke([postsWrite], service: "news", account: "bob", reason: "walkthrough")

            step(14, "The same request again: the decision follows the revocation.")
            print(try decide().description.split(separator: "\n").map { "   " + $0 }.joined(separator: "\n"))

            step(15, "Verify the audit log of token changes (each entry chained to the one before by a hash).")
            let verification = try keeper.verifyAuditLog()
            print("   \(verification.entries) entries, intact: \(verification.isIntact)")
            print("\nThe throwaway vault is removed. Try `keysmith init` for your own, and `keysmith --help`.")
        }

        private func step(_ number: Int, _ text: String) {
            print("\(number). \(text)")
        }

        /// Flips a byte inside the newest commit's record, as a disk error or an attacker might.
        private func corruptNewestRecord(in path: String) throws {
            let logs = try System.listDirectory(path + "/data/log").filter { !$0.hasPrefix(".") }.sorted()
            guard let newest = logs.last else { return }
            let file = path + "/data/log/" + newest
            guard var bytes = try System.readFile(file), bytes.count > 200 else { return }
            bytes[bytes.count - 5] ^= 0x01  // inside the last record's ciphertext (records end the file)
            let fd = try System.open(file, flags: OpenFlags.writeOnly | OpenFlags.truncate)
            defer { System.close(fd) }
            try System.writeAll(fd, bytes, path: file)
        }

    }
}
