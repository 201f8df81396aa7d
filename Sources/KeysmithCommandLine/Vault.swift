import ArgumentParser
import Keysmith
import KeysmithCredentials
import KeysmithCrypto
import KeysmithSystem
import KeysmithVault

extension KeysmithCommand {
    /// Vault maintenance: verify, change the passphrase, rekey, compact.
    struct Vault: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "vault", 
            abstract: "Check and maintain the vault: verify, repair, change its passphrase or keyfile, rekey, compact, upgrade.",
            subcommands: [Verify.self, Repair.self, Passwd.self, Rekey.self, Compact.self, Upgrade.self]
        )
    }
}

extension KeysmithCommand.Vault {
    /// Lists damage; exit 6 when there is any.
    struct Verify: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "verify", 
            abstract: "Check every file of the vault and list any damage.",
            discussion: """
                Exit code 0 when the vault is intact, 6 when something is damaged. Damage in an old version \
                of a record that was written again since (repaired) is listed as superseded and does not \
                count: the vault is intact, and the next compaction drops those bytes.

                The report ends with the vault's newest commit sequence. A script that keeps it can later run \
                `keysmith vault verify --expect-sequence N` on any machine: a vault that ends below N was \
                rolled back (exit 6). On this machine the rollback anchor does the same by itself; after a \
                deliberate restore from a backup, --accept-rollback makes the anchor take the vault as it is.
                """
        )

        @OptionGroup var store: StoreOptions

        @Flag(help: "Print the report as one JSON document.")
        var json = false

        @Option(name: .customLong("expect-sequence"), help: ArgumentHelp(
            "Report a rollback when the vault's newest commit is below this sequence.", valueName: "n"))
        var expectSequence: UInt64?

        @Flag(name: .customLong("accept-rollback"), help: "Accept the vault as it is after a deliberate restore (resets this machine's anchor).")
        var acceptRollback = false

        func run() throws {
            let vault: FileVault
            do {
                vault = try store.openVault()
            } catch let error as KeysmithError where json {
                // One document even when the vault does not open: what failed, and its kind.
                struct Failure: Encodable { var code: String; var message: String }
                struct Report: Encodable { var intact: Bool; var problems: [String]; var error: Failure }
                print(try jsonLine(Report(intact: false, problems: [], error: Failure(code: error.code.description, message: error.message))))
                throw error
            }
            if acceptRollback { try vault.acceptRollback() }
            var damage = try vault.verify()
            let sequence = try vault.sequence
            if let expectSequence, sequence < expectSequence {
                damage.insert(VaultDamage.rolledBack(sequence: sequence, expected: expectSequence), at: 0)
            }
            let items = damage.contains { !$0.isSuperseded && $0.hidesRecords } ? nil : try? vault.statistics.items
            let open = damage.filter { !$0.isSuperseded }
            if json {
                struct Problem: Encodable {
                    var file: String; var offset: Int; var record: String?; var item: String?; var reason: String; var superseded: Bool
                    var ignored: Bool
                }
                struct Report: Encodable {
                    var intact: Bool
                    var items: Int?
                    var format: Int
                    var newestCommit: UInt64
                    var problems: [Problem]
                    var repairReports: [String]
                    enum CodingKeys: String, CodingKey {
                        case intact, items, format, problems
                        case newestCommit = "newest_commit"
                        case repairReports = "repair_reports"
                    }
                }
                print(try jsonLine(Report(
                    intact: open.isEmpty, items: items, format: vault.formatVersion, newestCommit: sequence,
                    problems: damage.map {
                        Problem(file: $0.file, offset: $0.offset, record: $0.recordID, item: $0.key?.description, reason: $0.reason,
                                superseded: $0.isSuperseded && !$0.isIgnored, ignored: $0.isIgnored)
                    }, repairReports: Self.repairReports(vault.path))))
            } else if open.isEmpty {
                print("The vault at \(vault.path) is intact: \(items ?? 0) item(s), format \(vault.formatVersion), newest commit \(sequence).")
                for problem in damage { print(Self.label(problem)) }
            } else {
                for problem in damage { print(Self.label(problem)) }
                print("Newest commit: \(sequence).")
            }
            if !json {
                // What earlier repairs lost is written beside what they moved aside.
                for report in Self.repairReports(vault.path) { print("An earlier repair's account of what it lost: \(report)") }
            }
            if !open.isEmpty {
                throw CommandFailure(message: "the vault has \(open.count) problem(s)", exitCode: ExitCode(6))
            }
        }

        /// The reports earlier repairs left (`damaged-TIME/report`), oldest first.
        static func repairReports(_ path: String) -> [String] {
            ((try? System.listDirectory(path)) ?? []).filter { $0.hasPrefix("damaged-") }.sorted().compactMap { name in
                let report = path + "/" + name + "/report"
                return ((try? System.status(report)) ?? nil) == nil ? nil : report
            }
        }

        /// A line of the text report: what does not count says why.
        static func label(_ problem: VaultDamage) -> String {
            if problem.isIgnored { return "ignored (not named as a log): \(problem)" }
            if problem.isLeftover { return "interrupted, not damage: \(problem)" }
            return problem.isSuperseded ? "superseded (repaired): \(problem)" : "\(problem)"
        }
    }

    /// Rebuilds a damaged vault from every record that authenticates.
    struct Repair: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "repair",
            abstract: "Rebuild a damaged vault from every record that authenticates, and say what may be lost.",
            discussion: """
                Under the vault's lock, every file is read and every record tried; the newest version of each \
                record that authenticates and belongs to the vault's history is kept (logs after a gap, or \
                from an older copy, are reported and not merged), in a new snapshot that replaces the \
                damaged files in one atomic step. The report names what could not be read (commits, the snapshot), the items kept at \
                a version that may not be their newest, and the records that could not be read at all (their \
                names are sealed inside them). Nothing is deleted: the replaced files are moved into \
                damaged-<time>/ under the vault. The rollback anchor moves to the repaired vault, and the \
                audit log gets a store-repair entry. An intact vault is left as it is. A rolled-back vault is \
                refused: accepting a rollback is `vault verify --accept-rollback`'s deliberate step. A damaged \
                format 1 vault (Keysmith 0.1, 0.2) is repaired by upgrading it to format 2 with every record \
                that authenticates (the format 1 files are moved into damaged-<time>/).

                Exit code 0 when the vault was repaired or was intact; with --dry-run, 6 when a repair is \
                needed (and nothing is changed).
                """
        )

        @OptionGroup var store: StoreOptions

        @Flag(name: .customLong("dry-run"), help: "Report what a repair would do; change nothing.")
        var dryRun = false

        @Flag(help: "Print the report as one JSON document.")
        var json = false

        func run() throws {
            let credential = try store.vaultCredential()  // read once: a passphrase may come from a pipe
            let path = store.vaultPath
            let report: VaultRepairReport
            if FileVault.formatVersion(at: path) == 1 {
                // A format 1 vault is repaired by an upgrade that keeps what authenticates,
                // without opening it first (the damage may be what fails an open); the audit
                // entry then goes into the format 2 vault it became.
                report = try FileVault.repairFormat1(at: path, credential: credential, dryRun: dryRun)
            } else {
                // A dry run changes nothing: not even the older header copy an open heals.
                let vault = try FileVault.open(at: path, credential: credential, healing: !dryRun)
                vault.lockWait = try store.lockWait()
                report = try vault.repair(dryRun: dryRun)
            }
            var auditProblem: String?
            if report.needed && !dryRun {
                do {
                    try makeKeeper(try FileVault.open(at: path, credential: credential)).recordStoreRepair(Self.summary(report))
                } catch {
                    auditProblem = "\(error)"
                }
            }
            if json {
                struct Loss: Encodable { var file: String; var sequence: UInt64?; var reason: String; var salvaged: Int; var complete: Bool }
                struct Document: Encodable {
                    var needed: Bool; var dryRun: Bool; var itemsKept: Int; var losses: [Loss]; var itemsMaybeStale: [String]
                    var unreadableRecords: [String]; var absentItemsMayBeLost: Bool; var headerCopies: [String]; var movedAside: String?
                    var sequence: UInt64; var audited: Bool
                    enum CodingKeys: String, CodingKey {
                        case needed, losses, sequence, audited
                        case dryRun = "dry_run", itemsKept = "items_kept", itemsMaybeStale = "items_maybe_stale"
                        case unreadableRecords = "unreadable_records", absentItemsMayBeLost = "absent_items_may_be_lost"
                        case headerCopies = "header_copies", movedAside = "moved_aside"
                    }
                }
                print(try jsonLine(Document(
                    needed: report.needed, dryRun: report.dryRun, itemsKept: report.itemsKept,
                    losses: report.losses.map { Loss(file: $0.file, sequence: $0.sequence, reason: $0.reason, salvaged: $0.salvaged, complete: $0.complete) },
                    itemsMaybeStale: report.itemsMaybeStale.map(\.description), unreadableRecords: report.unreadableRecords,
                    absentItemsMayBeLost: report.absentItemsMayBeLost, headerCopies: report.headerCopies,
                    movedAside: report.movedAside.map { path + "/" + $0 }, sequence: report.sequence,
                    audited: report.needed && !dryRun && auditProblem == nil)))
            } else if !report.needed {
                print("The vault at \(path) is intact: nothing to repair.")
            } else {
                print(dryRun
                    ? "A repair of the vault at \(path) would keep \(report.itemsKept) item(s), at sequence \(report.sequence); nothing was changed."
                    : "Repaired the vault at \(path): \(report.itemsKept) item(s) kept, sequence \(report.sequence).")
                for loss in report.losses {
                    if loss.complete {
                        print("damaged, every record recovered: \(loss.file): \(OneLine.unicodeEscaped(loss.reason))")
                    } else {
                        print("lost: \(loss.file): \(OneLine.unicodeEscaped(loss.reason))" + (loss.salvaged > 0 ? " (\(loss.salvaged) of its records kept)" : ""))
                    }
                }
                for copy in report.headerCopies { print("header copy rewritten: \(OneLine.unicodeEscaped(copy))") }
                for item in report.itemsMaybeStale { print("may be out of date (a newer version may be lost): \(OneLine.unicodeEscaped(item.description))") }
                for record in report.unreadableRecords { print("unreadable, not kept (its name is sealed inside it): record \(record)") }
                if report.absentItemsMayBeLost {
                    print("Items the vault does not hold may be lost too: a part that could not be read may have created them.")
                }
                if let aside = report.movedAside {
                    print("The replaced files are kept in \(path)/\(aside); nothing was deleted.")
                }
            }
            if let auditProblem {
                throw CommandFailure(message: "the vault was repaired, but its audit entry could not be written: \(auditProblem)", exitCode: ExitCode(6))
            }
            if dryRun && report.needed {
                throw CommandFailure(message: "the vault needs a repair (run `keysmith vault repair`)", exitCode: ExitCode(6))
            }
        }

        /// The audit entry's detail: counts and files, never a secret.
        static func summary(_ report: VaultRepairReport) -> String {
            var parts = ["repaired the vault: \(report.itemsKept) item(s) kept at sequence \(report.sequence)"]
            if !report.losses.isEmpty { parts.append("lost: " + report.losses.map(\.file).joined(separator: " ")) }
            if !report.itemsMaybeStale.isEmpty { parts.append("\(report.itemsMaybeStale.count) item(s) may be out of date") }
            if !report.unreadableRecords.isEmpty { parts.append("\(report.unreadableRecords.count) record(s) unreadable") }
            if let aside = report.movedAside { parts.append("damaged files in \(aside)") }
            return parts.joined(separator: "; ")
        }
    }

    /// Changes what unlocks the vault.
    struct Passwd: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "passwd", 
            abstract: "Change the vault's passphrase or keyfile (re-wraps the key; records are not rewritten).",
            discussion: """
                The new credential comes from --new-keyfile (created when missing), --new-passphrase-fd, \
                $KEYSMITH_NEW_PASSPHRASE, or a prompt (typed twice).
                """
        )

        @OptionGroup var store: StoreOptions

        @Option(name: .customLong("new-keyfile"), help: ArgumentHelp("Unlock with this keyfile from now on.", valueName: "file"))
        var newKeyfile: String?

        @Option(name: .customLong("new-passphrase-fd"), help: ArgumentHelp("Read the new passphrase from this descriptor.", valueName: "n"))
        var newPassphraseFD: Int32?

        @Option(name: .customLong("scrypt-log-n"), help: "scrypt's cost for the new passphrase, as log2(N), 14 to 20.")
        var scryptLogN: Int = 17

        func validate() throws {
            guard (14...20).contains(scryptLogN) else { throw ValidationError("--scrypt-log-n must be between 14 and 20") }
            guard newKeyfile == nil || newPassphraseFD == nil else {
                throw ValidationError("give --new-keyfile or --new-passphrase-fd, not both: a vault has one credential")
            }
        }

        func run() throws {
            let vault = try store.openVault()
            let credential: VaultCredential
            if let newKeyfile {
                if try System.status(newKeyfile) == nil { try VaultCredential.generateKeyfile(at: newKeyfile) }
                credential = .keyfile(at: newKeyfile)
            } else if let newPassphraseFD {
                var bytes = try KeySources.readPassphrase(descriptor: newPassphraseFD)
                defer { cleanse(&bytes) }
                credential = .passphrase(bytes: bytes)
            } else if let environment = try KeySources.newPassphrase(fromEnvironment: "KEYSMITH_NEW_PASSPHRASE") {
                credential = .passphrase(environment)
            } else {
                guard var first = try Terminal.readHidden(prompt: "New passphrase: ") else {
                    throw KeysmithError.invalidArgument("no new credential: use --new-keyfile, --new-passphrase-fd or KEYSMITH_NEW_PASSPHRASE")
                }
                defer { cleanse(&first) }
                var second = try Terminal.readHidden(prompt: "Repeat the new passphrase: ") ?? []
                defer { cleanse(&second) }
                guard first == second, !first.isEmpty else { throw KeysmithError.invalidArgument("the passphrases differ or are empty; nothing changed") }
                credential = .passphrase(bytes: first)
            }
            try vault.changeCredential(to: credential, scrypt: ScryptParameters(n: 1 << UInt64(scryptLogN)))
            print("The vault at \(vault.path) is now unlocked by its new \(credential.description.hasPrefix("keyfile") ? "keyfile" : "passphrase").")
        }
    }

    /// Re-encrypts everything under a new data key.
    struct Rekey: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "rekey", abstract: "Re-encrypt every record under a new data key and retire the old key.")

        @OptionGroup var store: StoreOptions

        func run() throws {
            let vault = try store.openVault()
            try vault.rekey()
            print("Re-keyed \(try vault.statistics.items) item(s).")
        }
    }

    /// Compacts logs into a snapshot.
    struct Compact: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "compact", abstract: "Fold the vault's commit logs into one snapshot now.")

        @OptionGroup var store: StoreOptions

        func run() throws {
            try store.openVault().compact()
        }
    }

    /// Converts a format 1 vault to format 2.
    struct Upgrade: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "upgrade", 
            abstract: "Convert a format 1 vault to format 2, atomically (a vault already in format 2 is left as it is).",
            discussion: """
                The credential stays the same; a passphrase gets a fresh salt and scrypt's cost from \
                --scrypt-log-n. A crash during the upgrade leaves the format 1 vault as it was; run it again.
                """
        )

        @OptionGroup var store: StoreOptions

        @Option(name: .customLong("scrypt-log-n"), help: "scrypt's cost for a passphrase, as log2(N), 14 to 20.")
        var scryptLogN: Int = 17

        func validate() throws {
            guard (14...20).contains(scryptLogN) else { throw ValidationError("--scrypt-log-n must be between 14 and 20") }
        }

        func run() throws {
            let upgraded = try FileVault.upgrade(at: store.vaultPath, credential: try store.credential(),
                                                 scrypt: ScryptParameters(n: 1 << UInt64(scryptLogN)))
            print(upgraded ? "The vault at \(store.vaultPath) is now format 2." : "The vault at \(store.vaultPath) already is format 2.")
        }
    }
}
