// swift-tools-version:6.1
// libFuzzer targets for Keysmith's parsers: the vault format, token responses, policy files.
//   scripts/fuzz.sh FuzzVaultFormat 600
import Foundation
import PackageDescription

// A path dependency's identity is its directory's name, whatever the checkout is called.
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent

let package = Package(
    name: "KeysmithFuzz",
    dependencies: [.package(path: "..")],
    targets: [
        .target(name: "FuzzDriver"),
        .executableTarget(name: "FuzzTokenResponse", dependencies: ["FuzzDriver", .product(name: "KeysmithTokens", package: root)]),
        .executableTarget(name: "FuzzPolicyLanguage", dependencies: ["FuzzDriver", .product(name: "KeysmithPolicy", package: root)]),
        .executableTarget(name: "FuzzVaultFormat", dependencies: ["FuzzDriver", .product(name: "KeysmithVault", package: root)]),
    ]
)
