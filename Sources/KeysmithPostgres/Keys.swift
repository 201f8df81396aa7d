import FoundationEssentials
import Keysmith
import KeysmithCrypto
import KeysmithCredentials
import PostgresNIO
import Synchronization

/// The master key as opened: the key, its verifier, the wrap key it gives, and the identity key.
struct MasterKeys {
    static let identityLabel = Array("keysmith-pg identity v1".utf8)

    let master: SecretBytes
    let verifier: [UInt8]
    /// The key namespace ids are HMACs under. A database made before identity keys existed
    /// has none stored: its master key is its identity key.
    let identity: SecretBytes

    var wrapKey: SecretBytes { SecretBytes(copying: SHA256.hmac(key: master, NamespaceKeys.wrapLabel)) }

    init(master: SecretBytes, verifier: [UInt8], identity: SecretBytes) {
        self.master = master
        self.verifier = verifier
        self.identity = identity
    }

    init(master: SecretBytes, verifier: [UInt8], wrappedIdentity: [UInt8]?) throws {
        self.master = master
        self.verifier = verifier
        guard let wrapped = wrappedIdentity else {
            identity = master
            return
        }
        let wrapKey = SecretBytes(copying: SHA256.hmac(key: master, NamespaceKeys.wrapLabel))
        guard wrapped.count == 12 + 16 + 32,
              var opened = try? AESGCM.open(ciphertext: Array(wrapped[28...]), tag: Array(wrapped[12..<28]), key: wrapKey,
                                            nonce: Array(wrapped[0..<12]), associatedData: Self.identityLabel)
        else { throw KeysmithError(.corruptData, "the identity key in PostgreSQL does not open under the master key (edited)") }
        identity = SecretBytes(takingOwnershipOf: &opened)
    }

    /// The identity key wrapped under this master key: nonce ‖ tag ‖ ciphertext.
    func wrapIdentity() throws -> [UInt8] {
        var bytes = identity.copyBytes()
        defer { cleanse(&bytes) }
        let sealed = try AESGCM.seal(bytes, key: wrapKey, associatedData: Self.identityLabel)
        return sealed.nonce + sealed.tag + sealed.ciphertext
    }
}

/// The master key's record: how a passphrase is stretched, and a verifier that tells a wrong
/// master key from damage.
enum MasterKeyRecord {
    static let verifierLabel = Array("keysmith-pg verifier v1".utf8)

    /// The master key, checked against the database's verifier, with the identity key; with
    /// `create`, the record is written when the database has none.
    static func loadOrCreate(_ source: PostgresMasterKey, transaction: Transaction, scrypt: ScryptCost, create: Bool, lock: Bool = false) async throws
        -> MasterKeys
    {
        let rows = try await transaction.execute("SELECT kdf, salt, log_n, verifier, identity_key FROM keysmith_master WHERE id = 1 \(unescaped: lock ? "FOR UPDATE" : "")")
        if let row = rows.first {
            let (kdf, salt, logN, verifier, wrappedIdentity) = try row.decode((String, ByteBuffer?, Int16?, ByteBuffer, ByteBuffer?).self)
            let master: SecretBytes
            switch (kdf, source) {
            case ("key", .key), ("key", .keyfile):
                master = try raw(source)
            case ("scrypt", .passphrase(let passphrase)):
                guard let salt, let logN, (14...20).contains(logN), salt.readableBytes == 32 else {
                    throw KeysmithError(.corruptData, "the master key's KDF record in PostgreSQL is out of bounds")
                }
                master = try derive(passphrase, salt: salt.bytes, logN: Int(logN))
            case ("scrypt", _):
                throw KeysmithError(.authenticationFailed, "this database's master key is a passphrase (KEYSMITH_PASSPHRASE), not a key")
            default:
                throw KeysmithError(.authenticationFailed, "this database's master key is a keyfile (KEYSMITH_KEYFILE), not a passphrase")
            }
            guard constantTimeEqual(SHA256.hmac(key: master, verifierLabel), verifier.bytes) else {
                throw KeysmithError(.authenticationFailed, "the master key does not open this database")
            }
            return try MasterKeys(master: master, verifier: verifier.bytes, wrappedIdentity: wrappedIdentity?.bytes)
        }
        guard create else {
            throw KeysmithError(.storeUnavailable, "PostgreSQL has no Keysmith master key record; run `keysmith postgres init`")
        }
        let master: SecretBytes
        var salt: [UInt8]? = nil
        var logN: Int16? = nil
        switch source {
        case .passphrase(let passphrase):
            let newSalt = try Random.bytes(count: 32)
            master = try derive(passphrase, salt: newSalt, logN: scrypt.logN)
            salt = newSalt
            logN = Int16(scrypt.logN)
        default:
            master = try raw(source)
        }
        let kdf = salt == nil ? "key" : "scrypt"
        let verifier = SHA256.hmac(key: master, verifierLabel)
        let saltBuffer = salt.map { ByteBuffer(bytes: $0) }
        // The identity key (namespace ids) is random and wrapped by the master key, so that a
        // master-key rotation re-wraps it and every namespace keeps its id.
        var identity = try Random.bytes(count: 32)
        defer { cleanse(&identity) }
        let keys = MasterKeys(master: master, verifier: verifier, identity: SecretBytes(copying: identity))
        let wrappedIdentity = ByteBuffer(bytes: try keys.wrapIdentity())
        try await transaction.execute("""
            INSERT INTO keysmith_master (id, kdf, salt, log_n, verifier, identity_key)
            VALUES (1, \(kdf), \(saltBuffer), \(logN), \(ByteBuffer(bytes: verifier)), \(wrappedIdentity))
            """)
        return keys
    }

    /// A new master key's record values: KDF, salt, cost, the derived key.
    static func derive(new source: PostgresMasterKey, scrypt: ScryptCost) throws -> (kdf: String, salt: [UInt8]?, logN: Int16?, master: SecretBytes) {
        switch source {
        case .passphrase(let passphrase):
            let salt = try Random.bytes(count: 32)
            return ("scrypt", salt, Int16(scrypt.logN), try derive(passphrase, salt: salt, logN: scrypt.logN))
        default:
            return ("key", nil, nil, try raw(source))
        }
    }

    static func raw(_ source: PostgresMasterKey) throws -> SecretBytes {
        switch source {
        case .key(let bytes):
            guard bytes.count == 32 else { throw KeysmithError.invalidArgument("a master key is 32 bytes (256 bits); this one is \(bytes.count)") }
            return SecretBytes(copying: bytes)
        case .keyfile(let path):
            var key = try Keyfile.read(at: path)
            return SecretBytes(takingOwnershipOf: &key)
        case .passphrase:
            preconditionFailure("a passphrase is derived, not read")
        }
    }

    static func derive(_ passphrase: String, salt: [UInt8], logN: Int) throws -> SecretBytes {
        guard (14...20).contains(logN) else { throw KeysmithError.invalidArgument("the scrypt cost is 2^14 to 2^20") }
        do {
            return try Scrypt.derive(passphrase: SecretBytes(copying: passphrase.utf8), salt: salt, n: 1 << UInt64(logN), r: 8, p: 1, length: 32)
        } catch {
            throw KeysmithError(.ioFailure, "scrypt failed: \(error)")
        }
    }
}

/// One namespace's keys: its id (an HMAC of its name under the identity key), its data keys,
/// and the blind-index key. Data keys added by a rotation in another process are loaded when a
/// row or a batch meets them (``refresh(in:)``).
final class NamespaceKeys: Sendable {
    static let namespaceLabel = Array("keysmith-pg namespace v1".utf8)
    static let wrapLabel = Array("keysmith-pg wrap v1".utf8)
    static let indexLabel = Array("keysmith-pg blind index v1".utf8)
    static let recordLabel = Array("keysmith-pg record v1".utf8)
    static let dataKeyLabel = Array("keysmith-pg data key v1".utf8)
    static let chainLabel = Array("keysmith-pg change chain v1".utf8)
    /// The link before a namespace's first chained change row.
    static let chainGenesis = [UInt8](repeating: 0, count: 32)

    let namespaceID: [UInt8]
    let indexKey: HMACSHA256Key
    /// Links the change feed (``chainLink(after:sequence:blindIndex:version:deleted:sealedKey:)``).
    let chainKey: HMACSHA256Key
    /// The key that wraps data keys (from the master key this process opened with).
    private let wrapKey: SecretBytes
    /// The master verifier this process opened with: a different one means the master key was rotated.
    private let verifier: [UInt8]
    private let ring: Mutex<KeyRing>

    struct KeyRing {
        var keys: [Int32: SecretBytes]
        var current: Int32
    }

    private init(namespaceID: [UInt8], ring: KeyRing, indexKey: HMACSHA256Key, chainKey: HMACSHA256Key, wrapKey: SecretBytes,
                 verifier: [UInt8]) {
        self.namespaceID = namespaceID
        self.ring = Mutex(ring)
        self.indexKey = indexKey
        self.chainKey = chainKey
        self.wrapKey = wrapKey
        self.verifier = verifier
    }

    /// The id of the key new rows are sealed with, and the key.
    var current: (id: Int32, key: SecretBytes) {
        ring.withLock { ($0.current, $0.keys[$0.current]!) }
    }

    /// The id of the key new rows are sealed with.
    var currentKeyID: Int32 { ring.withLock { $0.current } }

    func dataKey(_ id: Int32) -> SecretBytes? { ring.withLock { $0.keys[id] } }

    static func wrapAAD(_ namespaceID: [UInt8], _ keyID: Int32) -> [UInt8] {
        var writer = ByteWriter()
        writer.append(dataKeyLabel)
        writer.appendField(namespaceID)
        writer.append(UInt32(bitPattern: keyID))
        return writer.bytes
    }

    /// A data key wrapped for the database: nonce ‖ tag ‖ ciphertext.
    static func wrap(_ dataKey: [UInt8], wrapKey: SecretBytes, namespaceID: [UInt8], keyID: Int32) throws -> [UInt8] {
        let sealed = try AESGCM.seal(dataKey, key: wrapKey, associatedData: wrapAAD(namespaceID, keyID))
        return sealed.nonce + sealed.tag + sealed.ciphertext
    }

    /// A wrapped data key opened; `nil` when it does not open under `wrapKey`.
    static func unwrap(_ bytes: [UInt8], wrapKey: SecretBytes, namespaceID: [UInt8], keyID: Int32) throws -> SecretBytes? {
        guard bytes.count == 12 + 16 + 32 else { throw KeysmithError(.corruptData, "a wrapped data key in PostgreSQL has the wrong size") }
        guard var opened = try? AESGCM.open(ciphertext: Array(bytes[28...]), tag: Array(bytes[12..<28]), key: wrapKey, nonce: Array(bytes[0..<12]),
                                            associatedData: wrapAAD(namespaceID, keyID)) else { return nil }
        return SecretBytes(takingOwnershipOf: &opened)
    }

    static func loadOrCreate(namespace: String, master: MasterKeys, transaction: Transaction) async throws -> NamespaceKeys {
        let namespaceID = SHA256.hmac(key: master.identity, namespaceLabel + Array(namespace.utf8))
        let wrapKey = master.wrapKey
        let idBuffer = ByteBuffer(bytes: namespaceID)
        if try await transaction.execute("SELECT 1 FROM keysmith_data_keys WHERE namespace_id = \(idBuffer) LIMIT 1").isEmpty {
            var dataKey = try Random.bytes(count: 32)
            defer { cleanse(&dataKey) }
            let wrapped = ByteBuffer(bytes: try wrap(dataKey, wrapKey: wrapKey, namespaceID: namespaceID, keyID: 1))
            try await transaction.execute("""
                INSERT INTO keysmith_data_keys (namespace_id, key_id, wrapped) VALUES (\(idBuffer), \(Int32(1)), \(wrapped))
                ON CONFLICT DO NOTHING
                """)
        }
        let keys = try await loadDataKeys(namespaceID: namespaceID, wrapKey: wrapKey, transaction: transaction)
        return try assemble(namespaceID: namespaceID, dataKeys: keys, wrapKey: wrapKey, verifier: master.verifier)
    }

    /// A namespace's keys from its data keys, opened (by key id; id 1 is the first), with no
    /// server: what ``loadOrCreate(namespace:master:transaction:)`` ends with, and what the
    /// server-free tests of the feed's checks start from.
    static func assemble(namespaceID: [UInt8], dataKeys keys: [Int32: SecretBytes], wrapKey: SecretBytes, verifier: [UInt8]) throws -> NamespaceKeys {
        guard let first = keys[1], let current = keys.keys.max() else {
            throw KeysmithError(.corruptData, "this namespace's first data key is missing from PostgreSQL")
        }
        // The blind-index key comes from the namespace's first data key, so that rotating data
        // keys never moves a row.
        let indexKey = try HMACSHA256Key(SecretBytes(copying: SHA256.hmac(key: first, indexLabel)))
        let chainKey = try HMACSHA256Key(SecretBytes(copying: SHA256.hmac(key: first, chainLabel)))
        return NamespaceKeys(namespaceID: namespaceID, ring: KeyRing(keys: keys, current: current), indexKey: indexKey, chainKey: chainKey,
                             wrapKey: wrapKey, verifier: verifier)
    }

    private static func loadDataKeys(namespaceID: [UInt8], wrapKey: SecretBytes, transaction: Transaction) async throws -> [Int32: SecretBytes] {
        let idBuffer = ByteBuffer(bytes: namespaceID)
        var keys: [Int32: SecretBytes] = [:]
        for row in try await transaction.execute("SELECT key_id, wrapped FROM keysmith_data_keys WHERE namespace_id = \(idBuffer) ORDER BY key_id") {
            let (keyID, wrapped) = try row.decode((Int32, ByteBuffer).self)
            guard let key = try unwrap(wrapped.bytes, wrapKey: wrapKey, namespaceID: namespaceID, keyID: keyID) else {
                throw KeysmithError(.corruptData, "data key \(keyID) of this namespace does not open under the master key (edited or moved in the database)")
            }
            keys[keyID] = key
        }
        return keys
    }

    /// Loads data keys added since this process opened the namespace (a rotation elsewhere).
    /// Throws `KeysmithError.Code.authenticationFailed` when the master key was rotated since:
    /// the process must reopen with the new one.
    func refresh(in transaction: Transaction) async throws {
        if let row = try await transaction.execute("SELECT verifier FROM keysmith_master WHERE id = 1").first,
           try row.decode(ByteBuffer.self).bytes != verifier {
            throw KeysmithError(.authenticationFailed, "the master key was rotated since this process opened the store: reopen it with the new master key")
        }
        let keys = try await Self.loadDataKeys(namespaceID: namespaceID, wrapKey: wrapKey, transaction: transaction)
        ring.withLock { ring in
            for (id, key) in keys where ring.keys[id] == nil { ring.keys[id] = key }
            ring.current = max(ring.current, keys.keys.max() ?? ring.current)
        }
    }

    /// Refreshes when any of these key ids is unknown (a row sealed after a rotation elsewhere).
    func ensureKnown(_ ids: some Sequence<Int32>, in transaction: Transaction) async throws {
        let unknown = ring.withLock { ring in ids.contains { ring.keys[$0] == nil } }
        if unknown { try await refresh(in: transaction) }
    }

    /// Adds a data key (the next id) in `transaction`; returns it without making it current:
    /// the caller installs it (``install(_:id:)``) once the transaction committed. (Made current
    /// here, a batch running beside the rotation on another connection of the handle sealed
    /// rows with a key no other process could load yet, and that the database never had if the
    /// rotation then failed to commit.)
    func rotate(in transaction: Transaction) async throws -> (id: Int32, key: SecretBytes) {
        try await refresh(in: transaction)
        let idBuffer = ByteBuffer(bytes: namespaceID)
        // One rotation at a time per namespace: the next id is taken under a lock on the first key.
        _ = try await transaction.execute("SELECT 1 FROM keysmith_data_keys WHERE namespace_id = \(idBuffer) AND key_id = 1 FOR SHARE")
        let newest = try await transaction.execute("SELECT max(key_id) FROM keysmith_data_keys WHERE namespace_id = \(idBuffer)").first?.decode(Int32.self) ?? 1
        let id = newest + 1
        var dataKey = try Random.bytes(count: 32)
        defer { cleanse(&dataKey) }
        let wrapped = ByteBuffer(bytes: try Self.wrap(dataKey, wrapKey: wrapKey, namespaceID: namespaceID, keyID: id))
        try await transaction.execute("INSERT INTO keysmith_data_keys (namespace_id, key_id, wrapped) VALUES (\(idBuffer), \(id), \(wrapped))")
        return (id, SecretBytes(copying: dataKey))
    }

    /// Makes a committed rotation's key current (``rotate(in:)``).
    func install(_ key: SecretBytes, id: Int32) {
        ring.withLock { ring in
            if ring.keys[id] == nil { ring.keys[id] = key }
            ring.current = max(ring.current, id)
        }
    }

    /// The keyed blind index of an item: HMAC-SHA256 of its canonical identity.
    func blindIndex(_ key: ItemKey) -> [UInt8] {
        indexKey.mac(RecordCodec.identity(key, label: Self.recordLabel))
    }

    static func recordAAD(_ namespaceID: [UInt8], _ blindIndex: [UInt8], _ version: Int64, _ keyID: Int32) -> [UInt8] {
        var writer = ByteWriter()
        writer.append(recordLabel)
        writer.appendField(namespaceID)
        writer.appendField(blindIndex)
        writer.append(UInt64(bitPattern: version))
        writer.append(UInt32(bitPattern: keyID))
        return writer.bytes
    }

    /// AES-GCM contexts by data key, for one thread's run of seals and opens (a batch's rows,
    /// a scan's page): each key's schedule is set up once per run, not once per row (a bulk
    /// revocation seals 200,000 times). Not for concurrent use: one per thread.
    final class Ciphers {
        private var contexts: [Int32: (key: SecretBytes, context: AESGCM.Context)] = [:]

        init() {}

        /// The context of data key `id` under `key`, set up on first use; set up again if the
        /// key given for that id is another object (never reuses a schedule for another key).
        func context(_ id: Int32, _ key: SecretBytes) throws -> AESGCM.Context {
            if let cached = contexts[id], cached.key === key { return cached.context }
            let context = try AESGCM.Context(key: key)
            contexts[id] = (key, context)
            return context
        }
    }

    /// nonce ‖ tag ‖ ciphertext, bound to the namespace, the row's index, version and key id.
    func seal(_ record: SecureRecord, blindIndex: [UInt8], version: Int64, with key: (id: Int32, key: SecretBytes),
              ciphers: Ciphers = Ciphers()) throws -> [UInt8] {
        var plaintext = RecordCodec.encode(record)
        defer { cleanse(&plaintext) }
        let sealed = try ciphers.context(key.id, key.key).seal(plaintext, associatedData: Self.recordAAD(namespaceID, blindIndex, version, key.id))
        return sealed.nonce + sealed.tag + sealed.ciphertext
    }

    static let changeLabel = Array("keysmith-pg change v1".utf8)

    /// One change row's link in its namespace's chain: a MAC, under a key only holders of the
    /// master key can derive, of the link before it and of everything the row says. A row
    /// deleted, edited, reordered or renumbered breaks every link after it.
    func chainLink(after previous: [UInt8], sequence: Int64, blindIndex: [UInt8], version: Int64, deleted: Bool, sealedKey: [UInt8]) -> [UInt8] {
        var writer = ByteWriter()
        writer.append(Self.chainLabel)
        writer.appendField(namespaceID)
        writer.appendField(previous)
        writer.append(UInt64(bitPattern: sequence))
        writer.appendField(blindIndex)
        writer.append(UInt64(bitPattern: version))
        writer.append(UInt8(deleted ? 1 : 0))
        writer.appendField(sealedKey)
        return chainKey.mac(writer.bytes)
    }

    /// What one change row does to the chain, read in sequence order: the one check of a link,
    /// shared by watchers and `verifyChangeFeed` (the link compared in constant time, as every
    /// MAC in Keysmith).
    enum ChainStep: Equatable {
        /// A row of before the namespace was chained (no link, none before it either).
        case unlinked
        /// The row continues the chain; its link is the one to continue from.
        case linked([UInt8])
        /// A row without a link after rows that had one: the feed was edited.
        case missingLink
        /// The row's link is not the one its predecessor and its content give: a row was
        /// deleted, edited, reordered or renumbered. `stored` is the row's own link (a verifier
        /// that goes on checks the next rows against it, so one break is reported once).
        case broken(stored: [UInt8])
    }

    /// Checks one change row against the link of the row before it (`nil` before the first
    /// chained row).
    func chainStep(after previous: [UInt8]?, sequence: Int64, blindIndex: [UInt8], version: Int64, deleted: Bool, sealedKey: [UInt8],
                   stored: [UInt8]?) -> ChainStep {
        guard let stored else { return previous == nil ? .unlinked : .missingLink }
        let expected = chainLink(after: previous ?? Self.chainGenesis, sequence: sequence, blindIndex: blindIndex, version: version,
                                 deleted: deleted, sealedKey: sealedKey)
        return constantTimeEqual(expected, stored) ? .linked(expected) : .broken(stored: stored)
    }

    static func changeAAD(_ namespaceID: [UInt8], _ blindIndex: [UInt8], _ version: Int64) -> [UInt8] {
        var writer = ByteWriter()
        writer.append(changeLabel)
        writer.appendField(namespaceID)
        writer.appendField(blindIndex)
        writer.append(UInt64(bitPattern: version))
        return writer.bytes
    }

    /// The item's identity, sealed for a change row (a watcher learns which item changed, also
    /// when it was deleted): key id (4 bytes) ‖ nonce ‖ tag ‖ ciphertext.
    func sealKey(_ key: ItemKey, blindIndex: [UInt8], version: Int64, with dataKey: (id: Int32, key: SecretBytes),
                 ciphers: Ciphers = Ciphers()) throws -> [UInt8] {
        let record = SecureRecord(info: ItemInfo(attributes: ItemAttributes(key: key), created: Date(timeIntervalSinceReferenceDate: 0),
                                                 modified: Date(timeIntervalSinceReferenceDate: 0)), secret: Data())
        let sealed = try ciphers.context(dataKey.id, dataKey.key).seal(RecordCodec.encode(record),
                                                                       associatedData: Self.changeAAD(namespaceID, blindIndex, version))
        var writer = ByteWriter()
        writer.append(UInt32(bitPattern: dataKey.id))
        return writer.bytes + sealed.nonce + sealed.tag + sealed.ciphertext
    }

    /// The item a change row names; the row's index must be the item's blind index.
    func openKey(_ sealedKey: [UInt8], blindIndex: [UInt8], version: Int64) throws -> ItemKey {
        guard sealedKey.count >= 32 else { throw KeysmithError(.corruptData, "a change row of PostgreSQL is too short") }
        let keyID = Int32(bitPattern: UInt32(sealedKey[0]) << 24 | UInt32(sealedKey[1]) << 16 | UInt32(sealedKey[2]) << 8 | UInt32(sealedKey[3]))
        guard let dataKey = dataKey(keyID) else { throw KeysmithError(.corruptData, "a change row names a data key this namespace does not have") }
        do {
            let plaintext = try AESGCM.open(ciphertext: Array(sealedKey[32...]), tag: Array(sealedKey[16..<32]), key: dataKey,
                                            nonce: Array(sealedKey[4..<16]), associatedData: Self.changeAAD(namespaceID, blindIndex, version))
            let key = try RecordCodec.decode(plaintext, withSecret: false).key
            guard blindIndex == self.blindIndex(key) else { throw KeysmithError(.corruptData, "a change row names another item than its index") }
            return key
        } catch let error as KeysmithError {
            throw error
        } catch {
            throw KeysmithError(.corruptData, "a change row of PostgreSQL does not open: edited or moved")
        }
    }

    func open(_ row: RecordRow, withSecret: Bool, ciphers: Ciphers = Ciphers()) throws -> SecureRecord {
        if let newest = row.newestChange, newest > row.version {
            throw KeysmithError(.corruptData, "a row of PostgreSQL is older than the change feed's newest version of it (put back from an older copy)")
        }
        guard let key = dataKey(row.keyID) else { throw KeysmithError(.corruptData, "a row names a data key this namespace does not have") }
        let bytes = row.sealed
        guard bytes.count >= 28 else { throw KeysmithError(.corruptData, "a row of PostgreSQL is too short to be sealed") }
        do {
            var plaintext = try ciphers.context(row.keyID, key).open(
                ciphertext: Array(bytes[28...]), tag: Array(bytes[12..<28]), nonce: Array(bytes[0..<12]),
                associatedData: Self.recordAAD(namespaceID, row.blindIndex, row.version, row.keyID))
            defer { cleanse(&plaintext) }
            var record = try RecordCodec.decode(plaintext, withSecret: withSecret)
            guard indexKey.mac(RecordCodec.identity(record.key, label: Self.recordLabel)) == row.blindIndex else {
                throw KeysmithError(.corruptData, "a row of PostgreSQL holds another item than its index says")
            }
            record.info.version = ItemVersion(rawValue: String(row.version))
            return record
        } catch let error as KeysmithError {
            throw error
        } catch {
            throw KeysmithError(.corruptData, "a row of PostgreSQL does not open: edited, swapped or put back from another version")
        }
    }
}
