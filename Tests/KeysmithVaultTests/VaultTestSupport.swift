import Foundation
import Keysmith
import KeysmithVault
import Testing

/// A temporary directory removed when the test ends.
final class TemporaryDirectory: @unchecked Sendable {
    let path: String
    init() {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-vault-\(UUID().uuidString)").path
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
    func sub(_ name: String) -> String { path + "/" + name }
}

let testKey = VaultCredential.key([UInt8](repeating: 0x42, count: 32))

func genericKey(_ account: String, service: String = "svc") -> ItemKey {
    .genericPassword(service: service, account: account)
}

func files(in vault: String) throws -> [String] {
    let enumerator = FileManager.default.enumerator(atPath: vault)
    var result: [String] = []
    while let name = enumerator?.nextObject() as? String {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: vault + "/" + name, isDirectory: &isDirectory), !isDirectory.boolValue {
            result.append(name)
        }
    }
    return result.sorted()
}

func mode(_ path: String) throws -> Int {
    let attributes = try FileManager.default.attributesOfItem(atPath: path)
    return (attributes[.posixPermissions] as? Int) ?? -1
}

/// The repository's root, for fixtures in Keys/.
let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().path
