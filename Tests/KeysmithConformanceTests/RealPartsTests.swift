import Foundation
import Testing

/// The suite runs against real parts (a private Secret Service, a private PostgreSQL server and
/// its binaries, cedarpy, git, openssl(1)). A fixture whose part is missing is skipped by its
/// suite's `.enabled(if:)`, which must never shrink a CI run silently: under `CI=true`, or
/// `KEYSMITH_REQUIRE_ALL_PARTS=1` (which scripts/test.sh sets), each missing part fails here, by name.
@Suite("the test suite's real parts")
struct RealPartsTests {
    static var required: Bool {
        let environment = ProcessInfo.processInfo.environment
        return environment["CI"] == "true" || environment["KEYSMITH_REQUIRE_ALL_PARTS"] == "1"
    }

    /// Whether `command` runs and exits 0.
    static func runs(_ command: [String]) -> Bool {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = command
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return false }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }

    /// Each part and whether it is here.
    static func parts() -> [(name: String, present: Bool)] {
        let environment = ProcessInfo.processInfo.environment
        return [
            ("a private Secret Service (KEYSMITH_TEST_SECRET_SERVICE=1, scripts/with-secret-service.sh)",
             environment["KEYSMITH_TEST_SECRET_SERVICE"] == "1"),
            ("a private PostgreSQL server (KEYSMITH_TEST_DATABASE_URL, scripts/with-postgres.sh)",
             environment["KEYSMITH_TEST_DATABASE_URL"].map { !$0.isEmpty } ?? false),
            ("PostgreSQL's binaries for private servers (KEYSMITH_TEST_POSTGRES_BIN)",
             environment["KEYSMITH_TEST_POSTGRES_BIN"].map { FileManager.default.isExecutableFile(atPath: $0 + "/initdb") } ?? false),
            ("cedarpy, the policy oracle (python3 -c 'import cedarpy')", runs(["python3", "-c", "import cedarpy"])),
            ("openssl(1), for the TLS tests' certificates", runs(["openssl", "version"])),
            ("git", runs(["git", "--version"])),
            ("the test authorization server, django-oauth-toolkit (KEYSMITH_TEST_OAUTH_PYTHON, scripts/with-oauth-server.sh)",
             environment["KEYSMITH_TEST_OAUTH_PYTHON"].map { runs([$0, "-c", "import oauth2_provider"]) } ?? false),
        ]
    }

    @Test("every real part the suite tests against is here: under CI=true a missing one fails, naming it, instead of shrinking the run")
    func everyPartIsHere() {
        let missing = Self.parts().filter { !$0.present }.map(\.name)
        if Self.required {
            for name in missing { Issue.record("missing real part: \(name); its tests would be skipped") }
        } else if !missing.isEmpty {
            print("note: the suites needing these are skipped in this run: \(missing.joined(separator: "; "))")
        }
    }
}
