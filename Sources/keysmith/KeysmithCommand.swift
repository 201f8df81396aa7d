import ArgumentParser

/// The `keysmith` command: secrets, tokens and policies from a terminal or a script.
@main
struct KeysmithCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keysmith",
        abstract: "Keep secrets in an encrypted vault and inspect them from a terminal or a script.",
        version: "0.1.0",
        subcommands: [Walkthrough.self]
    )
}
