#ifndef KEYSMITH_CLIBSECRET_SHIM_H
#define KEYSMITH_CLIBSECRET_SHIM_H

// libsecret's C API. Its variadic functions cannot be called from Swift: Keysmith uses the
// `v` variants and the secret_service_* / secret_collection_* / secret_item_* calls with a
// GHashTable of attributes.
#include <libsecret/secret.h>
#include <gio/gio.h>

// Macros and small helpers, re-published as functions so Swift can call them.

/// A GHashTable of strings to strings that owns (and frees) its keys and values.
static inline GHashTable *CLibSecret_string_table(void) {
    return g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
}

/// Inserts copies of a key and a value.
static inline void CLibSecret_table_insert(GHashTable *table, const char *key, const char *value) {
    g_hash_table_insert(table, g_strdup(key), g_strdup(value));
}

/// A schema attribute table: names to SECRET_SCHEMA_ATTRIBUTE_STRING.
static inline GHashTable *CLibSecret_schema_table(void) {
    return g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
}

static inline void CLibSecret_schema_add_string(GHashTable *table, const char *name) {
    g_hash_table_insert(table, g_strdup(name), GINT_TO_POINTER(SECRET_SCHEMA_ATTRIBUTE_STRING));
}

/// The error domains Keysmith tells apart.
static inline GQuark CLibSecret_io_error_quark(void) { return G_IO_ERROR; }
static inline GQuark CLibSecret_dbus_error_quark(void) { return G_DBUS_ERROR; }
static inline GQuark CLibSecret_secret_error_quark(void) { return SECRET_ERROR; }
static inline int CLibSecret_io_error_cancelled(void) { return G_IO_ERROR_CANCELLED; }
static inline int CLibSecret_io_error_timed_out(void) { return G_IO_ERROR_TIMED_OUT; }
static inline int CLibSecret_secret_error_is_locked(void) { return SECRET_ERROR_IS_LOCKED; }
static inline int CLibSecret_secret_error_no_such_object(void) { return SECRET_ERROR_NO_SUCH_OBJECT; }
static inline int CLibSecret_dbus_error_service_unknown(void) { return G_DBUS_ERROR_SERVICE_UNKNOWN; }
static inline int CLibSecret_dbus_error_name_has_no_owner(void) { return G_DBUS_ERROR_NAME_HAS_NO_OWNER; }
static inline int CLibSecret_dbus_error_no_reply(void) { return G_DBUS_ERROR_NO_REPLY; }
static inline int CLibSecret_dbus_error_timeout(void) { return G_DBUS_ERROR_TIMEOUT; }
static inline int CLibSecret_dbus_error_timed_out(void) { return G_DBUS_ERROR_TIMED_OUT; }

#endif
