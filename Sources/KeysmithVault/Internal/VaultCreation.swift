import FoundationEssentials
import Dispatch
import Keysmith
import KeysmithCredentials
import KeysmithCrypto
import KeysmithSystem
import Synchronization

/// Creating format-2 vaults.
enum VaultCreation {
    static func newKDF(for credential: VaultCredential, scrypt: ScryptParameters) throws -> HeaderKDF {
        let salt = try keysmithCrypto { try Random.bytes(count: Format.saltSize) }
        let encoded = Data(salt).base64EncodedString()
        if credential.isPassphrase {
            try scrypt.validate()
            return HeaderKDF(type: "scrypt", n: scrypt.n, r: scrypt.r, p: scrypt.p, salt: encoded)
        }
        _ = try credential.keyMaterial()
        return HeaderKDF(type: "keyfile", n: nil, r: nil, p: nil, salt: encoded)
    }

    /// Writes a new vault's files into `root` (which exists and is empty apart from what the
    /// caller allows): the data directory, an empty snapshot (or `records`, sealed), then the
    /// header last. Returns the header bytes.
    static func create(
        paths: Paths, credential: VaultCredential, scrypt: ScryptParameters, created: Date, idKey: SecretBytes? = nil,
        through: UInt64 = 0, records: [(record: SecureRecord, version: UInt64)] = [], writeHeader: Bool = true
    ) throws -> (header: [UInt8], kek: SecretBytes) {
        let vaultID = try keysmithCrypto { try Random.bytes(count: HeaderFormat.vaultIDSize) }
        let kdf = try newKDF(for: credential, scrypt: scrypt)
        let kek = try HeaderFormat.deriveKEK(kdf, credential: credential)
        let idKey = try idKey ?? keysmithCrypto { try SecretBytes.random(count: 32) }
        let dataKey = try keysmithCrypto { try SecretBytes.random(count: 32) }
        let header = VaultHeader(
            format: HeaderFormat.formatName, version: Format.version, vaultId: vaultID.hexString, created: iso8601(created),
            generation: 1, kdf: kdf,
            idKey: try VaultHeader.wrap(idKey, kek: kek, vaultID: vaultID, kdf: kdf, purpose: KeyPurpose.id, epoch: 0),
            dataKeys: [try VaultHeader.wrap(dataKey, kek: kek, vaultID: vaultID, kdf: kdf, purpose: KeyPurpose.data, epoch: 1)],
            currentEpoch: 1)
        let keys = EpochKeys(epoch: 1, dataKey: dataKey)
        try io {
            try System.mkdir(paths.data, mode: 0o700)
            try System.mkdir(paths.logDirectory, mode: 0o700)
        }
        // The first snapshot: what `records` hold, sorted by record id, chained from the genesis.
        var sealed: [(id: RecordID, version: UInt64, nonce: [UInt8], ciphertext: [UInt8], tag: [UInt8])] = []
        for (record, version) in records {
            let id = RecordID(SHA256.hmac(key: idKey, RecordCodec.identity(record.key)))!
            var plaintext = RecordCodec.encode(record)
            defer { cleanse(&plaintext) }
            let box = try keysmithCrypto {
                try AESGCM.seal(plaintext, key: keys.record, associatedData: SealedRef.associatedData(
                    vaultID: vaultID, epoch: 1, version: version, op: .put, recordID: id))
            }
            sealed.append((id, version, box.nonce, box.ciphertext, box.tag))
        }
        sealed.sort { $0.id < $1.id }
        let head = SnapshotFile.Head(vaultID: vaultID, through: through, epoch: 1, recordCount: sealed.count,
                                      throughMAC: Format.genesisMAC)
        var index: [SnapshotFile.IndexEntry] = []
        var bodies = ByteWriter()
        var offset = head.bodiesStart
        for item in sealed {
            index.append(SnapshotFile.IndexEntry(recordID: item.id, version: item.version, epoch: 1, offset: offset,
                                                  length: item.ciphertext.count, nonce: InlineBytes(item.nonce), tag: InlineBytes(item.tag)))
            offset += item.ciphertext.count
            bodies.append(item.ciphertext)
        }
        let encoded = SnapshotFile.encodeIndex(index, head: head, chainKey: keys.chain)
        try Durable.write(encoded.front + encoded.pages + bodies.bytes, to: paths.snapshot, directory: paths.data)
        let bytes = try keysmithCrypto { try header.encode(kek: kek) }
        if writeHeader {
            try Durable.write(bytes, to: paths.header, directory: paths.root)
            try Durable.write(bytes, to: paths.headerBackup, directory: paths.root)
        }
        return (bytes, kek)
    }

    /// Puts a format 2 vault of `records` in place of the format 1 vault at `root`, as an
    /// upgrade and a format 1 repair both do (docs/format.md, "Upgrade from version 1"): a
    /// `data/` already there moves into the directory `aside()` names (never deleted), the
    /// format 2 files are written beside the format 1 ones, and the primary header's rename is
    /// the switch; the backup copy follows. The caller holds the vault's lock, and removes the
    /// format 1 `snapshot` and `log/` after.
    static func replaceFormat1(
        root: String, credential: VaultCredential, scrypt: ScryptParameters, created: Date, idKey: SecretBytes,
        through: UInt64, records: [(record: SecureRecord, version: UInt64)], aside: () throws -> String
    ) throws {
        let paths = Paths(root: root)
        if System.entryExists(paths.data) {
            let directory = try aside()
            try io { try System.rename(paths.data, root + "/" + directory + "/data") }
        }
        let made = try create(paths: paths, credential: credential, scrypt: scrypt, created: created, idKey: idKey,
                              through: through, records: records, writeHeader: false)
        // The switch. A stale format 1 backup is never used while the primary's checksum holds.
        try Durable.write(made.header, to: paths.header, directory: root)
        try FaultInjection.step()
        try Durable.write(made.header, to: paths.headerBackup, directory: root)
    }
}
