// swift-tools-version:6.2
// An example service that keeps its API keys in Keysmith's PostgreSQL store and authorizes each
// request with the policy engine from the caller's token scopes, following revocations made on
// any machine. Its own package, so the library's build does not carry Hummingbird.
//   cd Examples/ReportService && swift build -c release
import Foundation
import PackageDescription

// A path dependency's identity is its directory's name, whatever the checkout is called.
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .lastPathComponent

let package = Package(
    name: "ReportService",
    platforms: [.macOS(.v26)],
    dependencies: [
        .package(path: "../.."),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    ],
    targets: [
        .executableTarget(
            name: "ReportService",
            dependencies: [
                .product(name: "Keysmith", package: root),
                .product(name: "KeysmithCredentials", package: root),
                .product(name: "KeysmithPostgres", package: root),
                .product(name: "KeysmithPolicy", package: root),
                .product(name: "KeysmithTokens", package: root),
                .product(name: "KeysmithTokenPolicy", package: root),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
            ]
        )
    ]
)
