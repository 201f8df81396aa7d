// swift-tools-version:6.2
// Keysmith's benchmarks, in a package of their own so the library's build stays lean.
//   cd Benchmarks && swift run -c release VaultBenchmarks [--items 1000,100000]
import Foundation
import PackageDescription

// A path dependency's identity is its directory's name, whatever the checkout is called.
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent

let package = Package(
    name: "KeysmithBenchmarks",
    platforms: [.macOS(.v26)],
    dependencies: [.package(path: "..")],
    targets: [
        .executableTarget(
            name: "SecretServiceBenchmarks",
            dependencies: [
                .product(name: "Keysmith", package: root),
                .product(name: "KeysmithSecretService", package: root),
            ]
        ),
        .executableTarget(
            name: "ScaleBenchmarks",
            dependencies: [
                .product(name: "Keysmith", package: root),
                .product(name: "KeysmithVault", package: root),
                .product(name: "KeysmithTokens", package: root),
            ]
        ),
        .executableTarget(
            name: "PolicyBenchmarks",
            dependencies: [
                .product(name: "KeysmithPolicy", package: root),
                .product(name: "KeysmithTokens", package: root),
                .product(name: "KeysmithTokenPolicy", package: root),
            ]
        ),
        .executableTarget(
            name: "PostgresBenchmarks",
            dependencies: [
                .product(name: "Keysmith", package: root),
                .product(name: "KeysmithPostgres", package: root),
                .product(name: "KeysmithTokens", package: root),
                .product(name: "KeysmithVault", package: root),  // the file vault's figures beside PostgreSQL's
            ]
        ),
        .executableTarget(
            name: "TokenBenchmarks",
            dependencies: [
                .product(name: "Keysmith", package: root),
                .product(name: "KeysmithVault", package: root),
                .product(name: "KeysmithTokens", package: root),
            ]
        ),
        .executableTarget(
            name: "VaultBenchmarks",
            dependencies: [
                .product(name: "Keysmith", package: root),
                .product(name: "KeysmithVault", package: root),
            ]
        )
    ],
    swiftLanguageModes: [.v6]
)
