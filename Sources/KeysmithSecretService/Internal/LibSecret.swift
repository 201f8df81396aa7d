// The only file with pointer code for libsecret: small functions, each freeing what it makes
// on the next line. Nothing here is public; no C type leaves this module.
import CLibSecret
import Dispatch
import Keysmith
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

typealias GError = CLibSecret_GError
typealias GList = CLibSecret_GList
typealias GQuark = CLibSecret_GQuark

/// libsecret, loaded on first use. Nothing links against it (CLibSecret only declares what is
/// called): a program that never opens a Secret Service store never loads libsecret, GLib and
/// GIO, and runs where they are not installed.
enum LibSecretLibrary {
    /// The file `dlopen` looks for: the runtime package's soname (Debian's `libsecret-1-0`).
    static let soname = "libsecret-1.so.0"

    /// The loaded functions, or why they could not be loaded; loaded once per process.
    static let loaded: Result<CLibSecret_API, KeysmithError> = load()

    /// The functions, for code that runs only once a store was opened (``LibSecret/connect(timeout:)``
    /// loads them first, and every libsecret object comes from a connection).
    static var api: CLibSecret_API {
        guard case .success(let api) = loaded else { preconditionFailure("libsecret was called before it was loaded") }
        return api
    }

    private static func load() -> Result<CLibSecret_API, KeysmithError> {
        // Never closed: its objects live as long as the process.
        guard let handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL) else {
            let reason = dlerror().map { String(cString: $0) } ?? "no reason given"
            return .failure(KeysmithError(.storeUnavailable, "the Secret Service store needs libsecret, which cannot be loaded "
                                          + "(\(reason)); install it (Debian: apt-get install libsecret-1-0)"))
        }
        var missing: [String] = []
        // A symbol of the library or of one it depends on (GLib, GObject, GIO), as its C type.
        func symbol<Function>(_ name: String) -> Function {
            guard let address = dlsym(handle, name) else {
                missing.append(name)
                return unsafeBitCast(abortOnCall, to: Function.self)
            }
            return unsafeBitCast(address, to: Function.self)
        }
        let api = CLibSecret_API(
            secret_service_get_sync: symbol("secret_service_get_sync"),
            secret_service_get_collections: symbol("secret_service_get_collections"),
            secret_service_lock_sync: symbol("secret_service_lock_sync"),
            secret_collection_for_alias_sync: symbol("secret_collection_for_alias_sync"),
            secret_collection_get_label: symbol("secret_collection_get_label"),
            secret_collection_get_locked: symbol("secret_collection_get_locked"),
            secret_collection_search_sync: symbol("secret_collection_search_sync"),
            secret_item_get_attributes: symbol("secret_item_get_attributes"),
            secret_item_get_label: symbol("secret_item_get_label"),
            secret_item_get_secret: symbol("secret_item_get_secret"),
            secret_item_get_created: symbol("secret_item_get_created"),
            secret_item_get_modified: symbol("secret_item_get_modified"),
            secret_item_create_sync: symbol("secret_item_create_sync"),
            secret_item_delete_sync: symbol("secret_item_delete_sync"),
            secret_value_new: symbol("secret_value_new"),
            secret_value_get: symbol("secret_value_get"),
            secret_value_unref: symbol("secret_value_unref"),
            secret_schema_newv: symbol("secret_schema_newv"),
            secret_schema_unref: symbol("secret_schema_unref"),
            secret_error_get_quark: symbol("secret_error_get_quark"),
            g_io_error_quark: symbol("g_io_error_quark"),
            g_dbus_error_quark: symbol("g_dbus_error_quark"),
            g_dbus_error_get_remote_error: symbol("g_dbus_error_get_remote_error"),
            g_cancellable_new: symbol("g_cancellable_new"),
            g_cancellable_cancel: symbol("g_cancellable_cancel"),
            g_object_ref: symbol("g_object_ref"),
            g_object_unref: symbol("g_object_unref"),
            g_error_free: symbol("g_error_free"),
            g_free: symbol("g_free"),
            g_strdup: symbol("g_strdup"),
            g_quark_to_string: symbol("g_quark_to_string"),
            g_hash_table_new_full: symbol("g_hash_table_new_full"),
            g_hash_table_insert: symbol("g_hash_table_insert"),
            g_hash_table_lookup: symbol("g_hash_table_lookup"),
            g_hash_table_get_keys: symbol("g_hash_table_get_keys"),
            g_hash_table_unref: symbol("g_hash_table_unref"),
            g_list_append: symbol("g_list_append"),
            g_list_free: symbol("g_list_free"),
            g_list_free_full: symbol("g_list_free_full"),
            g_str_hash: symbol("g_str_hash"),
            g_str_equal: symbol("g_str_equal"))
        guard missing.isEmpty else {
            let named = missing.prefix(3).joined(separator: ", ") + (missing.count > 3 ? ", …" : "")
            return .failure(KeysmithError(.storeUnavailable, "the Secret Service store needs libsecret, and the \(soname) found lacks "
                                          + "\(missing.count) of the \(MemoryLayout<CLibSecret_API>.size / MemoryLayout<UnsafeRawPointer>.size) "
                                          + "functions Keysmith calls (\(named)); install Debian's libsecret-1-0 (0.20 or later)"))
        }
        return .success(api)
    }

    /// Stands in for a symbol that was not found; never called, because such a table is refused.
    private static let abortOnCall: @convention(c) () -> Void = { abort() }
}

/// A GLib object reference, released when the last Swift reference goes away.
final class GObjectReference: @unchecked Sendable {
    // The pointer is only used under the backend's mutex; GObject's refcount is atomic.
    let pointer: OpaquePointer

    init(takingOwnershipOf pointer: OpaquePointer) { self.pointer = pointer }
    deinit { LibSecretLibrary.api.g_object_unref(UnsafeMutableRawPointer(pointer)) }
}

/// The loaded functions (see ``LibSecretLibrary/api``).
private var api: CLibSecret_API { LibSecretLibrary.api }

/// Turns a GError into a Keysmith error and frees it. Errors are told apart by their domain and
/// code, and a D-Bus error by its name (`org.freedesktop.Secret.Error.IsLocked`), never by the
/// text of a message; the message is only quoted.
func takeError(_ error: UnsafeMutablePointer<GError>?, doing what: String, timedOut: Bool) -> any Error {
    guard let error else { return KeysmithError(.storeUnavailable, "the Secret Service failed to \(what) and said nothing") }
    defer { api.g_error_free(error) }
    let domain = error.pointee.domain, code = error.pointee.code
    let message = error.pointee.message.map { String(cString: $0) } ?? "no message"
    var remoteName: String?
    if let name = api.g_dbus_error_get_remote_error(error) {
        remoteName = String(cString: name)
        api.g_free(name)
    }
    // The domain and code go into the message (for diagnosis only; never branched on as text).
    let domainName = api.g_quark_to_string(domain).map { String(cString: $0) } ?? "?"
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
            || (isSecret && code == CLibSecret_ERROR_NO_SUCH_OBJECT)
    }

    init(domain: GQuark, code: Int32, remoteName: String?) {
        isIO = domain == api.g_io_error_quark()
        isDBus = domain == api.g_dbus_error_quark()
        isSecret = domain == api.secret_error_get_quark()
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
    if kind.isIO && kind.code == CLibSecret_IO_ERROR_CANCELLED {
        return timedOut
            ? KeysmithError(.timedOut, "the Secret Service did not answer within the timeout while trying to \(what); is its daemon hung?")
            // Keysmith cancels only at its deadline; any other cancellation is a dismissed prompt.
            : KeysmithError(.storeLocked, "the Secret Service's unlock prompt was dismissed or could not be shown: \(message)")
    }
    if (kind.isIO && kind.code == CLibSecret_IO_ERROR_TIMED_OUT)
        || (kind.isDBus && [CLibSecret_DBUS_ERROR_NO_REPLY, CLibSecret_DBUS_ERROR_TIMEOUT, CLibSecret_DBUS_ERROR_TIMED_OUT].contains(Int(kind.code)))
    {
        return KeysmithError(.timedOut, "the Secret Service did not answer in time while trying to \(what): \(message)")
    }
    if kind.isSecret && kind.code == CLibSecret_ERROR_NO_SUCH_OBJECT {
        return KeysmithError(.storeUnavailable, "an item or collection vanished while the Secret Service was asked to \(what) (another program changed it): \(message)")
    }
    if kind.isSecret && kind.code == CLibSecret_ERROR_IS_LOCKED {
        return KeysmithError(.storeLocked, "the Secret Service collection is locked; unlock it (for example by logging in to the desktop) and try again")
    }
    if kind.isDBus && (kind.code == CLibSecret_DBUS_ERROR_SERVICE_UNKNOWN || kind.code == CLibSecret_DBUS_ERROR_NAME_HAS_NO_OWNER) {
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
    // GLib aborts the process rather than return NULL from an allocation.
    let cancellable = GObjectReference(takingOwnershipOf: api.g_cancellable_new()!)
    let fired = Atomic<Bool>(false)
    let finished = Atomic<Bool>(false)
    let nanoseconds = timeout.inNanoseconds
    DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(nanoseconds)) {
        guard !finished.load(ordering: .acquiring) else { return }
        fired.store(true, ordering: .releasing)
        api.g_cancellable_cancel(cancellable.pointer)
    }
    var error: UnsafeMutablePointer<GError>?
    let result = body(cancellable.pointer, &error)
    finished.store(true, ordering: .releasing)
    if let result, error == nil { return result }
    throw takeError(error, doing: what, timedOut: fired.load(ordering: .acquiring))
}

/// Attributes as a GHashTable, freed by the caller's `defer`.
func makeTable(_ attributes: [String: String]) -> OpaquePointer {
    let api = api
    // Owns (and frees) copies of its keys and values.
    let table = api.g_hash_table_new_full(api.g_str_hash, api.g_str_equal, api.g_free, api.g_free)!
    for (key, value) in attributes { _ = api.g_hash_table_insert(table, api.g_strdup(key), api.g_strdup(value)) }
    return table
}

/// A GHashTable of strings read into a dictionary.
func readTable(_ table: OpaquePointer) -> [String: String] {
    var result: [String: String] = [:]
    guard let keys = api.g_hash_table_get_keys(table) else { return result }
    defer { api.g_list_free(keys) }
    var node: UnsafeMutablePointer<GList>? = keys
    while let current = node {
        if let key = current.pointee.data, let value = api.g_hash_table_lookup(table, key) {
            result[String(cString: key.assumingMemoryBound(to: CChar.self))] = String(cString: value.assumingMemoryBound(to: CChar.self))
        }
        node = current.pointee.next
    }
    return result
}

/// The libsecret calls Keysmith makes.
enum LibSecret {
    /// Loads libsecret (once per process) and connects to the Secret Service.
    static func connect(timeout: Duration) throws -> GObjectReference {
        let api = try LibSecretLibrary.loaded.get()
        let flags = Int32(CLibSecret_SERVICE_OPEN_SESSION | CLibSecret_SERVICE_LOAD_COLLECTIONS)
        let service = try withDeadline(timeout, doing: "connect") { cancellable, error in
            api.secret_service_get_sync(flags, cancellable, error)
        }
        return GObjectReference(takingOwnershipOf: service)
    }

    /// The collection with an alias (`default`) or, failing that, a label.
    static func collection(_ service: GObjectReference, named name: String, timeout: Duration) throws -> GObjectReference {
        let byAlias: OpaquePointer? = try? withDeadline(timeout, doing: "find the collection \(name)") { cancellable, error in
            api.secret_collection_for_alias_sync(service.pointer, name, Int32(CLibSecret_COLLECTION_LOAD_ITEMS), cancellable, error)
        }
        if let byAlias { return GObjectReference(takingOwnershipOf: byAlias) }
        if let list = api.secret_service_get_collections(service.pointer) {
            defer { api.g_list_free_full(list, api.g_object_unref) }
            var node: UnsafeMutablePointer<GList>? = list
            while let current = node {
                if let data = current.pointee.data {
                    let collection = OpaquePointer(data)
                    if let label = api.secret_collection_get_label(collection) {
                        defer { api.g_free(label) }
                        if String(cString: label) == name {
                            _ = api.g_object_ref(data)
                            return GObjectReference(takingOwnershipOf: collection)
                        }
                    }
                }
                node = current.pointee.next
            }
        }
        throw KeysmithError(.storeUnavailable, "the Secret Service has no collection named \"\(name)\"")
    }

    static func isLocked(_ collection: GObjectReference) -> Bool {
        api.secret_collection_get_locked(collection.pointer) != 0
    }

    static func lock(_ service: GObjectReference, _ collection: GObjectReference, timeout: Duration) throws {
        let list = api.g_list_append(nil, UnsafeMutableRawPointer(collection.pointer))
        defer { api.g_list_free(list) }
        _ = try withDeadline(timeout, doing: "lock the collection") { cancellable, error -> Bool? in
            api.secret_service_lock_sync(service.pointer, list, cancellable, nil, error) >= 0 ? true : nil
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
        defer { api.g_hash_table_unref(table) }
        var flags = CLibSecret_SEARCH_ALL
        if loadSecrets { flags |= CLibSecret_SEARCH_LOAD_SECRETS }
        let found: UnsafeMutablePointer<GList>? = try withDeadline(timeout, doing: "search") { cancellable, error -> UnsafeMutablePointer<GList>?? in
            let list = api.secret_collection_search_sync(collection.pointer, nil, table, Int32(flags), cancellable, error)
            // An empty result is a NULL list without an error.
            return error.pointee == nil ? .some(list) : nil
        }
        guard let found else { return [] }
        defer { api.g_list_free(found) }  // the items' references move into GObjectReference
        var items: [Item] = []
        var node: UnsafeMutablePointer<GList>? = found
        while let current = node {
            if let data = current.pointee.data {
                let item = OpaquePointer(data)
                let reference = GObjectReference(takingOwnershipOf: item)
                var attributes: [String: String] = [:]
                if let table = api.secret_item_get_attributes(item) {
                    attributes = readTable(table)
                    api.g_hash_table_unref(table)
                }
                var label = ""
                if let text = api.secret_item_get_label(item) {
                    label = String(cString: text)
                    api.g_free(text)
                }
                var secret: [UInt8]?
                if loadSecrets, let value = api.secret_item_get_secret(item) {
                    var length = 0
                    if let bytes = api.secret_value_get(value, &length) {
                        secret = Array(UnsafeRawBufferPointer(start: bytes, count: length))
                    } else {
                        secret = []
                    }
                    api.secret_value_unref(UnsafeMutableRawPointer(value))
                }
                items.append(Item(reference: reference, attributes: attributes, label: label,
                                  created: api.secret_item_get_created(item), modified: api.secret_item_get_modified(item), secret: secret))
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
        defer { api.g_hash_table_unref(table) }
        // secret_value_new copies the bytes; secret_value_unref wipes and frees its copy.
        let value = secret.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { chars in
                api.secret_value_new(chars.baseAddress, buffer.count, "application/octet-stream")
            }
        }
        defer { api.secret_value_unref(UnsafeMutableRawPointer(value)) }
        let item = try withDeadline(timeout, doing: "store an item") { cancellable, error in
            api.secret_item_create_sync(collection.pointer, schema.pointer, table, label, value,
                                        Int32(CLibSecret_ITEM_CREATE_REPLACE), cancellable, error)
        }
        api.g_object_unref(UnsafeMutableRawPointer(item))
    }

    static func delete(_ item: GObjectReference, timeout: Duration) throws {
        _ = try withDeadline(timeout, doing: "delete an item") { cancellable, error -> Bool? in
            api.secret_item_delete_sync(item.pointer, cancellable, error) != 0 ? true : nil
        }
    }

    /// A libsecret schema, kept for the process's lifetime; made only once a store is open
    /// (libsecret is loaded by then).
    final class GSchema: @unchecked Sendable {
        // Immutable after creation; libsecret only reads it.
        let pointer: OpaquePointer

        init(name: String, attributes: [String]) {
            let api = api
            // Names to SECRET_SCHEMA_ATTRIBUTE_STRING; the table frees its copies of the names.
            let table = api.g_hash_table_new_full(api.g_str_hash, api.g_str_equal, api.g_free, nil)!
            defer { api.g_hash_table_unref(table) }
            for attribute in attributes {
                _ = api.g_hash_table_insert(table, api.g_strdup(attribute), UnsafeMutableRawPointer(bitPattern: Int(CLibSecret_SCHEMA_ATTRIBUTE_STRING)))
            }
            // NULL only for a NULL name or a malformed table, which these are not.
            pointer = api.secret_schema_newv(name, Int32(CLibSecret_SCHEMA_DONT_MATCH_NAME), table)!
        }

        deinit { api.secret_schema_unref(pointer) }
    }
}
