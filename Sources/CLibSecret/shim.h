#ifndef KEYSMITH_CLIBSECRET_SHIM_H
#define KEYSMITH_CLIBSECRET_SHIM_H

// libsecret's C API. Its variadic functions cannot be called from Swift: use the
// `v` variants (secret_password_storev_sync, secret_password_lookupv_sync, ...) with a
// GHashTable of attributes.
#include <libsecret/secret.h>

#endif
