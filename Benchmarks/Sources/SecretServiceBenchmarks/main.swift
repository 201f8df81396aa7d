// Secret Service reads and writes through Keysmith, beside secret-tool on the same daemon in
// the same run. Run inside a session with a Secret Service, for instance:
//   ../scripts/with-secret-service.sh swift run -c release SecretServiceBenchmarks
import Foundation
import Keysmith
import KeysmithSecretService

func seconds(_ body: () throws -> Void) rethrows -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    try body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}

func secretTool(_ arguments: [String], stdin: String? = nil) -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/secret-tool")
    process.arguments = arguments
    let output = Pipe()
    process.standardOutput = output
    if let stdin {
        let input = Pipe()
        process.standardInput = input
        try! process.run()
        input.fileHandleForWriting.write(Data(stdin.utf8))
        try! input.fileHandleForWriting.close()
    } else {
        try! process.run()
    }
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return String(decoding: data, as: UTF8.self)
}

let arguments = CommandLine.arguments
let items = arguments.firstIndex(of: "--items").flatMap { Int(arguments[$0 + 1]) } ?? 1000
let sample = arguments.firstIndex(of: "--sample").flatMap { Int(arguments[$0 + 1]) } ?? 200
let namespace = "bench-\(UUID().uuidString)"
let store = try SecretServiceStore(namespace: namespace, timeout: .seconds(30))
print("Secret Service benchmark: \(items) items in the default collection (namespace \(namespace))")

let fill = try seconds {
    for chunk in stride(from: 0, to: items, by: 100) {
        try store.perform((chunk..<min(items, chunk + 100)).map {
            .create(ItemAttributes(key: .genericPassword(service: "bench", account: "user\($0)")), secret: Data("secret-\($0)".utf8))
        })
    }
}
print("filled \(items) items through Keysmith in \(String(format: "%.1f", fill)) s")

var mismatches = 0
let reads = try seconds {
    for index in 0..<sample {
        let account = "user\((index * 7919) % items)"
        let secret = try store.read(.genericPassword(service: "bench", account: account))?.secret
        if secret != Data("secret-\((index * 7919) % items)".utf8) { mismatches += 1 }
    }
}
print("Keysmith reads: \(String(format: "%.0f", Double(sample) / reads))/s (\(mismatches) wrong)")

let writes = try seconds {
    for index in 0..<min(sample, items) {
        try store.update(ItemAttributes(key: .genericPassword(service: "bench", account: "user\(index)")), secret: Data("secret-\(index)".utf8))
    }
}
print("Keysmith writes (update): \(String(format: "%.0f", Double(min(sample, items)) / writes))/s")

// secret-tool on items it can find by the same attributes.
var toolWrong = 0
let toolReads = seconds {
    for index in 0..<sample {
        let account = "user\((index * 7919) % items)"
        if secretTool(["lookup", "service", "bench", "account", account, "keysmith-namespace", namespace]) != "secret-\((index * 7919) % items)" {
            toolWrong += 1
        }
    }
}
print("secret-tool lookup: \(String(format: "%.0f", Double(sample) / toolReads))/s (\(toolWrong) wrong)")
let toolWrites = seconds {
    for index in 0..<min(sample, 100) {
        _ = secretTool(["store", "--label=bench", "service", "bench-tool", "account", "user\(index)", "keysmith-namespace", namespace],
                       stdin: "secret-\(index)")
    }
}
print("secret-tool store: \(String(format: "%.0f", Double(min(sample, 100)) / toolWrites))/s")

let keysmithReadsPerSecond = Double(sample) / reads, toolReadsPerSecond = Double(sample) / toolReads
print("ratio: Keysmith reads \(String(format: "%.1f", keysmithReadsPerSecond / toolReadsPerSecond))× secret-tool; "
      + "writes \(String(format: "%.1f", (Double(min(sample, items)) / writes) / (Double(min(sample, 100)) / toolWrites)))×")

// Clean up.
try store.perform(try store.search(ItemQuery()).map { .delete($0.key) })
