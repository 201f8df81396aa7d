import Dispatch
import Keysmith
import KeysmithCredentials
import KeysmithCrypto
import KeysmithSystem
import Synchronization

// Keys: each key epoch's keys from the header in force, following a header another process
// re-wrapped or re-keyed, and the header written and checked before a write.
extension Engine {
    /// The keys of an epoch, re-reading the header once if another process re-keyed.
    ///
    /// - Throws: `.storeLocked` when the header on disk is one this handle's credential no
    ///   longer opens (another process changed the credential and re-keyed): the records are
    ///   not damaged, this handle is out of date.
    func keys(for epoch: UInt32) throws -> EpochKeys? {
        if let keys = unlocked.epochs[epoch] { return keys }
        let copy = try? adoptHeaderOnDisk(requireSameCredential: false)
        if let keys = unlocked.epochs[epoch] { return keys }
        if let copy, copy.bytes != unlocked.copy.bytes {
            throw KeysmithError(
                .storeLocked,
                "another process changed this vault's passphrase or keyfile and re-keyed it since it was opened; open it again with the new credential")
        }
        return nil
    }

    /// The copy of the header in force (docs/format.md, "Which copy").
    func headerInForce() throws -> HeaderCopy {
        let inForce = HeaderFormat.inForce(paths.root)
        guard case .version2(let copy) = inForce.probe else {
            throw KeysmithError(
                .corruptData,
                "the vault header in force is not an intact format 2 header (\(inForce.problems.joined(separator: "; ")))")
        }
        return copy
    }

    /// Takes the header as it is on disk if it changed and this handle's credential opens it.
    /// Returns the copy in force.
    @discardableResult
    func adoptHeaderOnDisk(requireSameCredential: Bool) throws -> HeaderCopy {
        let copy = try headerInForce()
        if copy.bytes == unlocked.copy.bytes { return copy }
        guard copy.header.generation > unlocked.copy.header.generation else {
            throw KeysmithError(
                .corruptData,
                "the vault header was put back to an older version (generation \(copy.header.generation), this handle has seen "
                    + "\(unlocked.copy.header.generation)); restore the newer header from a backup")
        }
        guard copy.header.vaultIDBytes == vaultID else {
            throw KeysmithError(.corruptData, "the vault header now belongs to another vault; open the vault again")
        }
        var kek = unlocked.kek
        if !constantTimeEqual(VaultHeader.mac(copy.body, kek: kek), copy.mac), let rederivable,
           let derived = try? HeaderFormat.deriveKEK(copy.header.kdf, credential: rederivable)
        {
            kek = derived
        }
        guard constantTimeEqual(VaultHeader.mac(copy.body, kek: kek), copy.mac) else {
            if requireSameCredential {
                throw KeysmithError(
                    .storeLocked,
                    "another process changed this vault's passphrase or keyfile since it was opened; open it again with the new one")
            }
            return copy
        }
        let fresh = try UnlockedHeader.unlock(copy, kek: kek, credential: .key([]))
        guard fresh.idKey == unlocked.idKey else {
            throw KeysmithError(.corruptData, "the vault header's id key changed; open the vault again")
        }
        unlocked = fresh
        return copy
    }

    /// Writes both header copies, the backup first: the primary's rename is the one instant the
    /// change takes effect, and by then the backup already holds the new header, so a retired
    /// credential never survives in it (a crash before the switch leaves the backup one
    /// generation ahead, which the next open, verify or write puts back to the copy in force).
    /// The caller holds the flock and the header in force is this handle's (``requireCurrentHeader()``).
    func writeHeader(_ header: VaultHeader, kek: SecretBytes) throws {
        var header = header
        header.generation = unlocked.copy.header.generation + 1
        let bytes = try keysmithCrypto { try header.encode(kek: kek) }
        guard case .version2(let copy) = HeaderFormat.probe(bytes) else {
            throw KeysmithError(.corruptData, "the new vault header does not parse back")
        }
        let fresh = try UnlockedHeader.unlock(copy, kek: kek, credential: .key([]))
        try Durable.write(bytes, to: paths.headerBackup, directory: paths.root)
        try Durable.write(bytes, to: paths.header, directory: paths.root)
        unlocked = fresh
        writeEpoch = fresh.copy.header.currentEpoch
    }

    /// For `passwd` and `rekey`, which rewrite the header: the header in force must be one this
    /// handle's credential opens, or the change would undo another process's.
    func requireCurrentHeader() throws {
        let copy = try adoptHeaderOnDisk(requireSameCredential: true)
        guard copy.bytes == unlocked.copy.bytes else {
            throw KeysmithError(.storeLocked, "the vault header changed while it was being read; try again")
        }
    }

    /// Under the lock before a write: the header as it is on disk now, both copies healed from
    /// the copy in force (never from memory), every commit of other processes loaded.
    ///
    /// A handle whose credential was changed by another process may still write, as long as
    /// the header's current epoch is one whose data key it holds: that key did not change
    /// (a credential change re-wraps keys, it does not replace them). After a re-key it may
    /// not: the write is refused, never sealed under a retired key.
    func prepareWrite() throws {
        let copy = try adoptHeaderOnDisk(requireSameCredential: false)
        guard copy.header.vaultIDBytes == vaultID, unlocked.epochs[copy.header.currentEpoch] != nil else {
            throw KeysmithError(
                .storeLocked,
                "another process changed this vault's passphrase or keyfile and re-keyed it since it was opened; open it again with the new credential")
        }
        writeEpoch = copy.header.currentEpoch
        // Heal the other copy from the one in force, unless it is a newer intact header: never
        // spread an older header over a newer one (a header put back could otherwise destroy the
        // only wrap of a newer key). A newer backup is what a header write killed before its
        // switch leaves; the next header write replaces both.
        for path in [paths.header, paths.headerBackup] {
            let bytes = (try? HeaderFormat.readCopy(path)) ?? nil
            guard bytes != copy.bytes else { continue }
            if let bytes, case .version2(let other) = HeaderFormat.probe(bytes), other.header.generation > copy.header.generation {
                continue
            }
            try Durable.write(copy.bytes, to: path, directory: paths.root)
        }
        removeFormat1Leftovers()
        try refresh()
        fileDamage.removeAll { $0.isHeaderCopy || $0.isLeftover }
    }
}
