public import Keysmith
import KeysmithTokens
import Foundation

extension KeysmithRecordType {
    /// A refresh that may be at its provider now: written to the store before a refresh token is
    /// sent where the grant's lock can pass to another holder while its holder still runs (the
    /// PostgreSQL store's advisory lock rides on a connection). One record per token, sealed like
    /// every record; it holds no token, only which version of the token is being refreshed, by
    /// whom, and until when its answer may still be kept. See ``ProviderTokens``.
    public static let refreshIntent = KeysmithRecordType(rawValue: "refresh-intent")
}

/// The fence that keeps a refresh token from being sent twice when the grant's lock is lost
/// while its request is in flight: before sending, the holder records its intent (compare and
/// swap, so two holders cannot both record one); a process that finds a live intent for the
/// version of the token it read waits for that version to change (the holder's answer kept),
/// for the intent to go (the holder's request ended without an answer), or for its deadline.
struct RefreshIntent: Codable, Sendable {
    /// A random id of the attempt that wrote it.
    var holder: String
    /// The token's item version the refresh answers (``ItemVersion/rawValue``).
    var tokenVersion: String
    /// When the refresh token was about to be sent.
    var sentAt: Date
    /// Until when the holder may still keep an answer: the request's whole time and
    /// ``commitGrace`` after `sentAt`.
    var deadline: Date

    /// How long after its request's limit a holder may still be committing its answer.
    static let commitGrace: Duration = .seconds(30)

    static func key(service: String, account: String) -> ItemKey {
        .keysmithRecord(KeysmithRecordKey(recordType: .refreshIntent, service: service, account: account))
    }

    func encoded() throws -> Data {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .millisecondsSince1970
        return try encoder.encode(self)
    }

    /// The intent a record holds; `nil` for one that does not decode (it then fences nothing:
    /// it is overwritten by the next intent).
    static func decoded(_ record: SecureRecord) -> RefreshIntent? {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .millisecondsSince1970
        return try? decoder.decode(RefreshIntent.self, from: record.secret)
    }
}

extension ProviderTokens {
    /// What ``recordIntent(service:account:tokenVersion:)`` found.
    enum Fence {
        /// The intent is recorded: the refresh token may be sent.
        case recorded(holder: String)
        /// Another holder's intent was live for the token version read: it was waited out
        /// (the token changed, the intent went, or its deadline passed); read the token again.
        case waited
        /// Another process recorded an intent meanwhile: read the token again.
        case contended
    }

    /// Records this holder's intent to send the refresh token of the token at `tokenVersion`,
    /// unless a live intent of another holder fences it (then waits it out).
    func recordIntent(service: String, account: String, tokenVersion: ItemVersion) async throws -> Fence {
        let key = RefreshIntent.key(service: service, account: account)
        let existing = try await keeper.store.readAwaiting([key])[0]
        if let existing, let intent = RefreshIntent.decoded(existing), intent.tokenVersion == tokenVersion.rawValue,
           !expiredIntents.withLock({ $0.contains(existing.info.version) })
        {
            try await waitOut(intent, at: existing.info.version, service: service, account: account, tokenVersion: tokenVersion)
            return .waited
        }
        let holder = UUID().uuidString
        let now = keeper.now
        let intent = RefreshIntent(holder: holder, tokenVersion: tokenVersion.rawValue, sentAt: now,
                                   deadline: now.addingTimeInterval((timeout + RefreshIntent.commitGrace).inSeconds))
        let operation: StoreOperation
        if var existing {
            existing.secret = try intent.encoded()
            operation = .replace(existing)
        } else {
            operation = .create(ItemAttributes(key: key, label: "refresh in flight"), secret: try intent.encoded())
        }
        do {
            try await keeper.store.performAwaiting([operation])
        } catch let error as KeysmithError where error.code == .writeConflict || error.code == .duplicateItem || error.code == .itemNotFound {
            return .contended
        }
        return .recorded(holder: holder)
    }

    /// Waits, polling, until the token is no longer at `tokenVersion`, the intent record is no
    /// longer the one read (deleted, or replaced by another attempt), or the intent's deadline
    /// has passed, measured on this machine's clock from now and never longer than a holder's
    /// whole window (a clock that runs behind the writer's, or a deadline far ahead, cannot
    /// hold refreshes back for longer).
    private func waitOut(_ intent: RefreshIntent, at intentVersion: ItemVersion, service: String, account: String,
                         tokenVersion: ItemVersion) async throws {
        let clock = ContinuousClock()
        let window = timeout + RefreshIntent.commitGrace
        let left = min(max(intent.deadline.timeIntervalSince(keeper.now), 0), window.inSeconds)
        let end = clock.now + .milliseconds(Int64(left * 1000))
        let key = RefreshIntent.key(service: service, account: account)
        while clock.now < end {
            try await Task.sleep(for: .milliseconds(100))
            let token = try await keeper.versionedTokensAwaiting([(service, account)])[0]
            if token?.version != tokenVersion { return }
            let record = try await keeper.store.readAwaiting([key])[0]
            if record?.info.version != intentVersion { return }
        }
        // The holder can no longer keep an answer: its intent fences nothing from now on.
        _ = expiredIntents.withLock { $0.insert(intentVersion) }
    }

    /// Removes this holder's intent once its request has ended (its answer kept, or no answer):
    /// best effort; an intent left behind fences only the version of the token it names, until
    /// its deadline.
    func clearIntent(holder: String, service: String, account: String) async {
        let key = RefreshIntent.key(service: service, account: account)
        guard let record = try? await keeper.store.readAwaiting([key])[0], RefreshIntent.decoded(record)?.holder == holder else { return }
        try? await keeper.store.performAwaiting([.delete(key, ifVersion: record.info.version)])
    }
}
