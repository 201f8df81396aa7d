import Foundation
import KeysmithCrypto
@testable import KeysmithPostgres
import Testing

/// The change feed's chain, checked without a server: the one verifier watchers and
/// `verifyChangeFeed` share (`NamespaceKeys.chainStep`).
@Suite("the change feed's chain link, without a server")
struct ChainLinkTests {
    static func keys(firstDataKey: UInt8 = 7) throws -> NamespaceKeys {
        try NamespaceKeys.assemble(namespaceID: Array(repeating: 1, count: 32),
                                   dataKeys: [1: SecretBytes(copying: Array(repeating: firstDataKey, count: 32))],
                                   wrapKey: SecretBytes(copying: Array(repeating: 3, count: 32)), verifier: [])
    }

    /// A row of the feed: what the chain covers.
    struct Row {
        var sequence: Int64, blindIndex: [UInt8], version: Int64, deleted: Bool, sealedKey: [UInt8]
        var link: [UInt8]?
    }

    /// Rows chained as the store writes them.
    static func chained(_ keys: NamespaceKeys, count: Int) -> [Row] {
        var previous = NamespaceKeys.chainGenesis
        return (1...count).map { index in
            var row = Row(sequence: Int64(index), blindIndex: [UInt8(index)], version: Int64(index), deleted: index % 3 == 0,
                          sealedKey: [UInt8(index), 9])
            row.link = keys.chainLink(after: previous, sequence: row.sequence, blindIndex: row.blindIndex, version: row.version,
                                      deleted: row.deleted, sealedKey: row.sealedKey)
            previous = row.link!
            return row
        }
    }

    /// Each row's step, continuing from the stored link after a break (as `verifyChangeFeed`).
    static func steps(_ keys: NamespaceKeys, _ rows: [Row]) -> [NamespaceKeys.ChainStep] {
        var link: [UInt8]? = nil
        return rows.map { row in
            let step = keys.chainStep(after: link, sequence: row.sequence, blindIndex: row.blindIndex, version: row.version,
                                      deleted: row.deleted, sealedKey: row.sealedKey, stored: row.link)
            switch step {
            case .linked(let next): link = next
            case .broken(let stored): link = stored
            case .unlinked, .missingLink: break
            }
            return step
        }
    }

    static func isLinked(_ step: NamespaceKeys.ChainStep) -> Bool {
        if case .linked = step { return true }
        return false
    }

    @Test("an intact feed links at every row; rows of before the chain are unlinked only before the first link")
    func intactFeedLinks() throws {
        let keys = try Self.keys()
        let rows = Self.chained(keys, count: 6)
        #expect(Self.steps(keys, rows).allSatisfy(Self.isLinked))
        let before = Row(sequence: 0, blindIndex: [0], version: 1, deleted: false, sealedKey: [0], link: nil)
        #expect(Self.steps(keys, [before] + rows).first == .unlinked)
        #expect(Self.steps(keys, [before] + rows).dropFirst().allSatisfy(Self.isLinked))
        // A row without a link after linked rows: the feed was edited.
        var late = rows
        late[3].link = nil
        #expect(Self.steps(keys, late)[3] == .missingLink)
    }

    @Test("every edit breaks the row it touches, once: a field changed, a row deleted, two rows swapped, a renumbering, another namespace's key")
    func editsBreakTheChain() throws {
        let keys = try Self.keys()
        let rows = Self.chained(keys, count: 6)
        var edits: [(String, [Row], Int)] = []
        var changed = rows; changed[2].version += 1; edits.append(("version", changed, 2))
        changed = rows; changed[2].deleted.toggle(); edits.append(("deleted", changed, 2))
        changed = rows; changed[2].sealedKey[0] ^= 1; edits.append(("sealed key", changed, 2))
        changed = rows; changed[2].blindIndex[0] ^= 1; edits.append(("blind index", changed, 2))
        changed = rows; changed[2].sequence += 100; edits.append(("renumbered", changed, 2))
        changed = rows; changed[2].link![5] ^= 1; edits.append(("link", changed, 2))
        changed = rows; changed.remove(at: 2); edits.append(("deleted row", changed, 2))
        changed = rows; changed.swapAt(2, 3); edits.append(("swapped", changed, 2))
        for (name, edited, at) in edits {
            let steps = Self.steps(keys, edited)
            #expect(steps.prefix(at).allSatisfy(Self.isLinked), "\(name)")
            guard case .broken = steps[at] else {
                Issue.record("\(name): row \(at) is \(steps[at])")
                continue
            }
            // Reported once: the rows after a changed field or link continue from what is stored.
            if name != "swapped" && name != "link" {
                #expect(steps.dropFirst(at + 1).allSatisfy(Self.isLinked), "\(name): \(steps)")
            }
        }
        // The same rows under another namespace's chain key do not link at all.
        let other = try Self.keys(firstDataKey: 8)
        #expect(Self.steps(other, rows).allSatisfy { if case .broken = $0 { true } else { false } })
    }
}
