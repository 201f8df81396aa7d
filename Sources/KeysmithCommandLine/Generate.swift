import ArgumentParser
import FoundationEssentials
import Keysmith
import KeysmithCrypto
import KeysmithSystem

extension KeysmithCommand.Secret {
    /// Makes a random password, stores it with `--set`, and prints it only when asked.
    struct GenerateSecret: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "generate",
            abstract: "Make a random password: printed (without --set), or stored as the item (--set) and printed only with --print.",
            discussion: """
                Each character is drawn uniformly from the classes given (--classes, default \
                lower,upper,digits,symbols; symbols are the 32 printable ASCII punctuation marks), by rejection \
                sampling from the kernel's random generator, and every class given appears at least once. \
                --length is 8 to 1024 (default 24). With --set the item is created or replaced (its label and \
                comment kept, as `secret set` does); --new refuses an item that exists.
                """)

        @OptionGroup var store: StoreOptions
        @OptionGroup var item: ItemOptions

        @Option(help: ArgumentHelp("How many characters (8 to 1024).", valueName: "n"))
        var length = 24

        @Option(help: ArgumentHelp("The character classes, comma-separated: lower, upper, digits, symbols.", valueName: "classes"))
        var classes = "lower,upper,digits,symbols"

        @Flag(help: "Store it as the item (created or replaced).")
        var set = false

        @Flag(help: "With --set, print it too.")
        var print = false

        @Flag(help: "With --set, fail if the item exists instead of replacing it.")
        var new = false

        @Flag(name: .customLong("no-newline"), help: "Do not print a newline after the password.")
        var noNewline = false

        /// The characters of each class, by name.
        static let alphabets: [String: [UInt8]] = [
            "lower": Array("abcdefghijklmnopqrstuvwxyz".utf8),
            "upper": Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8),
            "digits": Array("0123456789".utf8),
            "symbols": Array("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~".utf8),
        ]

        func chosenClasses() throws -> [[UInt8]] {
            let names = classes.split(separator: ",").map { String($0.filter { $0 != " " }) }
            guard !names.isEmpty else { throw ValidationError("--classes names at least one of lower, upper, digits, symbols") }
            var seen: Set<String> = []
            return try names.map { name in
                guard let alphabet = Self.alphabets[name] else {
                    throw ValidationError("--classes: \(name.count <= 16 && name.allSatisfy(\.isLetter) ? "'\(name)'" : "a name") is not one of lower, upper, digits, symbols")
                }
                guard seen.insert(name).inserted else { throw ValidationError("--classes names \(name) twice") }
                return alphabet
            }
        }

        func validate() throws {
            guard (8...1024).contains(length) else { throw ValidationError("--length is 8 to 1024") }
            if (print || new) && !set { throw ValidationError("--print and --new go with --set (without it the password is printed)") }
            _ = try chosenClasses()
        }

        /// A uniform index below `bound` from random bytes (rejection sampling: no modulo bias).
        static func uniform(below bound: Int) throws -> Int {
            let limit = 65_536 - 65_536 % bound
            while true {
                let bytes = try Random.bytes(count: 2)
                let value = Int(bytes[0]) << 8 | Int(bytes[1])
                if value < limit { return value % bound }
            }
        }

        /// A password of `length` characters drawn uniformly from `classes` together, with each
        /// class present at least once (drawn again until it is: with 8 characters or more and
        /// these classes, a few draws at most).
        static func generate(length: Int, classes: [[UInt8]]) throws -> [UInt8] {
            let alphabet = classes.flatMap { $0 }
            while true {
                var password = try (0..<length).map { _ in alphabet[try uniform(below: alphabet.count)] }
                if classes.allSatisfy({ set in password.contains { set.contains($0) } }) { return password }
                cleanse(&password)
            }
        }

        func run() throws {
            var password = try Self.generate(length: length, classes: try chosenClasses())
            defer { cleanse(&password) }
            if set {
                let vault = try store.openStore()
                let attributes = ItemAttributes(key: item.key)
                try vault.perform([new ? .create(attributes, secret: Data(password)) : .upsert(attributes, secret: Data(password))])
                guard print else { return }
            }
            var output = password + (noNewline ? [] : [UInt8(ascii: "\n")])
            defer { cleanse(&output) }
            Terminal.write(output, to: .standardOutput)
        }
    }
}
