import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The test authorization server (django-oauth-toolkit, scripts/oauth_server), a process of
/// this test's own on 127.0.0.1: refresh tokens rotate with reuse protection and no grace
/// period, PKCE is required. Stopped by its PID (``stop()``), and started again on its port and
/// database (``start()``).
public final class OAuthTestServer: @unchecked Sendable {
    public let state: String
    public private(set) var url = ""
    public private(set) var port = 0
    public private(set) var clientSecret = ""
    let accessSeconds: Int
    private var process: SpawnedProcess?

    /// Whether scripts/with-oauth-server.sh set the suite up.
    public static var available: Bool { ProcessInfo.processInfo.environment["KEYSMITH_TEST_OAUTH_PYTHON"] != nil }

    /// Starts a server whose access tokens live `accessSeconds`.
    public init(accessSeconds: Int = 3600) throws {
        self.accessSeconds = accessSeconds
        state = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-oauth-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try start()
    }

    /// Starts the server (again, on the same port and database when it ran before).
    public func start() throws {
        let environment = ProcessInfo.processInfo.environment
        guard let python = environment["KEYSMITH_TEST_OAUTH_PYTHON"], let script = environment["KEYSMITH_TEST_OAUTH_SERVER"] else {
            throw TestServerError("KEYSMITH_TEST_OAUTH_PYTHON is not set: run the tests under scripts/with-oauth-server.sh")
        }
        try? FileManager.default.removeItem(atPath: state + "/server.json")
        var serverEnvironment = environment
        serverEnvironment["KEYSMITH_OAUTH_STATE"] = state
        serverEnvironment["KEYSMITH_OAUTH_ACCESS_SECONDS"] = String(accessSeconds)
        if port != 0 { serverEnvironment["KEYSMITH_OAUTH_PORT"] = String(port) }
        let started = try SpawnedProcess(python, [script], environment: serverEnvironment, standardOutput: .file(state + "/stdout.log"),
                                         standardError: .file(state + "/stderr.log"), deadline: 3600)
        process = started
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            if let data = FileManager.default.contents(atPath: state + "/server.json"),
               let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
               let url = object["url"] as? String, let port = object["port"] as? Int, let secret = object["client_secret"] as? String
            {
                self.url = url
                self.port = port
                self.clientSecret = secret
                return
            }
            guard started.isRunning else {
                let log = (try? String(contentsOfFile: state + "/stderr.log", encoding: .utf8)) ?? ""
                throw TestServerError("the test authorization server exited at start: \(log.suffix(2000))")
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw TestServerError("the test authorization server did not start within 60 s")
    }

    /// Stops the server (SIGKILL: nothing of it is left to answer).
    public func stop() {
        guard let process else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        self.process = nil
    }

    /// Stops the server and removes its files.
    public func destroy() {
        stop()
        try? FileManager.default.removeItem(atPath: state)
    }

    /// A request to the server, as a test (not Keysmith) makes it: the status and the JSON body.
    @discardableResult
    public func request(_ path: String, form: [String: String]? = nil, basic: (String, String)? = nil,
                        headers: [String: String] = [:]) throws -> (status: Int, json: [String: Any]) {
        var request = URLRequest(url: URL(string: url + path)!)
        request.timeoutInterval = 30
        if let form {
            request.httpMethod = "POST"
            request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
            var allowed = CharacterSet.alphanumerics
            allowed.insert(charactersIn: "-._~")
            request.httpBody = Data(form.map { "\($0.key)=\($0.value.addingPercentEncoding(withAllowedCharacters: allowed)!)" }
                .joined(separator: "&").utf8)
        }
        if let basic {
            request.setValue("Basic " + Data("\(basic.0):\(basic.1)".utf8).base64EncodedString(), forHTTPHeaderField: "Authorization")
        }
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let result = Mutex<(Int, Data)?>(nil)
        let done = DispatchSemaphore(value: 0)
        URLSession.shared.dataTask(with: request) { data, response, _ in
            result.withLock { $0 = ((response as? HTTPURLResponse)?.statusCode ?? 0, data ?? Data()) }
            done.signal()
        }.resume()
        guard done.wait(timeout: .now() + 40) == .success, let (status, data) = result.withLock({ $0 }) else {
            throw TestServerError("no answer from the test authorization server at \(path)")
        }
        return (status, (try? JSONSerialization.jsonObject(with: data) as? [String: Any]) ?? [:])
    }

    /// A user's grant for the `ks-password` client by the password grant: a token response
    /// with a refresh token, as JSON text (what `keysmith token import` reads).
    public func passwordGrant(user: String = "alice", scope: String = "read write") throws -> String {
        let (status, json) = try request("/token/", form: ["grant_type": "password", "username": user, "password": "pw-" + user, "scope": scope],
                                         basic: ("ks-password", clientSecret))
        guard status == 200 else { throw TestServerError("the password grant failed: HTTP \(status) \(json)") }
        let data = try JSONSerialization.data(withJSONObject: json)
        return String(decoding: data, as: UTF8.self)
    }

    /// Whether the provider still takes a refresh token (django-oauth-toolkit introspects access
    /// tokens only). Using it spends it: ask only of a token that should be dead.
    public func refreshWorks(_ refreshToken: String) throws -> Bool {
        try request("/token/", form: ["grant_type": "refresh_token", "refresh_token": refreshToken], basic: ("ks-password", clientSecret)).status == 200
    }

    /// Whether the provider says a token is active (introspection as the `ks-password` client).
    public func isActive(_ token: String) throws -> Bool {
        let (status, json) = try request("/introspect/", form: ["token": token], basic: ("ks-password", clientSecret))
        guard status == 200 else { throw TestServerError("introspection failed: HTTP \(status)") }
        return json["active"] as? Bool ?? false
    }
}

import Synchronization

public struct TestServerError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
