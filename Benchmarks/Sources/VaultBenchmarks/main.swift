// Vault benchmarks: figures printed, nothing asserted. See docs/benchmarks.md.
import Foundation
import Keysmith
import KeysmithVault

func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

struct Stats {
    var samples: [Double]  // nanoseconds
    var median: Double { samples.sorted()[samples.count / 2] }
    var p99: Double { samples.sorted()[min(samples.count - 1, samples.count * 99 / 100)] }
    var mean: Double { samples.reduce(0, +) / Double(samples.count) }
}

func measure(_ count: Int, _ body: (Int) throws -> Void) rethrows -> Stats {
    var samples: [Double] = []
    samples.reserveCapacity(count)
    for index in 0..<count {
        let start = now()
        try body(index)
        samples.append(Double(now() - start))
    }
    return Stats(samples: samples)
}

func format(_ nanoseconds: Double) -> String {
    if nanoseconds < 10_000 { return String(format: "%.2f µs", nanoseconds / 1_000) }
    if nanoseconds < 10_000_000 { return String(format: "%.1f µs", nanoseconds / 1_000) }
    return String(format: "%.1f ms", nanoseconds / 1_000_000)
}

func peakMemoryMiB() -> Double {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") })
    else { return 0 }
    let kib = Double(line.split(separator: " ").dropFirst().first ?? "0") ?? 0
    return kib / 1024
}

/// One bare durable replacement of a file: write, fsync, rename, fsync of the directory.
func bareDurableWrite(directory: String, bytes: [UInt8], index: Int) {
    let temporary = directory + "/tmp-\(index)", final = directory + "/file-\(index % 64)"
    let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
    precondition(fd >= 0)
    _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    fsync(fd)
    close(fd)
    rename(temporary, final)
    let dfd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    fsync(dfd)
    close(dfd)
}

let arguments = CommandLine.arguments
let sizes = (arguments.firstIndex(of: "--items").map { arguments[$0 + 1] } ?? "1000,100000")
    .split(separator: ",").compactMap { Int($0) }
let root = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-bench-\(UUID().uuidString)").path
try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(atPath: root) }

print("Keysmith vault benchmarks (\(ProcessInfo.processInfo.activeProcessorCount) cores, temp dir \(root))")
let key = VaultCredential.key([UInt8](repeating: 9, count: 32))
let secret = Data(repeating: 0x61, count: 64)

// Unlock cost: scrypt with the default parameters, then opening an empty keyfile vault.
do {
    let path = root + "/kdf"
    let create = try measure(1) { _ in _ = try FileVault.create(at: path, credential: .passphrase("bench"), scrypt: .default) }
    let open = try measure(3) { _ in _ = try FileVault.open(at: path, credential: .passphrase("bench")) }
    print("unlock, passphrase (scrypt N=2^17 r=8 p=1): median \(format(open.median)) (create: \(format(create.median)))")
    let keyPath = root + "/kdf-key"
    _ = try FileVault.create(at: keyPath, credential: key)
    let keyOpen = try measure(20) { _ in _ = try FileVault.open(at: keyPath, credential: key) }
    print("unlock, keyfile (no KDF), empty vault: median \(format(keyOpen.median))")
}

for size in sizes {
    print("\n== \(size) items ==")
    let path = root + "/vault-\(size)"
    let vault = try FileVault.create(at: path, credential: key)
    // Fill in batches of 10,000.
    var filled = 0
    var batchStats: [Double] = []
    while filled < size {
        let count = min(10_000, size - filled)
        let operations = (filled..<filled + count).map {
            StoreOperation.create(ItemAttributes(key: .genericPassword(service: "bench", account: "user\($0)")), secret: secret)
        }
        let start = now()
        try vault.perform(operations)
        batchStats.append(Double(now() - start))
        filled += count
    }
    try vault.compact()
    print("batch write of 10,000 items (one durable commit): median \(format(Stats(samples: batchStats).median)) over \(batchStats.count) batches")

    let open = try measure(3) { _ in _ = try FileVault.open(at: path, credential: key) }
    print("open + load (keyfile, no KDF): median \(format(open.median))")

    let reads = try measure(20_000) { index in
        _ = try vault.read(.genericPassword(service: "bench", account: "user\((index &* 7919) % size)"))
    }
    print("read one item: median \(format(reads.median)), p99 \(format(reads.p99))")

    let misses = try measure(20_000) { index in
        _ = try vault.read(.genericPassword(service: "bench", account: "absent\(index)"))
    }
    print("read a missing item: median \(format(misses.median))")

    let search = try measure(20) { _ in _ = try vault.search(ItemQuery(account: "user17")) }
    print("search by account (scan of decrypted metadata): median \(format(search.median))")

    // Durable single writes beside bare write+fsync+rename+fsync(dir) of the same size, interleaved.
    let bareDirectory = root + "/bare-\(size)"
    try FileManager.default.createDirectory(atPath: bareDirectory, withIntermediateDirectories: true)
    let frameSize = 69 + 16 + 44 + 40 + secret.count + 40
    let bareBytes = [UInt8](repeating: 1, count: frameSize)
    var writes: [Double] = [], bare: [Double] = []
    for index in 0..<300 {
        let start = now()
        try vault.update(ItemAttributes(key: .genericPassword(service: "bench", account: "user\(index % size)")), secret: secret)
        writes.append(Double(now() - start))
        let bareStart = now()
        bareDurableWrite(directory: bareDirectory, bytes: bareBytes, index: index)
        bare.append(Double(now() - bareStart))
    }
    let w = Stats(samples: writes), b = Stats(samples: bare)
    print("durable write of one item: median \(format(w.median)); bare write+fsync+rename+dir fsync (\(frameSize) B): median \(format(b.median)); ratio \(String(format: "%.2f", w.median / b.median))×")
    print("peak memory so far: \(String(format: "%.0f", peakMemoryMiB())) MiB")
}
