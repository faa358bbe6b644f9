/* webhook: secret lists, signing and verifying webhook-signature headers. */
#include "push/webhook.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "common/util.h"

#define MAC_LEN 32 /* SHA-256 */
#define SECRET_PREFIX "whsec_"
/* The longest base64 text a WEBHOOK_KEY_MAX-byte key can have. */
#define SECRET_B64_MAX BASE64_ENCODED_LEN(WEBHOOK_KEY_MAX)

typedef struct {
    unsigned char bytes[WEBHOOK_KEY_MAX];
    size_t len;
} webhook_key;

struct dq_webhook_keys {
    EVP_MAC *mac; /* HMAC, fetched once per list, not per signature */
    size_t n;
    webhook_key keys[WEBHOOK_KEYS_MAX];
};

void webhook_keys_free(dq_webhook_keys *k)
{
    if (!k)
        return;
    OPENSSL_cleanse(k->keys, sizeof k->keys);
    EVP_MAC_free(k->mac);
    free(k);
}

size_t webhook_keys_count(const dq_webhook_keys *k)
{
    return k->n;
}

size_t webhook_signature_size(const dq_webhook_keys *k)
{
    /* n signatures, n - 1 spaces, one NUL */
    return k->n * (WEBHOOK_SIG_LEN + 1);
}

/* Decodes the secret text s[0..n) into key. Returns 0, or -1 with err naming
 * the secret by its position. The text itself is never copied into err. */
static int parse_secret(const char *s, size_t n, size_t pos, webhook_key *key, char *err,
                        size_t errlen)
{
    size_t plen = strlen(SECRET_PREFIX);
    if (n >= plen && strncmp(s, SECRET_PREFIX, plen) == 0) {
        s += plen;
        n -= plen;
    }
    if (n == 0) {
        snprintf(err, errlen, "webhook secret %zu is empty (write whsec_ and the base64 key)", pos);
        return -1;
    }
    if (n > SECRET_B64_MAX) {
        snprintf(err, errlen, "webhook secret %zu is longer than %d bytes", pos, WEBHOOK_KEY_MAX);
        return -1;
    }
    /* Decoded into a scratch buffer big enough for any text of this length,
     * then wiped, so a too-long key never overflows key->bytes. */
    unsigned char scratch[BASE64_DECODED_MAX(SECRET_B64_MAX)];
    size_t len = 0;
    int rc = -1;
    if (base64_decode(s, n, scratch, sizeof scratch, &len) < 0)
        snprintf(err, errlen,
                 "webhook secret %zu is not base64 (standard alphabet with '=' padding, after "
                 "the whsec_ prefix)",
                 pos);
    else if (len < WEBHOOK_KEY_MIN)
        snprintf(err, errlen, "webhook secret %zu is shorter than %d bytes", pos, WEBHOOK_KEY_MIN);
    else if (len > WEBHOOK_KEY_MAX)
        snprintf(err, errlen, "webhook secret %zu is longer than %d bytes", pos, WEBHOOK_KEY_MAX);
    else {
        memcpy(key->bytes, scratch, len);
        key->len = len;
        rc = 0;
    }
    OPENSSL_cleanse(scratch, sizeof scratch);
    return rc;
}

dq_webhook_keys *webhook_keys_parse(const char *spec, char *err, size_t errlen)
{
    dq_webhook_keys *k = util_xcalloc(1, sizeof *k);
    const char *p = spec ? spec : "", *start;
    size_t pos = 0, len;
    while (util_next_word(&p, &start, &len)) {
        pos++;
        if (k->n == WEBHOOK_KEYS_MAX) {
            snprintf(err, errlen, "at most %d webhook secrets", WEBHOOK_KEYS_MAX);
            goto fail;
        }
        webhook_key *key = &k->keys[k->n];
        if (parse_secret(start, len, pos, key, err, errlen) < 0)
            goto fail;
        for (size_t i = 0; i < k->n; i++) {
            if (k->keys[i].len == key->len && CRYPTO_memcmp(k->keys[i].bytes, key->bytes, key->len) == 0) {
                snprintf(err, errlen, "webhook secret %zu repeats secret %zu", pos, i + 1);
                goto fail;
            }
        }
        k->n++;
    }
    if (k->n == 0) {
        snprintf(err, errlen, "no webhook secrets (write one or more whsec_<base64>)");
        goto fail;
    }
    k->mac = EVP_MAC_fetch(NULL, OSSL_MAC_NAME_HMAC, NULL);
    if (!k->mac) {
        snprintf(err, errlen, "webhook secrets: OpenSSL has no HMAC");
        goto fail;
    }
    return k;
fail:
    webhook_keys_free(k);
    return NULL;
}

int webhook_id_valid(const char *msg_id)
{
    if (!msg_id)
        return 0;
    size_t n = strlen(msg_id);
    if (n == 0 || n > WEBHOOK_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)msg_id[i];
        if (c <= ' ' || c >= 0x7f || c == '.')
            return 0;
    }
    return 1;
}

/* HMAC-SHA256(key, "<msg_id>.<ts>.<body>") into mac, fed in pieces so the
 * body is not copied. Returns 0 or -1 if libcrypto fails. */
static int compute_mac(EVP_MAC *alg, const webhook_key *key, const char *msg_id, const char *ts,
                       const char *body, size_t body_len, unsigned char mac[MAC_LEN])
{
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_end(),
    };
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(alg);
    size_t outl = 0;
    int ok = ctx && EVP_MAC_init(ctx, key->bytes, key->len, params) &&
             EVP_MAC_update(ctx, (const unsigned char *)msg_id, strlen(msg_id)) &&
             EVP_MAC_update(ctx, (const unsigned char *)".", 1) &&
             EVP_MAC_update(ctx, (const unsigned char *)ts, strlen(ts)) &&
             EVP_MAC_update(ctx, (const unsigned char *)".", 1) &&
             (body_len == 0 || EVP_MAC_update(ctx, (const unsigned char *)body, body_len)) &&
             EVP_MAC_final(ctx, mac, &outl, MAC_LEN) && outl == MAC_LEN;
    EVP_MAC_CTX_free(ctx); /* frees the key schedule it holds, wiped */
    return ok ? 0 : -1;
}

/* Every key's MAC for one delivery into macs. Returns 0 or -1. */
static int compute_all(const dq_webhook_keys *k, const char *msg_id, int64_t timestamp,
                       const char *body, size_t body_len, unsigned char macs[][MAC_LEN])
{
    char ts[24];
    snprintf(ts, sizeof ts, "%" PRId64, timestamp);
    for (size_t i = 0; i < k->n; i++) {
        if (compute_mac(k->mac, &k->keys[i], msg_id, ts, body, body_len, macs[i]) < 0)
            return -1;
    }
    return 0;
}

int webhook_sign(const dq_webhook_keys *k, const char *msg_id, int64_t timestamp, const char *body,
                 size_t body_len, char *out, size_t outlen)
{
    if (outlen > 0)
        out[0] = '\0';
    if (outlen < webhook_signature_size(k) || !webhook_id_valid(msg_id))
        return -1;
    unsigned char macs[WEBHOOK_KEYS_MAX][MAC_LEN];
    int rc = -1;
    if (compute_all(k, msg_id, timestamp, body, body_len, macs) < 0)
        goto out;
    char *w = out;
    for (size_t i = 0; i < k->n; i++) {
        if (i > 0)
            *w++ = ' ';
        memcpy(w, "v1,", 3);
        w += 3;
        /* room checked above: WEBHOOK_SIG_LEN - 3 characters and a NUL */
        if (base64_encode(macs[i], MAC_LEN, w, BASE64_ENCODED_LEN(MAC_LEN) + 1) < 0)
            abort();
        w += BASE64_ENCODED_LEN(MAC_LEN);
    }
    rc = 0;
out:
    OPENSSL_cleanse(macs, sizeof macs);
    if (rc < 0)
        out[0] = '\0';
    return rc;
}

int webhook_verify(const dq_webhook_keys *k, const char *msg_id, int64_t timestamp, const char *body,
                   size_t body_len, const char *header)
{
    if (!header || !webhook_id_valid(msg_id))
        return 0;
    /* The signatures this delivery should carry: wiped after, since they
     * are exactly what a forger would want. */
    unsigned char want[WEBHOOK_KEYS_MAX][MAC_LEN];
    unsigned char got[MAC_LEN];
    int match = 0;
    if (compute_all(k, msg_id, timestamp, body, body_len, want) < 0)
        goto out;
    const char *p = header;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        const char *start = p;
        while (*p && *p != ' ' && *p != '\t')
            p++;
        size_t n = (size_t)(p - start);
        size_t gotn = 0;
        if (n != WEBHOOK_SIG_LEN || strncmp(start, "v1,", 3) != 0 ||
            base64_decode(start + 3, n - 3, got, sizeof got, &gotn) < 0 || gotn != MAC_LEN)
            continue;
        for (size_t i = 0; i < k->n; i++)
            match |= CRYPTO_memcmp(got, want[i], MAC_LEN) == 0;
    }
out:
    OPENSSL_cleanse(want, sizeof want);
    OPENSSL_cleanse(got, sizeof got);
    return match;
}
