import Keysmith

/// The schema (docs/postgres.md). Every statement is idempotent.
enum PostgresSchema {
    /// The advisory lock that serializes `initialize`.
    static let initializationLock: Int64 = 0x6B65_7973_6D69_7468
    static let statements = [
        """
        CREATE TABLE IF NOT EXISTS keysmith_master (
            id smallint PRIMARY KEY CHECK (id = 1),
            kdf text NOT NULL CHECK (kdf IN ('key', 'scrypt')),
            salt bytea,
            log_n smallint,
            verifier bytea NOT NULL
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS keysmith_data_keys (
            namespace_id bytea NOT NULL,
            key_id integer NOT NULL,
            wrapped bytea NOT NULL,
            PRIMARY KEY (namespace_id, key_id)
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS keysmith_records (
            namespace_id bytea NOT NULL,
            blind_index bytea NOT NULL,
            version bigint NOT NULL,
            key_id integer NOT NULL,
            sealed bytea NOT NULL,
            PRIMARY KEY (namespace_id, blind_index)
        )
        """,
        // Room on each page for a row's next version: a rewrite (a bulk revocation rewrites every
        // token) then stays on its page and adds no index entry (a heap-only update).
        "ALTER TABLE keysmith_records SET (fillfactor = 70)",
        // Databases made before identity keys: the column is added, and left empty (their
        // master key is their identity key) until a master-key rotation fills it.
        "ALTER TABLE keysmith_master ADD COLUMN IF NOT EXISTS identity_key bytea",
        "CREATE SEQUENCE IF NOT EXISTS keysmith_versions",
        """
        CREATE TABLE IF NOT EXISTS keysmith_changes (
            seq bigserial PRIMARY KEY,
            namespace_id bytea NOT NULL,
            blind_index bytea NOT NULL,
            version bigint NOT NULL,
            deleted boolean NOT NULL,
            sealed_key bytea NOT NULL,
            committed_at timestamptz NOT NULL DEFAULT now()
        )
        """,
        // Each change row's link in its namespace's chain (rows written before chaining have none).
        "ALTER TABLE keysmith_changes ADD COLUMN IF NOT EXISTS chain bytea",
        """
        CREATE TABLE IF NOT EXISTS keysmith_chain_heads (
            namespace_id bytea PRIMARY KEY,
            seq bigint NOT NULL,
            chain bytea NOT NULL
        )
        """,
        "CREATE INDEX IF NOT EXISTS keysmith_changes_by_namespace ON keysmith_changes (namespace_id, seq)",
        "CREATE INDEX IF NOT EXISTS keysmith_changes_by_item ON keysmith_changes (namespace_id, blind_index, version)",
        """
        CREATE TABLE IF NOT EXISTS keysmith_watchers (
            namespace_id bytea NOT NULL,
            watcher text NOT NULL,
            acked_seq bigint NOT NULL,
            seen_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (namespace_id, watcher)
        )
        """,
        // Audit entries: the same columns, but append-only. The trigger refuses updates, deletes
        // and truncation to every role that has not disabled it (only the owner can), and the
        // application role is granted INSERT and SELECT only (`grants`).
        """
        CREATE TABLE IF NOT EXISTS keysmith_audit (
            namespace_id bytea NOT NULL,
            blind_index bytea NOT NULL,
            version bigint NOT NULL,
            key_id integer NOT NULL,
            sealed bytea NOT NULL,
            PRIMARY KEY (namespace_id, blind_index)
        )
        """,
        """
        CREATE OR REPLACE FUNCTION keysmith_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION 'keysmith: % is append-only', TG_TABLE_NAME USING ERRCODE = 'KS001';
        END
        $$
        """,
        """
        CREATE OR REPLACE TRIGGER keysmith_audit_append_only BEFORE UPDATE OR DELETE ON keysmith_audit
        FOR EACH ROW EXECUTE FUNCTION keysmith_append_only()
        """,
        """
        CREATE OR REPLACE TRIGGER keysmith_audit_no_truncate BEFORE TRUNCATE ON keysmith_audit
        FOR EACH STATEMENT EXECUTE FUNCTION keysmith_append_only()
        """,
        """
        CREATE OR REPLACE TRIGGER keysmith_changes_append_only BEFORE UPDATE OR DELETE ON keysmith_changes
        FOR EACH ROW EXECUTE FUNCTION keysmith_append_only()
        """,
        """
        CREATE OR REPLACE TRIGGER keysmith_changes_no_truncate BEFORE TRUNCATE ON keysmith_changes
        FOR EACH STATEMENT EXECUTE FUNCTION keysmith_append_only()
        """,
        // A chain head only moves forward: the application role (which must update it) can never
        // set it back to an older change, nor change the link it names at the same change.
        """
        CREATE OR REPLACE FUNCTION keysmith_head_forward() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.namespace_id <> OLD.namespace_id OR NEW.seq < OLD.seq OR (NEW.seq = OLD.seq AND NEW.chain <> OLD.chain) THEN
                RAISE EXCEPTION 'keysmith: a chain head only moves forward' USING ERRCODE = 'KS002';
            END IF;
            RETURN NEW;
        END
        $$
        """,
        """
        CREATE OR REPLACE TRIGGER keysmith_chain_heads_forward BEFORE UPDATE ON keysmith_chain_heads
        FOR EACH ROW EXECUTE FUNCTION keysmith_head_forward()
        """,
    ]

    /// The channel every commit notifies, with the namespace id (hex) as payload.
    static let channel = "keysmith_changes"

    /// What the application's database role may do: read and write records and watcher
    /// acknowledgements, add data keys, and only add to the audit log and the change feed.
    /// `role` must be a plain SQL identifier (checked by the caller).
    static func grants(to role: String) -> [String] {
        [
            "REVOKE ALL ON keysmith_master, keysmith_data_keys, keysmith_records, keysmith_audit, keysmith_changes, keysmith_watchers, "
                + "keysmith_chain_heads FROM \(role)",
            "GRANT SELECT ON keysmith_master TO \(role)",
            "GRANT SELECT, INSERT ON keysmith_data_keys, keysmith_audit, keysmith_changes TO \(role)",
            "GRANT SELECT, INSERT, UPDATE, DELETE ON keysmith_records, keysmith_watchers TO \(role)",
            "GRANT SELECT, INSERT, UPDATE ON keysmith_chain_heads TO \(role)",
            "GRANT USAGE ON SEQUENCE keysmith_versions, keysmith_changes_seq_seq TO \(role)",
        ]
    }
}

/// Where a row lives: records, or the append-only audit log.
enum RecordTable: String, CaseIterable {
    case records = "keysmith_records"
    case audit = "keysmith_audit"

    /// Audit entries go to the append-only table; everything else (the audit head too) to records.
    init(_ key: ItemKey) {
        if case .keysmithRecord(let record) = key, record.recordType == .auditEntry { self = .audit } else { self = .records }
    }
}
