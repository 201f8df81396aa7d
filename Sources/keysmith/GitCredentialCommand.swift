import ArgumentParser
import Foundation
import Keysmith
import KeysmithStores
import KeysmithSystem

extension KeysmithCommand {
    /// git's credential helper (git-credential(1)); installed as `git-credential-keysmith`.
    struct GitCredentialCommand: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "git-credential",
            abstract: "Keep git's credentials in Keysmith: git's credential helper protocol (get, store, erase).",
            discussion: """
                Reads a credential description (key=value lines up to an empty line) on standard input, as git \
                writes it. get prints username= and password= for the host (protocol, host and port, and path \
                with credential.useHttpPath), or nothing; store keeps what git approved as an internet password \
                item of that user (never another user's); erase removes that user's item after the server \
                rejected it, only while it still holds the rejected password. Set it up with \
                `git config --global credential.helper keysmith` (git runs git-credential-keysmith, a link to \
                this command). The store is the one the usual options, the environment and the config file \
                choose. When the store cannot be opened or unlocked, the helper says why on standard error, prints \
                nothing and exits 0, so git asks its next helper or prompts. Other actions are ignored, as git requires.
                """
        )

        @OptionGroup var store: StoreOptions

        @Argument(help: "get, store or erase (others are ignored).")
        var action: String

        func run() throws {
            guard ["get", "store", "erase"].contains(action) else { return }
            let input = try InputLimit.read(limit: GitCredential.maximumSize, what: "the credential description")
            do {
                let request = try GitCredential(parsing: input)
                // Nothing Keysmith can name (another protocol, no host): not ours, and no store is opened.
                guard request.isKeepable else { return }
                let opened = try store.openStore()
                switch action {
                case "get":
                    let now = Int64(Date().timeIntervalSince1970)
                    if let answer = try GitCredential.get(request, in: opened, now: now) {
                        Terminal.write(answer.encoded(), to: 1)
                    }
                case "store":
                    try GitCredential.store(request, in: opened)
                default:
                    try GitCredential.erase(request, in: opened)
                }
            } catch let error as KeysmithError {
                // git goes on without us (its next helper, or the prompt): say why, print nothing.
                Terminal.write(Array("keysmith: git-credential \(action): \(error.message)\n".utf8), to: 2)
            }
        }
    }
}
