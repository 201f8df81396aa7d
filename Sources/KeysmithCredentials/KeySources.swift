import Keysmith
import KeysmithCrypto
import KeysmithSystem

/// Where the key that unlocks a store comes from, looked for in one order whatever the store
/// (the file vault, the PostgreSQL store's master key, the `keysmith` command):
///
/// 1. a keyfile given by the caller (the command's `--keyfile`), else `KEYSMITH_KEYFILE`;
/// 2. a passphrase on a file descriptor (`--passphrase-fd`);
/// 3. `KEYSMITH_PASSPHRASE`;
/// 4. a passphrase typed on the terminal, when a prompt is given and there is a terminal.
///
/// ```swift
/// // What `keysmith` does for a vault, as a Swift program:
/// guard let source = try KeySources(keyfile: nil, passphraseDescriptor: 3, prompt: "Vault passphrase: ").resolve() else {
///     throw KeysmithError(.storeLocked, "no key: give a keyfile or a passphrase")
/// }
/// let vault = try FileVault.open(at: path, credential: VaultCredential(source))
/// ```
public struct KeySources: Sendable {
    /// A keyfile's path given by the caller; it comes before every other source.
    public var keyfile: String?
    /// A descriptor to read a passphrase from (its first line).
    public var passphraseDescriptor: Int32?
    /// Whether `KEYSMITH_KEYFILE` and `KEYSMITH_PASSPHRASE` are read.
    public var readsEnvironment: Bool
    /// The prompt to type a passphrase at on the terminal (`/dev/tty`); `nil` never asks.
    public var prompt: String?

    /// The longest first line a passphrase descriptor may hold before it is refused.
    public static let maximumPassphraseLength = 1 << 20

    /// Sources to look in.
    ///
    /// - Parameters:
    ///   - keyfile: A keyfile's path that comes first; `nil` for none.
    ///   - passphraseDescriptor: A descriptor holding a passphrase; `nil` for none.
    ///   - readsEnvironment: Whether to read `KEYSMITH_KEYFILE` and `KEYSMITH_PASSPHRASE`.
    ///   - prompt: Ask on the terminal with this prompt when nothing else gives a key.
    public init(keyfile: String? = nil, passphraseDescriptor: Int32? = nil, readsEnvironment: Bool = true, prompt: String? = nil) {
        self.keyfile = keyfile
        self.passphraseDescriptor = passphraseDescriptor
        self.readsEnvironment = readsEnvironment
        self.prompt = prompt
    }

    /// The keyfile's path these sources name (the caller's, else a non-empty
    /// `KEYSMITH_KEYFILE`), without reading anything else.
    public var keyfilePath: String? {
        if let keyfile { return keyfile }
        if readsEnvironment, let path = System.environment("KEYSMITH_KEYFILE"), !path.isEmpty { return path }
        return nil
    }

    /// The first source that has a key, in the order above; `nil` when none does (the caller
    /// says what was expected: each store words it its own way).
    ///
    /// - Throws: `KeysmithError.Code.invalidArgument` when the descriptor cannot be read or its
    ///   first line is over ``maximumPassphraseLength``; a terminal that fails while reading.
    public func resolve() throws -> KeySource? {
        if let path = keyfilePath { return .keyfile(path: path) }
        if let descriptor = passphraseDescriptor {
            return .passphrase(try Self.readPassphrase(descriptor: descriptor), from: .descriptor(descriptor))
        }
        if readsEnvironment, let passphrase = System.environment("KEYSMITH_PASSPHRASE") {
            return .passphrase(Array(passphrase.utf8), from: .environment("KEYSMITH_PASSPHRASE"))
        }
        if let prompt, let typed = try Terminal.readHidden(prompt: prompt) { return .passphrase(typed, from: .terminal) }
        return nil
    }

    /// Reads a passphrase from a descriptor: everything up to the first newline (a `\r` before
    /// it dropped), or to the end. Reading stops at the read that brings the newline (what
    /// that read brought after it is wiped, not kept); a first line over
    /// ``maximumPassphraseLength`` is refused.
    ///
    /// - Throws: `KeysmithError.Code.invalidArgument` naming the descriptor.
    public static func readPassphrase(descriptor fd: Int32) throws -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        defer { cleanse(&chunk) }
        while true {
            let count = Terminal.read(fd: Descriptor(fd), into: &chunk)
            if count < 0 {
                cleanse(&bytes)
                throw KeysmithError.invalidArgument("cannot read a passphrase from file descriptor \(fd)")
            }
            if count == 0 { break }
            if let newline = chunk[..<count].firstIndex(of: UInt8(ascii: "\n")) {
                bytes += chunk[..<newline]
                break
            }
            bytes += chunk[..<count]
            guard bytes.count <= maximumPassphraseLength else {
                cleanse(&bytes)
                throw KeysmithError.invalidArgument("the passphrase on file descriptor \(fd) has no newline in its first \(maximumPassphraseLength >> 20) MiB")
            }
        }
        if bytes.last == UInt8(ascii: "\r") { bytes.removeLast() }
        return bytes
    }

    /// A passphrase for something about to be made (a vault, a database's master key, a
    /// credential change) from the environment variable `name`, when it is set. Refused when
    /// its bytes are not UTF-8 or it holds a line break: `--passphrase-fd` reads raw bytes to
    /// the first newline and a prompt reads one line, so neither could ever give that
    /// passphrase back, and the store would open from the environment only.
    ///
    /// - Throws: `KeysmithError.Code.invalidArgument` naming the variable (never its value).
    public static func newPassphrase(fromEnvironment name: String) throws -> String? {
        guard let value = System.environment(name) else { return nil }
        return try KeySource.passphrase(Array(value.utf8), from: .environment(name)).passphraseText(making: true)
    }
}

/// Where a key was found: a keyfile, or a passphrase and where it came from. Printed, dumped
/// or logged it shows the keyfile's path or the passphrase's origin, never the passphrase.
public enum KeySource: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// A keyfile of 64 hexadecimal digits (256 bits), read by the store that uses it.
    case keyfile(path: String)
    /// A passphrase's bytes (wipe them with ``wipe()`` when done) and where they came from.
    case passphrase([UInt8], from: PassphraseOrigin)

    /// `keyfile at PATH` or `passphrase from ORIGIN`; never the passphrase.
    public var description: String {
        switch self {
        case .keyfile(let path): "keyfile at \(path)"
        case .passphrase(_, let origin): "passphrase from \(origin)"
        }
    }

    /// The same as ``description``.
    public var debugDescription: String { description }

    /// The description alone (so `dump` and debuggers never show the bytes).
    public var customMirror: Mirror { Mirror(self, children: ["source": description], displayStyle: .enum) }

    /// Overwrites a passphrase's bytes (once the store's credential holds its own copy) and
    /// leaves an empty passphrase from the same origin; a keyfile is left as it is.
    public mutating func wipe() {
        guard case .passphrase(var bytes, let origin) = self else { return }
        self = .passphrase([], from: origin)  // first, so that `bytes` is the only reference
        cleanse(&bytes)
    }

    /// Where a passphrase came from; what an error names instead of the passphrase.
    public enum PassphraseOrigin: Sendable, Hashable, CustomStringConvertible {
        /// A file descriptor, and the option that named it (in errors).
        case descriptor(Int32, option: String = "--passphrase-fd")
        /// An environment variable, by name.
        case environment(String)
        /// Typed on the terminal.
        case terminal

        /// The descriptor's option (`--passphrase-fd`), the variable's name, or `the typed passphrase`.
        public var description: String {
            switch self {
            case .descriptor(_, let option): option
            case .environment(let name): name
            case .terminal: "the typed passphrase"
            }
        }
    }

    /// The passphrase as text, for a store whose passphrase is text (the PostgreSQL store's
    /// master passphrase). With `making` (a key about to be made from it), bytes that are not
    /// UTF-8 are refused, as is a variable ``KeySources/newPassphrase(fromEnvironment:)``
    /// refuses: read as text they would change, so two byte strings would be one key. Without
    /// it they are read as Keysmith always read them (a database made that way still opens).
    /// `nil` for a keyfile.
    ///
    /// - Throws: `KeysmithError.Code.invalidArgument` naming the origin.
    public func passphraseText(making: Bool) throws -> String? {
        guard case .passphrase(let bytes, let origin) = self else { return nil }
        if making, case .environment(let name) = origin {
            // The same refusals as a new passphrase from the variable, on the bytes carried (a
            // variable read as text holds U+FFFD where its bytes were not UTF-8: asked of the
            // environment when it still names them).
            if String(validating: bytes, as: UTF8.self) == nil || (bytes.contains(0xEF) && System.environmentIsNotUTF8(name)) {
                throw KeysmithError.invalidArgument("\(name) is not UTF-8 text, so --passphrase-fd and the prompt could never give it back; nothing was created or changed")
            }
            if bytes.contains(UInt8(ascii: "\n")) || bytes.contains(UInt8(ascii: "\r")) {
                throw KeysmithError.invalidArgument(
                    "\(name) holds a line break, which --passphrase-fd and the prompt can never give back; nothing was created or changed")
            }
        } else if making, String(validating: bytes, as: UTF8.self) == nil {
            throw KeysmithError.invalidArgument(
                "\(origin) is not UTF-8 text: a PostgreSQL master passphrase is text, and reading these bytes as text would change them; nothing was created or changed (use a keyfile for a binary key)")
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// A keyfile: 64 hexadecimal digits (a 256-bit key), optionally followed by a newline; the
/// format of a vault's keyfile and of the PostgreSQL store's master keyfile.
public enum Keyfile {
    /// The 32 bytes of the keyfile at `path`; the caller wipes them when done.
    ///
    /// - Throws: `KeysmithError.Code.storeUnavailable` when there is no file at `path`;
    ///   `KeysmithError.Code.invalidArgument` when it is not 64 hexadecimal digits or the path
    ///   is empty; `KeysmithError.Code.ioFailure` when it cannot be read.
    public static func read(at path: String) throws -> [UInt8] {
        guard !path.isEmpty else { throw KeysmithError.invalidArgument("the keyfile's path is empty") }
        var bytes: [UInt8]
        do {
            guard let read = try System.readFile(path) else {
                // Not a wrong credential (exit 4): no credential at all, like a missing vault.
                throw KeysmithError(.storeUnavailable, "the keyfile \(path) does not exist; give the right --keyfile, or make one with `keysmith init --keyfile`")
            }
            bytes = read
        } catch let error as SystemError {
            throw KeysmithError(.ioFailure, "cannot read the keyfile: \(error)")
        }
        defer { cleanse(&bytes) }
        var text = bytes
        while let last = text.last, last == UInt8(ascii: "\n") || last == UInt8(ascii: "\r") { text.removeLast() }
        defer { cleanse(&text) }
        guard text.count == 64, let key = [UInt8](hex: String(decoding: text, as: UTF8.self)) else {
            throw KeysmithError.invalidArgument("the keyfile \(path) is not 64 hexadecimal digits; make one with `keysmith init --keyfile`")
        }
        return key
    }

    /// Writes a new keyfile of 32 random bytes (64 hexadecimal digits and a newline), mode 0600,
    /// and refuses to overwrite a file that exists. Directories on its path that do not exist
    /// yet are made, mode 0700 (`~/.config` on a fresh home); existing ones are left as they are. It is written whole into a temporary file
    /// beside it, synced and then linked into place: a crash leaves no keyfile or a complete
    /// one, never an empty one that a rerun would refuse.
    ///
    /// ```swift
    /// try Keyfile.generate(at: "/etc/app/keysmith.key")
    /// let key = try Keyfile.read(at: "/etc/app/keysmith.key")   // the same 32 bytes
    /// ```
    ///
    /// - Parameter path: Where to write it.
    /// - Throws: `KeysmithError.Code.duplicateItem` if the file exists;
    ///   `KeysmithError.Code.ioFailure` if it cannot be written.
    public static func generate(at path: String) throws {
        var key = try randomBytes(32)
        var text = Array((key.hexString + "\n").utf8)
        defer {
            cleanse(&key)
            cleanse(&text)
        }
        let directory = path.contains("/") ? String(path[..<path.lastIndex(of: "/")!]) : "."
        let temporary = (directory.isEmpty ? "" : directory) + "/.tmp-keyfile-\(System.processID)-\(try randomBytes(6).hexString)"
        defer { try? System.unlink(temporary) }
        do {
            if !directory.isEmpty, directory != "." {
                var current = directory.hasPrefix("/") ? "" : "."
                for component in directory.split(separator: "/") {
                    current += "/" + component
                    _ = try System.mkdir(current, mode: 0o700)
                }
            }
            let fd = try System.open(temporary, flags: OpenFlags.writeOnly | OpenFlags.create | OpenFlags.exclusive, mode: 0o600)
            defer { System.close(fd) }
            try System.writeAll(fd, text, path: temporary)
            try System.fsync(fd, path: temporary)
            try System.link(temporary, path)  // never replaces a file that exists
            try System.fsyncDirectory(directory.isEmpty ? "/" : directory)
        } catch let error as SystemError where error.isAlreadyExists {
            throw KeysmithError(.duplicateItem, "the keyfile \(path) already exists; it was left as it is")
        } catch let error as SystemError {
            throw KeysmithError(.ioFailure, "cannot write the keyfile: \(error)")
        }
    }

    private static func randomBytes(_ count: Int) throws -> [UInt8] {
        try keysmithCrypto { try Random.bytes(count: count) }
    }
}

/// Runs crypto code and turns its failures into Keysmith errors (`ioFailure`, "cryptography
/// failed: …"): the one mapping of KeysmithCrypto's errors, for this module and the vault.
package func keysmithCrypto<T>(_ body: () throws -> T) throws -> T {
    do {
        return try body()
    } catch let error as CryptoError {
        throw KeysmithError(.ioFailure, "cryptography failed: \(error)")
    }
}
