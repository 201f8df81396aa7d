// The only file with pointer code for libsecret: small functions, each freeing what it makes
// on the next line. Nothing here is public; no C type leaves this module.
import CLibSecret
import Dispatch
import Keysmith
import Synchronization

/// A GLib object reference, released when the last Swift reference goes away.
final class GObjectReference: @unchecked Sendable {
    // The pointer is only used under the backend's mutex; GObject's refcount is atomic.
    let pointer: OpaquePointer

    init(takingOwnershipOf pointer: OpaquePointer) { self.pointer = pointer }
    deinit { g_object_unref(gpointer(pointer)) }
}

/// Turns a GError into a Keysmith error and frees it. Errors are told apart by their domain and
/// code, and a D-Bus error by its name (`org.freedesktop.Secret.Error.IsLocked`), never by the
/// text of a message; the message is only quoted.
func takeError(_ error: UnsafeMutablePointer<GError>?, doing what: String, timedOut: Bool) -> any Error {
    guard let error else { return KeysmithError(.storeUnavailable, "the Secret Service failed to \(what) and said nothing") }
    defer { g_error_free(error) }
    let domain = error.pointee.domain, code = error.pointee.code
    let message = error.pointee.message.map { String(cString: $0) } ?? "no message"
    var remoteName: String?
    if let name = g_dbus_error_get_remote_error(error) {
        remoteName = String(cString: name)
        g_free(name)
    }
    // The domain and code go into the message (for diagnosis only; never branched on as text).
    let domainName = g_quark_to_string(domain).map { String(cString: $0) } ?? "?"
    let kind = SecretServiceErrorKind(domain: domain, code: code, remoteName: remoteName)
    let classified = classifySecretServiceError(
        kind, message: "\(message) [\(remoteName ?? domainName) \(code)]", doing: what, timedOut: timedOut)
    // Only the readers' retry catches this; everywhere else it is the classified error.
    return kind.isVanishedObject ? SecretVanished(error: classified) : classified
}

/// What a GError is, without its text: enough to classify it.
struct SecretServiceErrorKind {
    var isIO = false, isDBus = false, isSecret = false
    var code: Int32
    var remoteName: String?

    /// An object path that no longer exists: an item (or collection) deleted or replaced by
    /// another process after it was found. gnome-keyring answers `UnknownMethod` on such a path.
    var isVanishedObject: Bool {
        ["org.freedesktop.Secret.Error.NoSuchObject", "org.freedesktop.DBus.Error.UnknownObject",
         "org.freedesktop.DBus.Error.UnknownMethod"].contains(remoteName ?? "")
            || (isSecret && code == CLibSecret_secret_error_no_such_object())
    }

    init(domain: GQuark, code: Int32, remoteName: String?) {
        isIO = domain == CLibSecret_io_error_quark()
        isDBus = domain == CLibSecret_dbus_error_quark()
        isSecret = domain == CLibSecret_secret_error_quark()
        self.code = code
        self.remoteName = remoteName
    }
}

/// Maps an error's kind to a Keysmith error.
func classifySecretServiceError(_ kind: SecretServiceErrorKind, message: String, doing what: String, timedOut: Bool) -> KeysmithError {
    switch kind.remoteName {
    case "org.freedesktop.Secret.Error.IsLocked":
        return KeysmithError(.storeLocked, "the Secret Service collection is locked; unlock it (for example by logging in to the desktop) and try again")
    case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner":
        return KeysmithError(.storeUnavailable, "no Secret Service is running on the D-Bus session bus (start gnome-keyring-daemon or KeePassXC): \(message)")
    // gnome-keyring answers UnknownMethod for an object path that no longer exists.
    case "org.freedesktop.Secret.Error.NoSuchObject", "org.freedesktop.DBus.Error.UnknownObject", "org.freedesktop.DBus.Error.UnknownMethod":
        // An object found a moment ago was deleted or replaced by another process: readers
        // search again (`SecretServiceStore.retryingVanished`); anyone else gets this.
        return KeysmithError(.storeUnavailable, "an item or collection vanished while the Secret Service was asked to \(what) (another program changed it): \(message)")
    case "org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Timeout", "org.freedesktop.DBus.Error.TimedOut":
        return KeysmithError(.timedOut, "the Secret Service did not answer in time while trying to \(what): \(message)")
    default: break
    }
    if kind.isIO && kind.code == CLibSecret_io_error_cancelled() {
        return timedOut
            ? KeysmithError(.timedOut, "the Secret Service did not answer within the timeout while trying to \(what); is its daemon hung?")
            // Keysmith cancels only at its deadline; any other cancellation is a dismissed prompt.
            : KeysmithError(.storeLocked, "the Secret Service's unlock prompt was dismissed or could not be shown: \(message)")
    }
    if (kind.isIO && kind.code == CLibSecret_io_error_timed_out())
        || (kind.isDBus && [CLibSecret_dbus_error_no_reply(), CLibSecret_dbus_error_timeout(), CLibSecret_dbus_error_timed_out()].contains(kind.code))
    {
        return KeysmithError(.timedOut, "the Secret Service did not answer in time while trying to \(what): \(message)")
    }
    if kind.isSecret && kind.code == CLibSecret_secret_error_no_such_object() {
        return KeysmithError(.storeUnavailable, "an item or collection vanished while the Secret Service was asked to \(what) (another program changed it): \(message)")
    }
    if kind.isSecret && kind.code == CLibSecret_secret_error_is_locked() {
        return KeysmithError(.storeLocked, "the Secret Service collection is locked; unlock it (for example by logging in to the desktop) and try again")
    }
    if kind.isDBus && (kind.code == CLibSecret_dbus_error_service_unknown() || kind.code == CLibSecret_dbus_error_name_has_no_owner()) {
        return KeysmithError(.storeUnavailable, "no Secret Service is running on the D-Bus session bus (start gnome-keyring-daemon or KeePassXC): \(message)")
    }
    if kind.isIO {
        // Failing to reach the bus itself (no socket, refused, no autolaunch) is an I/O error.
        return KeysmithError(.storeUnavailable, "cannot reach a Secret Service over the D-Bus session bus while trying to \(what): \(message)")
    }
    return KeysmithError(.storeUnavailable, "the Secret Service failed to \(what): \(message)")
}

/// Runs a blocking libsecret call with a deadline: a watchdog cancels the call's GCancellable
/// when the timeout passes, so a hung daemon costs at most `timeout`, never the 25 s of D-Bus.
func withDeadline<T>(
    _ timeout: Duration, doing what: String,
    _ body: (OpaquePointer, UnsafeMutablePointer<UnsafeMutablePointer<GError>?>) -> T?
) throws -> T {
    let cancellable = GObjectReference(takingOwnershipOf: OpaquePointer(g_cancellable_new()))
    let fired = Atomic<Bool>(false)
    let finished = Atomic<Bool>(false)
    let nanoseconds = timeout.inNanoseconds
    DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(nanoseconds)) {
        guard !finished.load(ordering: .acquiring) else { return }
        fired.store(true, ordering: .releasing)
        g_cancellable_cancel(UnsafeMutablePointer(cancellable.pointer))
    }
    var error: UnsafeMutablePointer<GError>?
    let result = body(cancellable.pointer, &error)
    finished.store(true, ordering: .releasing)
    if let result, error == nil { return result }
    throw takeError(error, doing: what, timedOut: fired.load(ordering: .acquiring))
}

/// Attributes as a GHashTable, freed by the caller's `defer`.
func makeTable(_ attributes: [String: String]) -> OpaquePointer {
    let table = CLibSecret_string_table()!
    for (key, value) in attributes { CLibSecret_table_insert(table, key, value) }
    return table
}

/// A GHashTable of strings read into a dictionary.
func readTable(_ table: OpaquePointer) -> [String: String] {
    var result: [String: String] = [:]
    guard let keys = g_hash_table_get_keys(table) else { return result }
    defer { g_list_free(keys) }
    var node: UnsafeMutablePointer<GList>? = keys
    while let current = node {
        if let key = current.pointee.data, let value = g_hash_table_lookup(table, key) {
            result[String(cString: key.assumingMemoryBound(to: CChar.self))] = String(cString: value.assumingMemoryBound(to: CChar.self))
        }
        node = current.pointee.next
    }
    return result
}

/// The libsecret calls Keysmith makes.
enum LibSecret {
    static func connect(timeout: Duration) throws -> GObjectReference {
        let flags = SecretServiceFlags(rawValue: SECRET_SERVICE_OPEN_SESSION.rawValue | SECRET_SERVICE_LOAD_COLLECTIONS.rawValue)
        let service = try withDeadline(timeout, doing: "connect") { cancellable, error in
            secret_service_get_sync(flags, UnsafeMutablePointer(cancellable), error)
        }
        return GObjectReference(takingOwnershipOf: OpaquePointer(service))
    }

    /// The collection with an alias (`default`) or, failing that, a label.
    static func collection(_ service: GObjectReference, named name: String, timeout: Duration) throws -> GObjectReference {
        let byAlias: UnsafeMutablePointer<SecretCollection>? = try? withDeadline(timeout, doing: "find the collection \(name)") { cancellable, error in
            secret_collection_for_alias_sync(
                UnsafeMutablePointer(service.pointer), name, SECRET_COLLECTION_LOAD_ITEMS, UnsafeMutablePointer(cancellable), error)
        }
        if let byAlias { return GObjectReference(takingOwnershipOf: OpaquePointer(byAlias)) }
        if let list = secret_service_get_collections(UnsafeMutablePointer(service.pointer)) {
            defer { g_list_free_full(list, g_object_unref) }
            var node: UnsafeMutablePointer<GList>? = list
            while let current = node {
                if let data = current.pointee.data {
                    let collection = data.assumingMemoryBound(to: SecretCollection.self)
                    if let label = secret_collection_get_label(collection) {
                        defer { g_free(label) }
                        if String(cString: label) == name {
                            g_object_ref(data)
                            return GObjectReference(takingOwnershipOf: OpaquePointer(collection))
                        }
                    }
                }
                node = current.pointee.next
            }
        }
        throw KeysmithError(.storeUnavailable, "the Secret Service has no collection named \"\(name)\"")
    }

    static func isLocked(_ collection: GObjectReference) -> Bool {
        secret_collection_get_locked(UnsafeMutablePointer(collection.pointer)) != 0
    }

    static func lock(_ service: GObjectReference, _ collection: GObjectReference, timeout: Duration) throws {
        let list = g_list_append(nil, gpointer(collection.pointer))
        defer { g_list_free(list) }
        _ = try withDeadline(timeout, doing: "lock the collection") { cancellable, error -> Bool? in
            secret_service_lock_sync(UnsafeMutablePointer(service.pointer), list, UnsafeMutablePointer(cancellable), nil, error) >= 0 ? true : nil
        }
    }

    /// One stored item: its attributes, label, times and (when loaded) secret.
    struct Item {
        var reference: GObjectReference
        var attributes: [String: String]
        var label: String
        var created: UInt64
        var modified: UInt64
        var secret: [UInt8]?
    }

    static func search(
        _ collection: GObjectReference, attributes: [String: String], loadSecrets: Bool, timeout: Duration
    ) throws -> [Item] {
        let table = makeTable(attributes)
        defer { g_hash_table_unref(table) }
        var flags = SECRET_SEARCH_ALL.rawValue
        if loadSecrets { flags |= SECRET_SEARCH_LOAD_SECRETS.rawValue }
        let found: UnsafeMutablePointer<GList>? = try withDeadline(timeout, doing: "search") { cancellable, error -> UnsafeMutablePointer<GList>?? in
            let list = secret_collection_search_sync(
                UnsafeMutablePointer(collection.pointer), nil, table, SecretSearchFlags(rawValue: flags),
                UnsafeMutablePointer(cancellable), error)
            // An empty result is a NULL list without an error.
            return error.pointee == nil ? .some(list) : nil
        }
        guard let found else { return [] }
        defer { g_list_free(found) }  // the items' references move into GObjectReference
        var items: [Item] = []
        var node: UnsafeMutablePointer<GList>? = found
        while let current = node {
            if let data = current.pointee.data {
                let item = data.assumingMemoryBound(to: SecretItem.self)
                let reference = GObjectReference(takingOwnershipOf: OpaquePointer(item))
                var attributes: [String: String] = [:]
                if let table = secret_item_get_attributes(item) {
                    attributes = readTable(table)
                    g_hash_table_unref(table)
                }
                var label = ""
                if let text = secret_item_get_label(item) {
                    label = String(cString: text)
                    g_free(text)
                }
                var secret: [UInt8]?
                if loadSecrets, let value = secret_item_get_secret(item) {
                    var length = 0
                    if let bytes = secret_value_get(value, &length) {
                        secret = Array(UnsafeRawBufferPointer(start: bytes, count: length))
                    } else {
                        secret = []
                    }
                    secret_value_unref(gpointer(value))
                }
                items.append(Item(reference: reference, attributes: attributes, label: label,
                                  created: UInt64(secret_item_get_created(item)), modified: UInt64(secret_item_get_modified(item)), secret: secret))
            }
            node = current.pointee.next
        }
        return items
    }

    /// Creates (or, with `replace`, replaces) an item under a schema of Keysmith's.
    static func store(
        _ collection: GObjectReference, schema: GSchema, attributes: [String: String], label: String, secret: [UInt8],
        timeout: Duration
    ) throws {
        let table = makeTable(attributes)
        defer { g_hash_table_unref(table) }
        // secret_value_new copies the bytes; secret_value_unref wipes and frees its copy.
        let value = secret.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { chars in
                secret_value_new(chars.baseAddress, gssize(buffer.count), "application/octet-stream")
            }
        }
        defer { secret_value_unref(gpointer(value)) }
        let item = try withDeadline(timeout, doing: "store an item") { cancellable, error in
            secret_item_create_sync(
                UnsafeMutablePointer(collection.pointer), schema.pointer, table, label, value,
                SECRET_ITEM_CREATE_REPLACE, UnsafeMutablePointer(cancellable), error)
        }
        g_object_unref(gpointer(item))
    }

    static func delete(_ item: GObjectReference, timeout: Duration) throws {
        _ = try withDeadline(timeout, doing: "delete an item") { cancellable, error -> Bool? in
            secret_item_delete_sync(UnsafeMutablePointer(item.pointer), UnsafeMutablePointer(cancellable), error) != 0 ? true : nil
        }
    }

    /// A libsecret schema, kept for the process's lifetime.
    final class GSchema: @unchecked Sendable {
        // Immutable after creation; libsecret only reads it.
        let pointer: UnsafePointer<SecretSchema>

        init(name: String, attributes: [String]) {
            let table = CLibSecret_schema_table()!
            defer { g_hash_table_unref(table) }
            for attribute in attributes { CLibSecret_schema_add_string(table, attribute) }
            pointer = UnsafePointer(secret_schema_newv(name, SECRET_SCHEMA_DONT_MATCH_NAME, table))
        }

        deinit { secret_schema_unref(UnsafeMutablePointer(mutating: pointer)) }
    }
}
