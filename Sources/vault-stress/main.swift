// A helper for the vault's crash and concurrency tests: writes to a vault and reports every
// acknowledged write on stdout, unbuffered, so a test can SIGKILL it at any instant and then
// check that every acknowledged write survived. Not installed; not part of the public API.
//
//   vault-stress write  VAULT KEYFILE PREFIX COUNT   creates, updates, deletes, batches, token
//                                                    revocations, key changes and rekeys
//   vault-stress write-bulk …                        the same, with one bulk batch (4,100 items) at step 20
//   vault-stress shared VAULT KEYFILE PREFIX COUNT   also upserts one shared key each step
//   vault-stress maintain VAULT KEYFILE PREFIX COUNT compacts, re-keys and re-wraps (same
//                                                    keyfile, new salt) in turn, COUNT times
//   vault-stress counter VAULT KEYFILE PREFIX COUNT  sets "counter" to 0, 1, … COUNT-1, saying "ack N" after each
//   vault-stress bulk VAULT KEYFILE PREFIX COUNT     one batch upserting bulk-0 … bulk-(COUNT-1) to PREFIX-bulk-N
//   vault-stress passwd VAULT KEYFILE NEWKEYFILE     changes the credential once
//   vault-stress rekey  VAULT KEYFILE                re-keys once
//   vault-stress upgrade VAULT KEYFILE               upgrades a format 1 vault to format 2
//   vault-stress repair VAULT KEYFILE                repairs the vault once (says "ack repair KEPT"); a
//                                                    format 1 vault through FileVault.repairFormat1
import Foundation
import Keysmith
import KeysmithTokens
import KeysmithVault

func say(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    bytes.withUnsafeBytes { buffer in
        var offset = 0
        while offset < buffer.count {
            let written = write(1, buffer.baseAddress! + offset, buffer.count - offset)
            if written <= 0 { exit(3) }
            offset += written
        }
    }
}

/// Upserts of bulk-0 … bulk-(count-1), each to PREFIX-bulk-N.
func bulkBatch(_ prefix: String, _ count: Int) -> [StoreOperation] {
    (0..<count).map {
        .upsert(ItemAttributes(key: .genericPassword(service: "stress", account: "bulk-\($0)")), secret: Data("\(prefix)-bulk-\($0)".utf8))
    }
}

let arguments = CommandLine.arguments
// The fault tests' crash point (the library reads no environment variable for it).
FaultInjection.arm(exitAt: ProcessInfo.processInfo.environment["KEYSMITH_FAULT_EXIT_AT"].flatMap { Int($0) })
if arguments.count >= 4, ["passwd", "rekey", "upgrade", "repair"].contains(arguments[1]) {
    do {
        if arguments[1] == "upgrade" {
            say("ack upgrade \(try FileVault.upgrade(at: arguments[2], credential: .keyfile(at: arguments[3])))")
            exit(0)
        }
        if arguments[1] == "repair" {
            let kept = FileVault.formatVersion(at: arguments[2]) == 1
                ? try FileVault.repairFormat1(at: arguments[2], credential: .keyfile(at: arguments[3]), scrypt: .testing).itemsKept
                : try FileVault.open(at: arguments[2], credential: .keyfile(at: arguments[3])).repair().itemsKept
            say("ack repair \(kept)")
            exit(0)
        }
        let vault = try FileVault.open(at: arguments[2], credential: .keyfile(at: arguments[3]))
        if arguments[1] == "passwd", arguments.count == 5 {
            try vault.changeCredential(to: .keyfile(at: arguments[4]))
        } else {
            try vault.rekey()
        }
        say("ack \(arguments[1])")
        exit(0)
    } catch let error as KeysmithError {
        FileHandle.standardError.write(Data("vault-stress: \(error)\n".utf8))
        exit(error.code == .storeLocked ? 4 : error.code == .authenticationFailed ? 5 : 1)
    } catch {
        exit(1)
    }
}
guard arguments.count == 6, let count = Int(arguments[5]) else {
    FileHandle.standardError.write(Data("usage: vault-stress write|shared VAULT KEYFILE PREFIX COUNT\n".utf8))
    exit(2)
}
let mode = arguments[1], path = arguments[2], keyfile = arguments[3], prefix = arguments[4]
do {
    let vault = try FileVault.open(at: path, credential: .keyfile(at: keyfile))
    func key(_ index: Int) -> ItemKey { .genericPassword(service: "stress", account: "\(prefix)-\(index)") }
    if mode == "counter" {
        for index in 0..<count {
            try vault.upsert(ItemAttributes(key: .genericPassword(service: "stress", account: "counter")), secret: Data(String(index).utf8))
            say("ack \(index)")
        }
        say("done")
        exit(0)
    }
    // A bulk batch is reported in one short line, "bulk PREFIX COUNT": bulk-N is set to
    // PREFIX-bulk-N for N below COUNT (a line per item would fill the pipe).
    if mode == "bulk" {
        say("begin bulk \(prefix) \(count)")
        try vault.perform(bulkBatch(prefix, count))
        say("ack bulk \(prefix) \(count)")
        say("done")
        exit(0)
    }
    if mode == "maintain" {
        for index in 0..<count {
            switch index % 3 {
            case 0: try vault.compact()
            case 1: try vault.rekey()
            default: try vault.changeCredential(to: .keyfile(at: keyfile))
            }
            say("ack maintain \(index)")
        }
        say("done")
        exit(0)
    }
    let keeper = TokenKeeper(store: vault)
    let scopes = (0..<64).map { try! Scope("s\($0)") }
    // "write-bulk" is "write" plus one bulk batch at step 20.
    let writing = mode == "write" || mode == "write-bulk"
    if writing {
        say("begin token \(prefix)")
        try keeper.importResponse(Data(#"{"access_token":"a","token_type":"Bearer"}"#.utf8), service: "stress-token",
                                  account: prefix, requested: Set(scopes))
        say("ack token \(prefix)")
    }
    for index in 0..<count {
        if writing && index % 11 == 10 {
            // Revoke the next scope of this writer's token.
            let scope = scopes[(index / 11) % scopes.count]
            say("begin revoke \(prefix) \(scope)")
            try keeper.revoke([scope], service: "stress-token", account: prefix, reason: "stress")
            say("ack revoke \(prefix) \(scope)")
            continue
        }
        if writing && index % 37 == 36 {
            // Re-wrap the keys (same keyfile, new salt) or re-encrypt everything: both must survive a kill.
            if index % 74 == 73 { try vault.rekey() } else { try vault.changeCredential(to: .keyfile(at: keyfile)) }
            say("ack keys \(index)")
            continue
        }
        var operations: [StoreOperation] = []
        var lines: [String] = []
        switch index % 7 {
        case _ where mode == "write-bulk" && index == 20:
            // One bulk batch (compacted at once) over keys every writer shares, so that kills
            // land in the middle of one too.
            say("begin bulk \(prefix) 4100")
            try vault.perform(bulkBatch(prefix, 4100))
            say("ack bulk \(prefix) 4100")
            continue
        case 3 where index >= 3:
            // Update an earlier item.
            operations = [.upsert(ItemAttributes(key: key(index - 3)), secret: Data("\(prefix)-\(index - 3)-v2".utf8))]
            lines = ["put \(prefix)-\(index - 3) \(prefix)-\(index - 3)-v2"]
        case 5 where index >= 5:
            // Delete an earlier item (it may already be gone: then create it again instead).
            if try vault.read(key(index - 5)) != nil {
                operations = [.delete(key(index - 5))]
                lines = ["del \(prefix)-\(index - 5)"]
            }
        case 6:
            // A batch of four new items, all or nothing.
            operations = (0..<4).map { .upsert(ItemAttributes(key: key(index * 100 + $0)), secret: Data("\(prefix)-\(index * 100 + $0)".utf8)) }
            lines = (0..<4).map { "put \(prefix)-\(index * 100 + $0) \(prefix)-\(index * 100 + $0)" }
        default:
            break
        }
        if operations.isEmpty {
            operations = [.upsert(ItemAttributes(key: key(index)), secret: Data("\(prefix)-\(index)".utf8))]
            lines = ["put \(prefix)-\(index) \(prefix)-\(index)"]
        }
        if mode == "shared" {
            operations.append(.upsert(ItemAttributes(key: .genericPassword(service: "stress", account: "shared")),
                                      secret: Data("\(prefix)-\(index)".utf8)))
        }
        say("begin " + lines.joined(separator: " | "))
        try vault.perform(operations)
        say("ack " + lines.joined(separator: " | "))
    }
    say("done")
} catch {
    FileHandle.standardError.write(Data("vault-stress: \(error)\n".utf8))
    exit(1)
}
