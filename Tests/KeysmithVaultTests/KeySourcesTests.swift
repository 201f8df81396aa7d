import Foundation
import Glibc
import Keysmith
import KeysmithCredentials
import KeysmithVault
import Testing

/// The one order in which a store's key is looked for (KeySources), the keyfile format, and the
/// vault credential built from what was found. The environment variables' place in the order
/// is tested through the built command (CommandTests), which runs in a process of its own.
@Suite("key sources: one order for every store, and the keyfile format")
struct KeySourcesTests {
    /// A pipe whose read end holds `bytes` and is closed for writing.
    static func descriptor(holding bytes: [UInt8]) throws -> Int32 {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { throw POSIXError(.EIO) }
        var written = 0
        while written < bytes.count {
            let count = bytes[written...].withUnsafeBytes { write(ends[1], $0.baseAddress, $0.count) }
            guard count > 0 else { throw POSIXError(.EIO) }
            written += count
        }
        close(ends[1])
        return ends[0]
    }

    @Test("a keyfile given by the caller comes before a passphrase descriptor, which is left unread")
    func keyfileFirst() throws {
        let fd = try Self.descriptor(holding: Array("unread\n".utf8))
        defer { close(fd) }
        let source = try KeySources(keyfile: "/etc/keysmith/key", passphraseDescriptor: fd, readsEnvironment: false, prompt: nil).resolve()
        guard case .keyfile(let path)? = source else { Issue.record("got \(String(describing: source))"); return }
        #expect(path == "/etc/keysmith/key")
        var rest = [UInt8](repeating: 0, count: 16)
        #expect(read(fd, &rest, 16) == 7)
    }

    @Test("a descriptor gives its first line, a CR before the newline dropped, and nothing of the lines after it")
    func descriptorFirstLine() throws {
        let fd = try Self.descriptor(holding: Array("pass word\r\nsecond line\n".utf8))
        defer { close(fd) }
        let source = try KeySources(passphraseDescriptor: fd, readsEnvironment: false).resolve()
        guard case .passphrase(let bytes, let origin)? = source else { Issue.record("got \(String(describing: source))"); return }
        #expect(bytes == Array("pass word".utf8))
        #expect(origin == .descriptor(fd) && "\(origin)" == "--passphrase-fd")
    }

    @Test("no source and no prompt is nil (the caller says what it expected); a descriptor whose first line is over 1 MiB is refused naming the descriptor")
    func nothingOrTooLong() throws {
        #expect(try KeySources(readsEnvironment: false).resolve() == nil)
        let fd = try Self.descriptor(holding: [])
        defer { close(fd) }
        let empty = try KeySources(passphraseDescriptor: fd, readsEnvironment: false).resolve()
        guard case .passphrase(let bytes, _)? = empty else { Issue.record("got \(String(describing: empty))"); return }
        #expect(bytes.isEmpty)
        // Over the limit: written from another thread (a pipe holds 64 KiB).
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        let writer = ends[1]
        let thread = Thread {
            let chunk = [UInt8](repeating: UInt8(ascii: "a"), count: 65_536)
            for _ in 0..<20 where chunk.withUnsafeBytes({ write(writer, $0.baseAddress, $0.count) }) > 0 {}
            close(writer)
        }
        thread.start()
        let error = #expect(throws: KeysmithError.self) { try KeySources(passphraseDescriptor: ends[0], readsEnvironment: false).resolve() }
        // Drain to the writer's end before closing (a write to a pipe with no reader is SIGPIPE).
        var drain = [UInt8](repeating: 0, count: 65_536)
        while read(ends[0], &drain, drain.count) > 0 {}
        close(ends[0])
        #expect(error?.code == .invalidArgument && error?.message.contains("file descriptor \(ends[0])") == true)
        #expect(error?.message.contains("aaaa") == false)
    }

    @Test("a passphrase as text: bytes that are not UTF-8 are refused when a key is about to be made from them, naming where they came from, and read as before otherwise")
    func passphraseText() throws {
        let latin1: [UInt8] = [0x63, 0x61, 0x66, 0xE9]
        let fromOption = KeySource.passphrase(latin1, from: .descriptor(3, option: "--new-passphrase-fd"))
        let error = #expect(throws: KeysmithError.self) { try fromOption.passphraseText(making: true) }
        #expect(error?.code == .invalidArgument && error?.message.hasPrefix("--new-passphrase-fd is not UTF-8 text") == true)
        #expect(try fromOption.passphraseText(making: false) == "caf\u{FFFD}")
        // A passphrase said to come from a variable is judged by the bytes it carries.
        let broken = KeySource.passphrase(Array("two\nlines".utf8), from: .environment("MY_PASSPHRASE"))
        let lineBreak = #expect(throws: KeysmithError.self) { try broken.passphraseText(making: true) }
        #expect(lineBreak?.message.hasPrefix("MY_PASSPHRASE holds a line break") == true)
        let notText = #expect(throws: KeysmithError.self) { try KeySource.passphrase(latin1, from: .environment("MY_PASSPHRASE")).passphraseText(making: true) }
        #expect(notText?.message.hasPrefix("MY_PASSPHRASE is not UTF-8 text") == true)
        #expect(try KeySource.passphrase(Array("fine".utf8), from: .environment("UNSET_\(UUID().uuidString.prefix(6))")).passphraseText(making: true) == "fine")
        #expect(try KeySource.passphrase(Array("café".utf8), from: .terminal).passphraseText(making: true) == "café")
        #expect(try KeySource.keyfile(path: "/k").passphraseText(making: true) == nil)
    }

    @Test("a keyfile is 64 hexadecimal digits (either case), a newline or CRLF after them allowed; anything else is refused without repeating it, and a missing one is 'unavailable', not a wrong key")
    func keyfileFormat() throws {
        let directory = TemporaryDirectory()
        let digits = String(repeating: "0123456789abcdef", count: 4)
        let expected = [UInt8](hex: digits)!
        for (name, text) in [("plain", digits), ("newline", digits + "\n"), ("crlf", digits + "\r\n"), ("upper", digits.uppercased())] {
            try Data(text.utf8).write(to: URL(fileURLWithPath: directory.sub(name)))
            #expect(try Keyfile.read(at: directory.sub(name)) == expected, "\(name)")
        }
        for (name, text) in [("short", String(digits.dropLast())), ("long", digits + "00"), ("not-hex", String(digits.dropLast()) + "g"),
                             ("spaces", " " + digits)] {
            try Data(text.utf8).write(to: URL(fileURLWithPath: directory.sub(name)))
            let error = #expect(throws: KeysmithError.self) { try Keyfile.read(at: directory.sub(name)) }
            #expect(error?.code == .invalidArgument && error?.message.contains(digits.prefix(16)) == false, "\(name): \(String(describing: error))")
        }
        #expect((#expect(throws: KeysmithError.self) { try Keyfile.read(at: directory.sub("missing")) })?.code == .storeUnavailable)
        #expect((#expect(throws: KeysmithError.self) { try Keyfile.read(at: "") })?.code == .invalidArgument)
    }

    @Test("a key source printed, dumped or described never shows the passphrase; wiping it empties the bytes")
    func redaction() throws {
        var source = KeySource.passphrase(Array("hunter2-secret".utf8), from: .descriptor(3))
        var dumped = ""
        dump(source, to: &dumped)
        for shown in ["\(source)", String(describing: source), String(reflecting: source), dumped] {
            #expect(!shown.contains("hunter2") && !shown.contains("104"), "\(shown)")  // 104 = "h"
            #expect(shown.contains("passphrase from --passphrase-fd"), "\(shown)")
        }
        source.wipe()
        guard case .passphrase(let bytes, let origin) = source else { Issue.record("\(source)"); return }
        #expect(bytes.isEmpty && origin == .descriptor(3))
        #expect("\(KeySource.keyfile(path: "/etc/k"))" == "keyfile at /etc/k")
    }

    @Test("the vault credential made from what was found opens the vault made with the same passphrase bytes, or the same keyfile")
    func vaultCredentialFromSource() throws {
        let directory = TemporaryDirectory()
        let passphrase: [UInt8] = [0x70, 0xFF, 0x00, 0x77]  // not UTF-8, and a NUL: bytes as they are
        _ = try FileVault.create(at: directory.sub("p"), credential: .passphrase(bytes: passphrase), scrypt: .testing)
        let fd = try Self.descriptor(holding: passphrase + [0x0A])
        defer { close(fd) }
        let source = try #require(try KeySources(passphraseDescriptor: fd, readsEnvironment: false).resolve())
        _ = try FileVault.open(at: directory.sub("p"), credential: VaultCredential(source))
        let wrong = VaultCredential(.passphrase(Array("p".utf8), from: .terminal))
        #expect((#expect(throws: KeysmithError.self) { try FileVault.open(at: directory.sub("p"), credential: wrong) })?.code == .authenticationFailed)
        let keyfile = directory.sub("key")
        try VaultCredential.generateKeyfile(at: keyfile)
        _ = try FileVault.create(at: directory.sub("k"), credential: .keyfile(at: keyfile))
        _ = try FileVault.open(at: directory.sub("k"), credential: VaultCredential(.keyfile(path: keyfile)))
    }
}

@Suite("SecureRecord.secretMatches: a presented secret checked against the kept one")
struct PresentedSecretTests {
    static func record(_ secret: String) -> SecureRecord {
        SecureRecord(info: ItemInfo(attributes: ItemAttributes(key: .genericPassword(service: "api-keys", account: "c")), created: Date(), modified: Date()),
                     secret: Data(secret.utf8))
    }

    @Test("equal bytes match; a different byte anywhere, a prefix, a longer string or an empty one do not; an empty kept secret matches nothing")
    func matches() {
        let kept = Self.record("k-3f9a2b")
        #expect(kept.secretMatches(Array("k-3f9a2b".utf8)))
        for presented in ["K-3f9a2b", "k-3f9a2c", "k-3f9a2", "k-3f9a2b ", "", "k-3f9a2b\0"] {
            #expect(!kept.secretMatches(Array(presented.utf8)), "\(presented)")
        }
        #expect(!Self.record("").secretMatches([]))
        #expect(!Self.record("").secretMatches([0]))
    }
}
