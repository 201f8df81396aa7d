import AsyncHTTPClient
import Foundation
import Keysmith
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// One HTTP exchange with a provider, done carefully: `https` (or `http` to loopback only),
/// TLS verified against the system's roots or the provider's, no redirect followed, a timeout
/// on the whole request, the answer read up to a bound. Async: no thread waits on the network.
struct ProviderHTTP: Sendable {
    /// The most an answer may hold (a token response is a few kilobytes).
    static let responseLimit = 256 * 1024
    /// A request's whole time, connection included.
    var timeout: Duration = .seconds(30)
    /// The PEM roots to trust instead of the system's.
    var trustedRoots: String?

    struct Response: Sendable {
        var status: Int
        var headers: [(String, String)]
        var body: [UInt8]

        func header(_ name: String) -> String? {
            headers.first { $0.0.lowercased() == name.lowercased() }?.1
        }

        /// `Retry-After` in seconds (a number; a date is read as 60 s).
        var retryAfter: Int? {
            guard let value = header("Retry-After")?.trimmingCharacters(in: .whitespaces) else { return nil }
            if let seconds = Int(value), seconds >= 0 { return min(seconds, 3600) }
            return 60
        }
    }

    /// POSTs a form (`application/x-www-form-urlencoded`), with HTTP Basic credentials when given.
    func post(_ url: EndpointURL, form: [(String, String)], basic: (user: String, password: [UInt8])? = nil) async throws -> Response {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        if let basic {
            // RFC 6749 §2.3.1: each part form-encoded, then joined and base64-encoded.
            let pair = Array(FormEncoding.encode(basic.user).utf8) + [UInt8(ascii: ":")] + Array(FormEncoding.encode(bytes: basic.password).utf8)
            headers.add(name: "Authorization", value: "Basic " + Data(pair).base64EncodedString())
        }
        return try await send(url, method: .POST, headers: headers, body: Array(FormEncoding.form(form).utf8))
    }

    /// GETs a document.
    func get(_ url: EndpointURL) async throws -> Response {
        try await send(url, method: .GET, headers: HTTPHeaders(), body: nil)
    }

    private func send(_ url: EndpointURL, method: HTTPMethod, headers: HTTPHeaders, body: [UInt8]?) async throws -> Response {
        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow
        configuration.decompression = .disabled
        configuration.timeout = HTTPClient.Configuration.Timeout(connect: .seconds(10), read: .seconds(Int64(timeout.components.seconds)))
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateVerification = .fullVerification
        if let trustedRoots { tls.trustRoots = .file(trustedRoots) }
        configuration.tlsConfiguration = tls
        let client = HTTPClient(eventLoopGroupProvider: .shared(MultiThreadedEventLoopGroup.singleton), configuration: configuration)
        do {
            // The whole exchange, body included, within `timeout`: the client's own deadline ends
            // when the response's head arrives, and a body sent a byte at a time never trips its
            // idle read timeout.
            let limit = timeout
            let response = try await withThrowingTaskGroup(of: Response?.self) { group in
                group.addTask { try await exchange(client, url, method: method, headers: headers, body: body) }
                group.addTask {
                    try await Task.sleep(for: limit)
                    return nil
                }
                defer { group.cancelAll() }
                guard let first = try await group.next(), let response = first else { throw HTTPClientError.deadlineExceeded }
                return response
            }
            try? await client.shutdown()
            return response
        } catch {
            try? await client.shutdown()
            throw Self.describe(error, url: url)
        }
    }

    private func exchange(_ client: HTTPClient, _ url: EndpointURL, method: HTTPMethod, headers: HTTPHeaders, body: [UInt8]?) async throws -> Response {
        var request = HTTPClientRequest(url: url.text)
        request.method = method
        request.headers = headers
        request.headers.add(name: "Accept", value: "application/json")
        request.headers.add(name: "User-Agent", value: "keysmith/\(Keysmith.version)")
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        let seconds = Int64(timeout.components.seconds)
        let response = try await client.execute(request, timeout: .seconds(seconds))
        var buffer = try await response.body.collect(upTo: Self.responseLimit)
        return Response(status: Int(response.status.code), headers: response.headers.map { ($0.name, $0.value) },
                        body: buffer.readBytes(length: buffer.readableBytes) ?? [])
    }

    /// A transport failure in words, with its kind; never the request's body.
    static func describe(_ error: any Error, url: EndpointURL) -> ProviderError {
        if let error = error as? ProviderError { return error }
        let host = OneLine.escaped(url.host)
        if error is NIOTooManyBytesError {
            return ProviderError(.badResponse, "the answer of \(host) is over \(responseLimit / 1024) KiB; nothing was kept")
        }
        if let error = error as? HTTPClientError {
            switch error {
            case .connectTimeout, .readTimeout, .writeTimeout, .deadlineExceeded, .tlsHandshakeTimeout, .getConnectionFromPoolTimeout:
                return ProviderError(.timedOut, "\(host) did not answer in time")
            case .remoteConnectionClosed:
                return ProviderError(.unreachable, "\(host) closed the connection before answering")
            default:
                return ProviderError(.unreachable, "the request to \(host) failed (\(OneLine.escaped(String(String(describing: error).prefix(120)))))")
            }
        }
        if error is NIOSSLError || error is NIOSSLExtraError || error is BoringSSLError {
            return ProviderError(.tls, "TLS with \(host) failed: its certificate did not verify against the trusted roots, or does not name \(host)")
        }
        if let error = error as? NIOConnectionError {
            if error.dnsAError != nil || error.dnsAAAAError != nil, error.connectionErrors.isEmpty {
                return ProviderError(.unreachable, "the host name \(host) was not found")
            }
            return ProviderError(.unreachable, "\(host) refused the connection, or cannot be reached")
        }
        if let error = error as? IOError, error.errnoCode == ECONNREFUSED {
            return ProviderError(.unreachable, "\(host) refused the connection")
        }
        if error is CancellationError { return ProviderError(.abandoned, "the request to \(host) was cancelled") }
        return ProviderError(.unreachable, "the request to \(host) failed (\(String(describing: type(of: error))))")
    }
}

/// `application/x-www-form-urlencoded` (the WHATWG form encoding RFC 6749 §B means).
enum FormEncoding {
    static func encode(_ text: String) -> String { encode(bytes: Array(text.utf8)) }

    static func encode(bytes: [UInt8]) -> String {
        var out = ""
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "*"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: " "): out += "+"
            default: out += String(format: "%%%02X", byte)
            }
        }
        return out
    }

    static func form(_ fields: [(String, String)]) -> String {
        fields.map { encode($0.0) + "=" + encode($0.1) }.joined(separator: "&")
    }
}
