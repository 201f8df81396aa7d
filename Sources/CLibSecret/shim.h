#ifndef KEYSMITH_CLIBSECRET_SHIM_H
#define KEYSMITH_CLIBSECRET_SHIM_H

// The part of libsecret's (and GLib's) C API that Keysmith calls, declared here instead of
// included, and called through a table of function pointers that KeysmithSecretService fills with
// dlopen/dlsym when a Secret Service store is first opened. So nothing links against libsecret:
// a program that never opens a Secret Service store (the `keysmith` command on a file vault) does
// not load libsecret, GLib, GIO and their ten dependencies at start-up (about 2 ms of every run),
// and runs on a machine without them.
//
// The types are GLib's public ABI (GError and GList are public structs; the others are only ever
// pointers); the constants are libsecret's and GIO's enum values. Tests compile this header beside
// the real headers and check every constant and layout (LibSecretABITests).

#include <stdint.h>
#include <stddef.h>

// Only the table's function pointers are marked (_Nonnull: every one is filled); other pointers
// keep C's meaning (Swift sees them as implicitly unwrapped optionals).
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wnullability-completeness"

typedef int CLibSecret_gboolean;
typedef uint32_t CLibSecret_GQuark;

/// GError: a domain, a code and a message.
typedef struct CLibSecret_GError {
    CLibSecret_GQuark domain;
    int code;
    char *message;
} CLibSecret_GError;

/// GList: a doubly linked list node.
typedef struct CLibSecret_GList {
    void *data;
    struct CLibSecret_GList *next;
    struct CLibSecret_GList *prev;
} CLibSecret_GList;

// Only ever used through pointers.
typedef struct CLibSecret_GHashTable CLibSecret_GHashTable;
typedef struct CLibSecret_GCancellable CLibSecret_GCancellable;
typedef struct CLibSecret_SecretService CLibSecret_SecretService;
typedef struct CLibSecret_SecretCollection CLibSecret_SecretCollection;
typedef struct CLibSecret_SecretItem CLibSecret_SecretItem;
typedef struct CLibSecret_SecretValue CLibSecret_SecretValue;
typedef struct CLibSecret_SecretSchema CLibSecret_SecretSchema;

typedef unsigned int (*CLibSecret_GHashFunc)(const void *key);
typedef CLibSecret_gboolean (*CLibSecret_GEqualFunc)(const void *a, const void *b);
typedef void (*CLibSecret_GDestroyNotify)(void *data);

// libsecret's and GIO's enum values (secret-service.h, secret-collection.h, secret-types.h,
// secret-item.h, secret-schema.h, gioenums.h).
enum {
    CLibSecret_SERVICE_OPEN_SESSION = 1 << 1,
    CLibSecret_SERVICE_LOAD_COLLECTIONS = 1 << 2,
    CLibSecret_COLLECTION_LOAD_ITEMS = 1 << 1,
    CLibSecret_SEARCH_ALL = 1 << 1,
    CLibSecret_SEARCH_LOAD_SECRETS = 1 << 3,
    CLibSecret_ITEM_CREATE_REPLACE = 1 << 1,
    CLibSecret_SCHEMA_DONT_MATCH_NAME = 1 << 1,
    CLibSecret_SCHEMA_ATTRIBUTE_STRING = 0,
    CLibSecret_ERROR_IS_LOCKED = 2,
    CLibSecret_ERROR_NO_SUCH_OBJECT = 3,
    CLibSecret_IO_ERROR_CANCELLED = 19,
    CLibSecret_IO_ERROR_TIMED_OUT = 24,
    CLibSecret_DBUS_ERROR_SERVICE_UNKNOWN = 2,
    CLibSecret_DBUS_ERROR_NAME_HAS_NO_OWNER = 3,
    CLibSecret_DBUS_ERROR_NO_REPLY = 4,
    CLibSecret_DBUS_ERROR_TIMEOUT = 12,
    CLibSecret_DBUS_ERROR_TIMED_OUT = 20,
};

/// Every function Keysmith calls, by its C name. Each field is filled from the symbol of the
/// same name; a library that lacks one is refused whole.
typedef struct CLibSecret_API {
    // libsecret
    CLibSecret_SecretService *(* _Nonnull secret_service_get_sync)(int flags, CLibSecret_GCancellable *cancellable,
                                                                   CLibSecret_GError **error);
    CLibSecret_GList *(* _Nonnull secret_service_get_collections)(CLibSecret_SecretService *service);
    int (* _Nonnull secret_service_lock_sync)(CLibSecret_SecretService *service, CLibSecret_GList *objects,
                                              CLibSecret_GCancellable *cancellable, CLibSecret_GList **locked,
                                              CLibSecret_GError **error);
    CLibSecret_SecretCollection *(* _Nonnull secret_collection_for_alias_sync)(
        CLibSecret_SecretService *service, const char *alias, int flags, CLibSecret_GCancellable *cancellable,
        CLibSecret_GError **error);
    char *(* _Nonnull secret_collection_get_label)(CLibSecret_SecretCollection *collection);
    CLibSecret_gboolean (* _Nonnull secret_collection_get_locked)(CLibSecret_SecretCollection *collection);
    CLibSecret_GList *(* _Nonnull secret_collection_search_sync)(
        CLibSecret_SecretCollection *collection, const CLibSecret_SecretSchema *schema, CLibSecret_GHashTable *attributes,
        int flags, CLibSecret_GCancellable *cancellable, CLibSecret_GError **error);
    CLibSecret_GHashTable *(* _Nonnull secret_item_get_attributes)(CLibSecret_SecretItem *item);
    char *(* _Nonnull secret_item_get_label)(CLibSecret_SecretItem *item);
    CLibSecret_SecretValue *(* _Nonnull secret_item_get_secret)(CLibSecret_SecretItem *item);
    uint64_t (* _Nonnull secret_item_get_created)(CLibSecret_SecretItem *item);
    uint64_t (* _Nonnull secret_item_get_modified)(CLibSecret_SecretItem *item);
    CLibSecret_SecretItem *(* _Nonnull secret_item_create_sync)(
        CLibSecret_SecretCollection *collection, const CLibSecret_SecretSchema *schema, CLibSecret_GHashTable *attributes,
        const char *label, CLibSecret_SecretValue *value, int flags, CLibSecret_GCancellable *cancellable,
        CLibSecret_GError **error);
    CLibSecret_gboolean (* _Nonnull secret_item_delete_sync)(CLibSecret_SecretItem *item, CLibSecret_GCancellable *cancellable,
                                                             CLibSecret_GError **error);
    CLibSecret_SecretValue *(* _Nonnull secret_value_new)(const char *secret, ptrdiff_t length, const char *content_type);
    const char *(* _Nonnull secret_value_get)(CLibSecret_SecretValue *value, size_t *length);
    void (* _Nonnull secret_value_unref)(void *value);
    CLibSecret_SecretSchema *(* _Nonnull secret_schema_newv)(const char *name, int flags, CLibSecret_GHashTable *attributes);
    void (* _Nonnull secret_schema_unref)(CLibSecret_SecretSchema *schema);
    CLibSecret_GQuark (* _Nonnull secret_error_get_quark)(void);
    // GIO
    CLibSecret_GQuark (* _Nonnull g_io_error_quark)(void);
    CLibSecret_GQuark (* _Nonnull g_dbus_error_quark)(void);
    char *(* _Nonnull g_dbus_error_get_remote_error)(const CLibSecret_GError *error);
    CLibSecret_GCancellable *(* _Nonnull g_cancellable_new)(void);
    void (* _Nonnull g_cancellable_cancel)(CLibSecret_GCancellable *cancellable);
    // GObject and GLib
    void *(* _Nonnull g_object_ref)(void *object);
    void (* _Nonnull g_object_unref)(void *object);
    void (* _Nonnull g_error_free)(CLibSecret_GError *error);
    void (* _Nonnull g_free)(void *memory);
    char *(* _Nonnull g_strdup)(const char *text);
    const char *(* _Nonnull g_quark_to_string)(CLibSecret_GQuark quark);
    CLibSecret_GHashTable *(* _Nonnull g_hash_table_new_full)(CLibSecret_GHashFunc hash, CLibSecret_GEqualFunc equal,
                                                              CLibSecret_GDestroyNotify freeKey,
                                                              CLibSecret_GDestroyNotify freeValue);
    CLibSecret_gboolean (* _Nonnull g_hash_table_insert)(CLibSecret_GHashTable *table, void *key, void *value);
    void *(* _Nonnull g_hash_table_lookup)(CLibSecret_GHashTable *table, const void *key);
    CLibSecret_GList *(* _Nonnull g_hash_table_get_keys)(CLibSecret_GHashTable *table);
    void (* _Nonnull g_hash_table_unref)(CLibSecret_GHashTable *table);
    CLibSecret_GList *(* _Nonnull g_list_append)(CLibSecret_GList *list, void *data);
    void (* _Nonnull g_list_free)(CLibSecret_GList *list);
    void (* _Nonnull g_list_free_full)(CLibSecret_GList *list, CLibSecret_GDestroyNotify freeData);
    // Passed to g_hash_table_new_full, never called by Keysmith.
    CLibSecret_GHashFunc _Nonnull g_str_hash;
    CLibSecret_GEqualFunc _Nonnull g_str_equal;
} CLibSecret_API;

#pragma clang diagnostic pop

#endif
