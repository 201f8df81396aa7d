// swift-tools-version:6.2
import PackageDescription

let package = Package(
    name: "Keysmith",
    platforms: [.macOS(.v26)],  // the string byte views (utf8Span) need the Swift 6.2 library
    products: [
        .library(name: "Keysmith", targets: ["Keysmith"]),
        .library(name: "KeysmithCredentials", targets: ["KeysmithCredentials"]),
        .library(name: "KeysmithVault", targets: ["KeysmithVault"]),
        .library(name: "KeysmithSecretService", targets: ["KeysmithSecretService"]),
        .library(name: "KeysmithStores", targets: ["KeysmithStores"]),
        .library(name: "KeysmithTokens", targets: ["KeysmithTokens"]),
        .library(name: "KeysmithPolicy", targets: ["KeysmithPolicy"]),
        // Tokens as the policy engine reads them (the adapter between the two).
        .library(name: "KeysmithTokenPolicy", targets: ["KeysmithTokenPolicy"]),
        // A product of its own: only programs that use PostgreSQL pay for postgres-nio.
        .library(name: "KeysmithPostgres", targets: ["KeysmithPostgres"]),
        // OAuth providers: sign-in, single-flight refresh, revocation and introspection (HTTP).
        .library(name: "KeysmithProvider", targets: ["KeysmithProvider"]),
        .executable(name: "keysmith", targets: ["keysmith"]),
        .executable(name: "keysmith-net", targets: ["keysmith-net"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // Already built for postgres-nio; named for the PostgreSQL store's TLS settings.
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        // The provider's HTTP client (the Swift server ecosystem's, on the NIO postgres-nio uses).
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
    ],
    targets: [
        // C libraries: a module map and a shim header each. All unsafe calls into them stay in
        // the one Swift module that wraps each (KeysmithCrypto for OpenSSL).
        .systemLibrary(
            name: "COpenSSL",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        // Declarations only: libsecret is loaded when a Secret Service store is first opened
        // (dlopen), never linked, so nothing else pays for loading it.
        .systemLibrary(name: "CLibSecret"),

        // The core: capability protocols, item kinds, results, errors, the storage protocol,
        // the in-memory store and the static API. Depends on nothing.
        .target(name: "Keysmith"),

        // Package-internal wrappers around C: OpenSSL EVP and the POSIX file calls.
        .target(name: "KeysmithCrypto", dependencies: ["COpenSSL"]),
        .target(name: "KeysmithSystem"),

        // Where a store's key comes from (keyfile, descriptor, environment, terminal), in one
        // order for every store, and the keyfile format.
        .target(name: "KeysmithCredentials", dependencies: ["Keysmith", "KeysmithCrypto", "KeysmithSystem"]),

        // Backends.
        .target(
            name: "KeysmithVault",
            dependencies: ["Keysmith", "KeysmithCredentials", "KeysmithCrypto", "KeysmithSystem", .product(name: "Logging", package: "swift-log")]
        ),

        // A writer process for the vault's crash and concurrency tests (not a product).
        .executableTarget(name: "vault-stress", dependencies: ["Keysmith", "KeysmithVault", "KeysmithTokens"]),

        .target(
            name: "KeysmithSecretService",
            dependencies: ["Keysmith", "CLibSecret", "KeysmithSystem", .product(name: "Logging", package: "swift-log")]),

        // A process that races others on one store, for the conformance suite (not a product).
        .executableTarget(
            name: "store-race",
            dependencies: ["Keysmith", "KeysmithVault", "KeysmithSecretService", "KeysmithTokens", "KeysmithPostgres", "KeysmithProvider"]),

        // The choice of store: vault, Secret Service or auto.
        .target(name: "KeysmithStores", dependencies: ["Keysmith", "KeysmithVault", "KeysmithSecretService", "KeysmithSystem"]),

        // The shared store on PostgreSQL, encrypted on the client (docs/postgres.md).
        .target(
            name: "KeysmithPostgres",
            dependencies: [
                "Keysmith", "KeysmithCredentials", "KeysmithCrypto", "KeysmithSystem",
                .product(name: "PostgresNIO", package: "postgres-nio"), .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        // Tokens, scopes, the audit log and the permission manager.
        .target(name: "KeysmithTokens", dependencies: ["Keysmith", "KeysmithCrypto", "KeysmithSystem"]),

        // The authorization servers that issue the tokens: providers, sign-in, refresh, revocation.
        .target(
            name: "KeysmithProvider",
            dependencies: [
                "Keysmith", "KeysmithTokens", "KeysmithCrypto", "KeysmithSystem",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        // The policy language and engine: it decides on scope names and knows nothing of OAuth.
        .target(name: "KeysmithPolicy", dependencies: ["Keysmith"]),
        // The adapter: a Keysmith token or permission manager as the engine's TokenView.
        .target(name: "KeysmithTokenPolicy", dependencies: ["Keysmith", "KeysmithTokens", "KeysmithPolicy"]),

        // The command: every command but PostgreSQL's and the providers' in a library shared by
        // two programs, the lean `keysmith` (no SwiftNIO, no TLS, no Foundation) and
        // `keysmith-net`, which adds them and which `keysmith` runs for the commands that need them.
        .target(
            name: "KeysmithCommandLine",
            dependencies: [
                "Keysmith", "KeysmithCredentials", "KeysmithVault", "KeysmithStores", "KeysmithTokens", "KeysmithPolicy", "KeysmithTokenPolicy",
                "KeysmithCrypto", "KeysmithSystem", "KeysmithSecretService",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(name: "keysmith", dependencies: ["KeysmithCommandLine"]),
        .executableTarget(
            name: "keysmith-net",
            dependencies: [
                "KeysmithCommandLine", "Keysmith", "KeysmithCredentials", "KeysmithCrypto", "KeysmithStores", "KeysmithTokens", "KeysmithSystem",
                "KeysmithPostgres", "KeysmithProvider",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        // Tests: one target per module, one shared conformance suite for every store,
        // and the command tested through its built binary. KeysmithTestSupport starts child
        // processes for the tests that need them.
        .target(name: "KeysmithTestSupport", dependencies: ["Keysmith"], path: "Tests/KeysmithTestSupport"),
        .testTarget(name: "KeysmithTests", dependencies: ["Keysmith", "KeysmithTestSupport"]),
        .testTarget(name: "KeysmithCryptoTests", dependencies: ["KeysmithCrypto"]),
        .testTarget(name: "KeysmithTokensTests", dependencies: ["Keysmith", "KeysmithTokens", "KeysmithVault", "KeysmithTestSupport"]),
        .testTarget(
            name: "KeysmithPolicyTests", dependencies: ["Keysmith", "KeysmithPolicy", "KeysmithTokens", "KeysmithTokenPolicy", "KeysmithTestSupport"],
            exclude: ["Cases", "Oracle"]  // data and the Python oracles, read by path
        ),
        .testTarget(
            name: "KeysmithVaultTests",
            dependencies: [
                "Keysmith", "KeysmithVault", "KeysmithCredentials", "KeysmithTokens", "KeysmithCrypto", "KeysmithSystem", "KeysmithTestSupport", "vault-stress",
                .product(name: "InMemoryLogging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "KeysmithConformanceTests",
            dependencies: [
                "Keysmith", "KeysmithVault", "KeysmithSecretService", "KeysmithStores", "KeysmithTokens", "KeysmithPostgres", "store-race",
            ]
        ),
        .testTarget(name: "KeysmithSecretServiceTests", dependencies: ["Keysmith", "KeysmithSecretService", "KeysmithTestSupport"]),
        .testTarget(
            name: "KeysmithPostgresTests",
            dependencies: ["Keysmith", "KeysmithPostgres", "KeysmithTokens", "KeysmithProvider", "KeysmithPolicy", "KeysmithTokenPolicy", "KeysmithTestSupport", "KeysmithSystem", "KeysmithCrypto",
                           .product(name: "PostgresNIO", package: "postgres-nio")]
        ),
        .testTarget(
            name: "KeysmithFuzzRegressionTests", dependencies: ["Keysmith", "KeysmithVault", "KeysmithTokens", "KeysmithPolicy"]
        ),
        .testTarget(name: "KeysmithCommandTests", dependencies: ["Keysmith", "keysmith", "keysmith-net", "KeysmithTestSupport"]),
        .testTarget(
            name: "KeysmithProviderTests",
            dependencies: ["Keysmith", "KeysmithProvider", "KeysmithTokens", "KeysmithVault", "KeysmithPostgres", "KeysmithTestSupport", "store-race"]
        ),
    ],
    swiftLanguageModes: [.v6]
)

// Every target: the upcoming features we want everywhere (one loop, as swift-log does).
for target in package.targets where target.type != .system {
    var settings = target.swiftSettings ?? []
    settings.append(.enableUpcomingFeature("ExistentialAny"))
    settings.append(.enableUpcomingFeature("InternalImportsByDefault"))
    target.swiftSettings = settings
}
