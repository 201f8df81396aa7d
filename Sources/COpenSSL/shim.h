#ifndef KEYSMITH_COPENSSL_SHIM_H
#define KEYSMITH_COPENSSL_SHIM_H

// The parts of OpenSSL 3 that Keysmith uses: EVP ciphers and digests, scrypt, HMAC,
// random bytes, cleansing and the error queue.
#include <openssl/evp.h>
#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/opensslv.h>
#include <openssl/core_names.h>
#include <openssl/params.h>

// Macros are invisible to Swift: re-publish the ones we need as functions.

/// EVP_CTRL_GCM_SET_IVLEN, EVP_CTRL_GCM_GET_TAG, EVP_CTRL_GCM_SET_TAG as plain ints.
static inline int COpenSSL_EVP_CTRL_GCM_SET_IVLEN(void) { return EVP_CTRL_GCM_SET_IVLEN; }
static inline int COpenSSL_EVP_CTRL_GCM_GET_TAG(void) { return EVP_CTRL_GCM_GET_TAG; }
static inline int COpenSSL_EVP_CTRL_GCM_SET_TAG(void) { return EVP_CTRL_GCM_SET_TAG; }

/// Initialises libcrypto without reading the system's openssl.cnf: Keysmith uses only built-in
/// EVP algorithms, so the configuration file is never needed and reading it costs start-up time.
static inline int COpenSSL_init_without_config(void) {
    return OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG, NULL);
}

/// A new HMAC-SHA-256 context (EVP_MAC) keyed with `key`, or NULL. Copy it (EVP_MAC_CTX_dup) for
/// each MAC: re-initialising it with a NULL key does not reset it before OpenSSL 3.0.3.
static inline EVP_MAC_CTX *COpenSSL_hmac_sha256_new(const unsigned char *key, size_t length) {
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (mac == NULL) return NULL;
    EVP_MAC_CTX *context = EVP_MAC_CTX_new(mac);
    EVP_MAC_free(mac); /* the context keeps its own reference */
    if (context == NULL) return NULL;
    char digest[] = "SHA256";
    OSSL_PARAM parameters[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_end(),
    };
    if (EVP_MAC_init(context, key, length, parameters) != 1) {
        EVP_MAC_CTX_free(context);
        return NULL;
    }
    return context;
}

/// OPENSSL_VERSION_TEXT as a function.
static inline const char *COpenSSL_version_text(void) { return OpenSSL_version(OPENSSL_VERSION); }

#endif
