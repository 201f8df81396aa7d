import Foundation
import KeysmithTestSupport
import Testing

/// CLibSecret declares the part of libsecret's C API that Keysmith calls instead of including
/// libsecret's headers (libsecret is loaded on first use, never linked). These tests compile those
/// declarations beside the real headers, so a constant or a layout copied wrong fails here, not as
/// a misread error or a crash against a real Secret Service.
@Suite("CLibSecret's declarations match libsecret's and GLib's headers")
struct LibSecretABITests {
    static let shim = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Sources/CLibSecret/shim.h").path

    /// The C names of every function the table holds, read from the header.
    static func functionNames(_ header: String) throws -> [String] {
        let pattern = try NSRegularExpression(pattern: #"\(\* _Nonnull (\w+)\)|_Nonnull (\w+);"#)
        return pattern.matches(in: header, range: NSRange(header.startIndex..., in: header)).compactMap { match in
            (1...2).lazy.compactMap { Range(match.range(at: $0), in: header).map { String(header[$0]) } }.first
        }
    }

    /// The header's table of functions, renamed `CLibSecret_RealAPI`, with GLib's and
    /// libsecret's own types in place of the stand-ins.
    static func tableOverRealTypes(_ header: String) throws -> String {
        let start = try #require(header.range(of: "typedef struct CLibSecret_API {"))
        let end = try #require(header.range(of: "} CLibSecret_API;"))
        var table = String(header[start.lowerBound..<end.upperBound])
        // The flags argument's enum, by function.
        let flags = ["secret_service_get_sync": "SecretServiceFlags", "secret_collection_for_alias_sync": "SecretCollectionFlags",
                     "secret_collection_search_sync": "SecretSearchFlags", "secret_item_create_sync": "SecretItemCreateFlags",
                     "secret_schema_newv": "SecretSchemaFlags"]
        for (function, type) in flags {
            let field = try #require(table.range(of: "(* _Nonnull \(function))"))
            let flag = try #require(table.range(of: "int flags", range: field.upperBound..<table.endIndex))
            table.replaceSubrange(flag, with: "\(type) flags")
        }
        for name in ["gboolean", "GQuark", "GError", "GList", "GHashTable", "GCancellable", "SecretService", "SecretCollection",
                     "SecretItem", "SecretValue", "SecretSchema", "GHashFunc", "GEqualFunc", "GDestroyNotify"] {
            table = table.replacingOccurrences(of: "CLibSecret_\(name)", with: name)
        }
        return table.replacingOccurrences(of: "CLibSecret_API", with: "CLibSecret_RealAPI")
    }

    /// Runs a program and returns its status and output.
    static func run(_ executable: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let result = try spawnAndWait(executable, arguments, stdin: Data())
        return (result.status, String(decoding: result.stdout + result.stderr, as: UTF8.self))
    }

    @Test("every constant, struct layout and function name CLibSecret declares is libsecret's and GLib's")
    func declarationsMatchTheRealHeaders() throws {
        let header = try String(contentsOfFile: Self.shim, encoding: .utf8)
        let functions = try Self.functionNames(header)
        // The table is read whole by the loader: as many names as pointers.
        #expect(functions.count == 41, "\(functions)")
        #expect(Set(functions).count == functions.count)

        // The real headers' compile flags; the development package is installed by
        // scripts/bootstrap.sh for this test (and for nothing that is built).
        let flags = try Self.run("/usr/bin/env", ["pkg-config", "--cflags", "libsecret-1"])
        try #require(flags.status == 0, "pkg-config cannot find libsecret-1 (Debian: libsecret-1-dev): \(flags.output)")
        var checks = [
            "#include <libsecret/secret.h>", "#include <gio/gio.h>", "#include <stddef.h>", "#include \"\(Self.shim)\"",
            "#define SAME(a, b) _Static_assert((a) == (b), #a \" is not \" #b)",
        ]
        let constants = [
            ("CLibSecret_SERVICE_OPEN_SESSION", "SECRET_SERVICE_OPEN_SESSION"),
            ("CLibSecret_SERVICE_LOAD_COLLECTIONS", "SECRET_SERVICE_LOAD_COLLECTIONS"),
            ("CLibSecret_COLLECTION_LOAD_ITEMS", "SECRET_COLLECTION_LOAD_ITEMS"),
            ("CLibSecret_SEARCH_ALL", "SECRET_SEARCH_ALL"),
            ("CLibSecret_SEARCH_LOAD_SECRETS", "SECRET_SEARCH_LOAD_SECRETS"),
            ("CLibSecret_ITEM_CREATE_REPLACE", "SECRET_ITEM_CREATE_REPLACE"),
            ("CLibSecret_SCHEMA_DONT_MATCH_NAME", "SECRET_SCHEMA_DONT_MATCH_NAME"),
            ("CLibSecret_SCHEMA_ATTRIBUTE_STRING", "SECRET_SCHEMA_ATTRIBUTE_STRING"),
            ("CLibSecret_ERROR_IS_LOCKED", "SECRET_ERROR_IS_LOCKED"),
            ("CLibSecret_ERROR_NO_SUCH_OBJECT", "SECRET_ERROR_NO_SUCH_OBJECT"),
            ("CLibSecret_IO_ERROR_CANCELLED", "G_IO_ERROR_CANCELLED"),
            ("CLibSecret_IO_ERROR_TIMED_OUT", "G_IO_ERROR_TIMED_OUT"),
            ("CLibSecret_DBUS_ERROR_SERVICE_UNKNOWN", "G_DBUS_ERROR_SERVICE_UNKNOWN"),
            ("CLibSecret_DBUS_ERROR_NAME_HAS_NO_OWNER", "G_DBUS_ERROR_NAME_HAS_NO_OWNER"),
            ("CLibSecret_DBUS_ERROR_NO_REPLY", "G_DBUS_ERROR_NO_REPLY"),
            ("CLibSecret_DBUS_ERROR_TIMEOUT", "G_DBUS_ERROR_TIMEOUT"),
            ("CLibSecret_DBUS_ERROR_TIMED_OUT", "G_DBUS_ERROR_TIMED_OUT"),
            ("sizeof(CLibSecret_GError)", "sizeof(GError)"),
            ("offsetof(CLibSecret_GError, domain)", "offsetof(GError, domain)"),
            ("offsetof(CLibSecret_GError, code)", "offsetof(GError, code)"),
            ("offsetof(CLibSecret_GError, message)", "offsetof(GError, message)"),
            ("sizeof(CLibSecret_GList)", "sizeof(GList)"),
            ("offsetof(CLibSecret_GList, data)", "offsetof(GList, data)"),
            ("offsetof(CLibSecret_GList, next)", "offsetof(GList, next)"),
            ("offsetof(CLibSecret_GList, prev)", "offsetof(GList, prev)"),
            ("sizeof(CLibSecret_gboolean)", "sizeof(gboolean)"),
            ("sizeof(CLibSecret_GQuark)", "sizeof(GQuark)"),
            ("sizeof(CLibSecret_API)", "\(functions.count) * sizeof(void (*)(void))"),
        ]
        checks += constants.map { "SAME(\($0.0), \($0.1));" }
        // Each name is a function the real headers declare (an unknown name does not compile),
        // of the type declared here: the table's declarations written over the real types
        // (each opaque stand-in by the type it stands for, and each `int flags` by the flags
        // enum the real function takes) must be the real function's type, argument for argument.
        checks.append(try Self.tableOverRealTypes(header))
        checks.append("static void names(void) {")
        for name in functions {
            checks.append("    _Static_assert(__builtin_types_compatible_p(__typeof__(&\(name)), __typeof__(((CLibSecret_RealAPI *)0)->\(name))), "
                          + "\"\(name) is not declared as libsecret declares it\");")
        }
        checks.append("}")
        checks.append("int main(void) { (void)names; return 0; }")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-abi-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = directory.appendingPathComponent("check.c")
        try checks.joined(separator: "\n").write(to: source, atomically: true, encoding: .utf8)
        let arguments = flags.output.split(whereSeparator: \.isWhitespace).map(String.init)
            + ["-std=c11", "-Werror", "-fsyntax-only", source.path]
        let compiled = try Self.run("/usr/bin/env", ["clang"] + arguments)
        #expect(compiled.status == 0, "\(compiled.output)")

        // The same compile fails for one constant copied wrong: the check above can fail.
        let wrong = checks.joined(separator: "\n") + "\nSAME(CLibSecret_IO_ERROR_TIMED_OUT, G_IO_ERROR_CANCELLED);\n"
        try wrong.write(to: source, atomically: true, encoding: .utf8)
        let refused = try Self.run("/usr/bin/env", ["clang"] + arguments)
        #expect(refused.status != 0 && refused.output.contains("CLibSecret_IO_ERROR_TIMED_OUT is not G_IO_ERROR_CANCELLED"), "\(refused.output)")
        // And for a function declared with a wrong type (an argument dropped).
        let header2 = header.replacingOccurrences(of: "(* _Nonnull g_cancellable_cancel)(CLibSecret_GCancellable *cancellable)",
                                                  with: "(* _Nonnull g_cancellable_cancel)(void)")
        #expect(header2 != header)
        let shim2 = directory.appendingPathComponent("shim.h")
        try header2.write(to: shim2, atomically: true, encoding: .utf8)
        let mistyped = checks.joined(separator: "\n").replacingOccurrences(of: "#include \"\(Self.shim)\"", with: "#include \"\(shim2.path)\"")
            .replacingOccurrences(of: try Self.tableOverRealTypes(header), with: try Self.tableOverRealTypes(header2))
        try mistyped.write(to: source, atomically: true, encoding: .utf8)
        let wrongType = try Self.run("/usr/bin/env", ["clang"] + arguments)
        #expect(wrongType.status != 0 && wrongType.output.contains("g_cancellable_cancel is not declared as libsecret declares it"), "\(wrongType.output)")
        // And for a name no header declares.
        let unknown = checks.joined(separator: "\n") + "\nstatic void more(void) { (void)(void (*)(void))&secret_item_get_nothing; }\n"
        try unknown.write(to: source, atomically: true, encoding: .utf8)
        let undeclared = try Self.run("/usr/bin/env", ["clang"] + arguments)
        #expect(undeclared.status != 0 && undeclared.output.contains("secret_item_get_nothing"), "\(undeclared.output)")
    }
}
