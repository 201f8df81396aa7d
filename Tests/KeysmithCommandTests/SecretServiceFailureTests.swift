import Foundation
import Testing

/// The Secret Service when it is not there, locked, or hung: each a clear error within the
/// deadline. Each test starts its own private D-Bus session (and daemon), so nothing is shared.
@Suite("the keysmith command: Secret Service failures", .serialized)
struct SecretServiceFailureTests {
    /// Runs a bash script with `$K` set to the keysmith binary; returns status, output and seconds.
    func script(_ body: String) throws -> (status: Int32, output: String, seconds: Double) {
        let process = Process()
        // The test runner ignores SIGTERM, and children inherit that; restore the default so
        // the daemons the script starts (and dbus-run-session's bus) can be stopped.
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["--default-signal", "/bin/bash", "-c", body]
        var environment = ProcessInfo.processInfo.environment
        environment["K"] = Keysmith.binary
        // Starts a private, unlocked gnome-keyring-daemon (pid in $daemon) and stores one item, s/a.
        environment["PRIVATE_KEYRING"] = """
            home=$(mktemp -d); export HOME=$home XDG_DATA_HOME=$home/data XDG_RUNTIME_DIR=$home/run; mkdir -p $XDG_RUNTIME_DIR
            printf pw | gnome-keyring-daemon --foreground --unlock --components=secrets >/dev/null 2>&1 & daemon=$!
            # Wait until this daemon owns the name; asking for it any other way would let D-Bus
            # activate a second, locked daemon instead.
            for i in $(seq 1 100); do
                dbus-send --session --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus \
                    org.freedesktop.DBus.NameHasOwner string:org.freedesktop.secrets 2>/dev/null | grep -q 'boolean true' && break
                sleep 0.1
            done
            printf s | "$K" secret set --backend secret-service --service s --account a || exit 90
            """
        environment.removeValue(forKey: "DBUS_SESSION_BUS_ADDRESS")
        environment.removeValue(forKey: "KEYSMITH_INSIDE_DBUS_SESSION")
        environment["XDG_RUNTIME_DIR"] = FileManager.default.temporaryDirectory.appendingPathComponent("ksm-no-runtime-\(UUID().uuidString)").path
        process.environment = environment
        // Output to a file, not a pipe: daemons the script starts must not keep a pipe open.
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("ksm-failure-\(UUID().uuidString).log")
        #expect(FileManager.default.createFile(atPath: log.path, contents: nil))
        defer { try? FileManager.default.removeItem(at: log) }
        let handle = try FileHandle(forWritingTo: log)
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle.nullDevice
        let start = Date()
        try process.run()
        process.waitUntilExit()
        try handle.close()
        return (process.terminationStatus, try String(contentsOf: log, encoding: .utf8), Date().timeIntervalSince(start))
    }

    /// The milliseconds a script printed as `ELAPSED_MS: n` (keysmith alone, timed inside the
    /// script: the time to start the script itself is the machine's, not keysmith's).
    static func elapsed(_ output: String) -> Int {
        output.split(separator: "\n").first { $0.hasPrefix("ELAPSED_MS: ") }.flatMap { Int($0.dropFirst(12)) } ?? 99_999
    }

    @Test("no D-Bus session at all: exit 5 at once, saying so")
    func noSession() throws {
        // A deadline far longer than the bound: giving up at once is not waiting for it.
        let result = try script(#"""
            start=$(date +%s%N)
            "$K" secret list --backend secret-service --timeout 60
            status=$?
            echo "ELAPSED_MS: $(( ($(date +%s%N) - start) / 1000000 ))"
            exit $status
            """#)
        #expect(result.status == 5, "\(result.output)")
        #expect(result.output.contains("no D-Bus session bus"))
        #expect(Self.elapsed(result.output) < 20_000, "\(result.output)")
    }

    @Test("a D-Bus session without a Secret Service: exit 5 within the deadline, saying so")
    func noService() throws {
        // A bare bus that cannot start services (no service directories), so nothing answers.
        let result = try script(#"""
            dir=$(mktemp -d)
            cat > "$dir/bus.conf" <<EOF
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN" "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig><type>session</type><listen>unix:dir=$dir</listen>
            <policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy></busconfig>
            EOF
            dbus-daemon --config-file="$dir/bus.conf" --fork --print-address=4 --print-pid=3 3>"$dir/pid" 4>"$dir/address" </dev/null >/dev/null 2>&1
            start=$(date +%s%N)
            DBUS_SESSION_BUS_ADDRESS=$(head -1 "$dir/address") "$K" secret list --backend secret-service --timeout 3
            status=$?
            echo "ELAPSED_MS: $(( ($(date +%s%N) - start) / 1000000 ))"
            kill -9 "$(cat "$dir/pid")" 2>/dev/null
            rm -rf "$dir"
            exit $status
            """#)
        #expect(result.status == 5, "\(result.output)")
        #expect(result.output.contains("no Secret Service is running"))
        // Within its 3 s deadline and the time to start (D-Bus itself would wait 25 s).
        #expect(Self.elapsed(result.output) < 12_000, "\(result.output)")
    }

    @Test("a locked collection: exit 5 naming the lock; auto falls back to the vault")
    func locked() throws {
        let result = try script(#"""
            exec dbus-run-session -- bash -c '
                eval "$PRIVATE_KEYRING"
                dbus-send --session --print-reply --dest=org.freedesktop.secrets /org/freedesktop/secrets \
                    org.freedesktop.Secret.Service.Lock array:objpath:/org/freedesktop/secrets/aliases/default >/dev/null
                "$K" secret get --backend secret-service --service s --account a --timeout 3
                status=$?
                "$K" init --vault $home/v --keyfile $home/k >/dev/null
                echo "AUTO: $("$K" backend --backend auto --vault $home/v --keyfile $home/k)"
                kill $daemon; rm -rf $home; exit $status' 2>&1
            """#)
        #expect(result.status == 5, "\(result.output)")
        #expect(result.output.contains("locked"))
        #expect(result.output.contains("AUTO: vault"))
    }

    @Test("migrate --json prints one document naming what was copied")
    func migrateJSON() throws {
        let result = try script(#"""
            exec dbus-run-session -- bash -c '
                eval "$PRIVATE_KEYRING"
                "$K" init --vault $home/v --keyfile $home/k >/dev/null
                echo "REPORT: $("$K" migrate --from secret-service --to vault --vault $home/v --keyfile $home/k --json)"
                status=$?
                kill $daemon; rm -rf $home; exit $status' 2>&1
            """#)
        #expect(result.status == 0, "\(result.output)")
        let line = try #require(result.output.split(separator: "\n").first { $0.hasPrefix("REPORT: ") }, "\(result.output)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(line.dropFirst(8).utf8)) as? [String: Any])
        #expect((report["copied"] as? [String])?.count == 1 && report["dry_run"] as? Bool == false, "\(report)")
        #expect(report["already_present"] as? [String] == [])
    }

    @Test("a daemon that stops answering mid-session: a timeout error (exit 12) within the deadline, no hang")
    func hungDaemon() throws {
        let result = try script(#"""
            exec dbus-run-session -- bash -c '
                eval "$PRIVATE_KEYRING"
                kill -STOP $daemon
                start=$(date +%s%N)
                "$K" secret get --backend secret-service --service s --account a --timeout 2
                status=$?
                echo "ELAPSED_MS: $(( ($(date +%s%N) - start) / 1000000 ))"
                kill -CONT $daemon; kill $daemon; rm -rf $home; exit $status' 2>&1
            """#)
        #expect(result.status == 12, "\(result.output)")
        #expect(result.output.contains("did not answer"))
        let elapsed = Self.elapsed(result.output)
        print("hung Secret Service: keysmith gave up after \(elapsed) ms (deadline 2000 ms)")
        // Its 2 s deadline and the time to start, on a loaded machine (D-Bus would wait 25 s).
        #expect(elapsed < 12_000)
    }
}
