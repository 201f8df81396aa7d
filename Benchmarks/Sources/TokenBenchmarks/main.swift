// Token benchmarks: scope checks and bulk revocation. Figures printed, nothing asserted.
import Foundation
import Keysmith
import KeysmithTokens
import KeysmithVault

func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
func ms(_ ns: UInt64) -> String { String(format: "%.1f ms", Double(ns) / 1e6) }

let arguments = CommandLine.arguments
let count = arguments.firstIndex(of: "--tokens").map { Int(arguments[$0 + 1]) ?? 100_000 } ?? 100_000
let root = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-token-bench-\(UUID().uuidString)").path
defer { try? FileManager.default.removeItem(atPath: root) }
let vault = try FileVault.create(at: root, credential: .key([UInt8](repeating: 5, count: 32)))
let issued = Date()
let scopes: Set<Scope> = [try Scope("groups:read"), try Scope("posts:write"), try Scope("posts:delete")]

// Scope checks on one token.
let token = try OAuthToken(
    response: Data(#"{"access_token":"a","token_type":"Bearer","expires_in":3600,"scope":"groups:read posts:write"}"#.utf8),
    requested: scopes, now: issued)
let write = try Scope("posts:write")
var hits = 0
let checkStart = now()
for _ in 0..<1_000_000 where token.hasGranted(write, at: issued) { hits += 1 }
let checkTime = now() - checkStart
print("hasGranted: \(String(format: "%.1f", Double(checkTime) / 1_000_000)) ns per check (\(hits) hits)")

// Fill: \(count) tokens, in batches, as import would store them.
var filled = 0
let fillStart = now()
while filled < count {
    let batch = min(10_000, count - filled)
    let operations = try (filled..<filled + batch).map { index -> StoreOperation in
        var token = token
        token.accessToken = "access-\(index)"
        token.clientID = index % 2 == 0 ? "web" : "cli"
        token.subject = "user\(index)"
        let item = StoredToken(service: "news", account: "user\(index)", token: token)
        return .create(item.attributes, secret: item.secret)
    }
    try vault.perform(operations)
    filled += batch
}
print("stored \(count) tokens in \(ms(now() - fillStart))")

let keeper = TokenKeeper(store: vault)
let dryStart = now()
let dry = try keeper.revoke(scope: write, matching: TokenFilter(), reason: "bench", dryRun: true)
print("bulk revocation, dry run: \(dry.changed) of \(dry.matched) tokens in \(ms(now() - dryStart))")
let start = now()
let report = try keeper.revoke(scope: write, matching: TokenFilter(), reason: "bench")
print("bulk revocation of one scope across \(report.changed) tokens (one commit, one audit entry): \(ms(now() - start))")
let againStart = now()
let again = try keeper.revoke(scope: write, matching: TokenFilter(), reason: "bench")
print("the same again (idempotent, \(again.changed) changed): \(ms(now() - againStart))")
let verifyStart = now()
let verification = try keeper.verifyAuditLog()
print("audit verify of \(verification.entries) entries: \(ms(now() - verifyStart)), intact: \(verification.isIntact)")
