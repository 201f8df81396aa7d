import Foundation
import Keysmith
import KeysmithProvider
import KeysmithTestSupport
import KeysmithTokens
import Testing

/// A provider that answers wrongly: each answer is a clear error of its kind, nothing is kept,
/// nothing crashes, and nothing the server wrote reaches a message unescaped.
@Suite("providers: bad answers", .enabled(if: OAuthTestServer.available))
struct BadProviderTests {
    /// The misbehaving server (scripts/oauth_server/bad_server.py), on a port of its own.
    final class BadServer {
        let process: SpawnedProcess
        let url: String
        let directory: String

        init() throws {
            let environment = ProcessInfo.processInfo.environment
            let python = try #require(environment["KEYSMITH_TEST_OAUTH_PYTHON"])
            let script = URL(fileURLWithPath: try #require(environment["KEYSMITH_TEST_OAUTH_SERVER"])).deletingLastPathComponent().path + "/bad_server.py"
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-bad-\(UUID().uuidString.prefix(8))").path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            process = try SpawnedProcess(python, [script, directory + "/port"], standardError: .file(directory + "/err"), deadline: 600)
            var port: String?
            for _ in 0..<400 where port == nil {
                port = try? String(contentsOfFile: directory + "/port", encoding: .utf8)
                if port == nil { Thread.sleep(forTimeInterval: 0.025) }
            }
            url = "http://127.0.0.1:" + (try #require(port))
        }

        deinit {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    func signIn(_ server: BadServer, path: String, timeout: Duration = .seconds(60)) throws -> (ProviderSignIn, MemoryStore) {
        let store = MemoryStore()
        try ProviderRegistry(store: store).add(OAuthProvider(name: "bad", tokenEndpoint: server.url + path, clientID: "c"))
        return (try ProviderSignIn(keeper: TokenKeeper(store: store), provider: "bad", timeout: timeout), store)
    }

    @Test("each bad answer is a ProviderError of its kind, escaped onto one line, and nothing is kept", arguments: [
        ("/oversize", ProviderError.Kind.badResponse, "over 256 KiB"),
        ("/not-json", .badResponse, "not a JSON object"),
        ("/wrong-types", .badResponse, "not one Keysmith can keep"),
        ("/expires-fraction", .badResponse, "expires_in is not a whole number of seconds"),
        ("/missing", .badResponse, "has no access_token"),
        ("/trickle", .timedOut, "did not answer in time"),
        ("/redirect", .badResponse, "redirect (HTTP 302)"),
        ("/error", .rejected, "invalid_grant: line one\\nline two \\u{1B}[31mred"),
        ("/unavailable", .unreachable, "unavailable for now (HTTP 503)"),
        ("/unavailable-oauth", .unreachable, "unavailable for now (HTTP 503)"),
        ("/server-error-invalid-grant", .unreachable, "a server error, not a refusal"),
        ("/slow", .timedOut, "did not answer in time"),
    ])
    func badAnswers(path: String, kind: ProviderError.Kind, fragment: String) async throws {
        let server = try BadServer()
        // A short limit where running out of time is the answer; elsewhere a long one, so that a
        // loaded machine (the exchange waiting for a thread) is not taken for a slow server.
        let (signIn, store) = try signIn(server, path: path, timeout: kind == .timedOut ? .seconds(2) : .seconds(60))
        let error = await #expect(throws: ProviderError.self) {
            _ = try await signIn.clientCredentials(account: "a", scopes: [try Scope("read")])
        }
        #expect(error?.kind == kind, "\(String(describing: error))")
        #expect(error?.message.contains(fragment) == true, "\(String(describing: error?.message))")
        #expect(error?.message.contains("\n") == false && error?.message.contains("\u{1b}") == false)
        if path.hasPrefix("/unavailable") { #expect(error?.retryAfter == 7) }
        #expect(try store.search(ItemQuery(recordType: .oauthToken)).isEmpty)
    }

    @Test("a token endpoint whose error quotes what it was sent: the refresh token and the client secret become [token] in the message")
    func echoedSecrets() async throws {
        let server = try BadServer()
        let store = MemoryStore()
        let registry = ProviderRegistry(store: store)
        try registry.add(OAuthProvider(name: "bad", tokenEndpoint: server.url + "/echo", clientID: "c", clientAuthentication: .clientSecretPost),
                         clientSecret: Array("client-secret-xyz".utf8))
        let client = try ProviderClient(provider: try #require(try registry.provider(named: "bad")), registry: registry, timeout: .seconds(60))
        let error = await #expect(throws: ProviderError.self) { _ = try await client.refresh(refreshToken: "RT-very-secret-123") }
        #expect(error?.kind == .rejected && error?.oauthError == "invalid_grant")
        let message = error?.message ?? ""
        #expect(message.contains("you sent") && message.contains("[token]"), "\(message)")
        #expect(!message.contains("RT-very-secret-123") && !message.contains("client-secret-xyz"), "\(message)")
    }

    @Test("an answer whose extra fields cannot all be kept (over 64 KiB, a lone surrogate, a name twice) is kept without them")
    func extraFieldsDropped() async throws {
        let server = try BadServer()
        let (signIn, store) = try signIn(server, path: "/extra-fields")
        let token = try await signIn.clientCredentials(account: "a", scopes: [try Scope("read")])
        #expect(token.accessToken == "kept" && token.refreshToken == "r2")
        #expect(token.additionalFields.isEmpty, "\(token.additionalFields.keys)")
        #expect(try TokenKeeper(store: store).token(service: "bad", account: "a")?.refreshToken == "r2")
    }

    @Test("a good answer from the same server is kept (the harness is not what fails above)")
    func goodAnswer() async throws {
        let server = try BadServer()
        let (signIn, store) = try signIn(server, path: "/good")
        let token = try await signIn.clientCredentials(account: "a", scopes: [try Scope("read")])
        #expect(token.accessToken == "good")
        #expect(try TokenKeeper(store: store).token(service: "bad", account: "a")?.accessToken == "good")
    }

    @Test("endpoints are checked before anything is sent: http to another host, credentials in the URL, a fragment, another scheme")
    func endpointChecks() throws {
        for url in ["http://auth.example/token", "http://127.0.0.1.attacker.example/token", "http://127.0.0.attacker/token",
                    "https://user:pw@auth.example/token", "https://auth.example/token#x", "ftp://auth.example/token", "token"] {
            let error = #expect(throws: KeysmithError.self) { try OAuthProvider(name: "p", tokenEndpoint: url, clientID: "c").validate() }
            #expect(error?.code == .invalidArgument, "\(url)")
            #expect(error?.message.contains("pw") == false)
        }
        for url in ["https://auth.example/token", "http://127.0.0.1:8080/token", "http://localhost/token", "http://[::1]:9/token"] {
            #expect(throws: Never.self, "\(url)") { try OAuthProvider(name: "p", tokenEndpoint: url, clientID: "c").validate() }
        }
    }
}
