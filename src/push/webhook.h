/* webhook: signatures for the callbacks delayq-push delivers, as the
 * Standard Webhooks specification lays them out. The signed content is
 * "<webhook-id>.<webhook-timestamp>.<body>"; each secret gives one
 * "v1,<base64 HMAC-SHA256>" and the webhook-signature header carries them
 * all, space-separated, so a receiver can change secrets without downtime.
 * Pure: no I/O, no global state; OpenSSL's libcrypto does the HMAC. */
#ifndef DQ_WEBHOOK_H
#define DQ_WEBHOOK_H

#include <stddef.h>
#include <stdint.h>

#include "common/base64.h"

/* Bounds on a decoded secret (the specification: 24 to 64 bytes). */
#define WEBHOOK_KEY_MIN 24
#define WEBHOOK_KEY_MAX 64
/* Secrets in one list: a rotation needs two, a few more are headroom. */
#define WEBHOOK_KEYS_MAX 8
/* Longest webhook-id webhook_sign takes (delayq's own id limit). */
#define WEBHOOK_ID_MAX 256
/* One signature in the header: "v1," and 44 base64 characters. */
#define WEBHOOK_SIG_LEN (3 + BASE64_ENCODED_LEN(32))

typedef struct dq_webhook_keys dq_webhook_keys;

/* Parses one or more secrets separated by spaces or commas, each
 * "whsec_<base64>" or the bare base64; the key is the decoded bytes. Every
 * secret signs. Returns NULL with err naming the secret by its position (never
 * its text) on an empty list, a secret that is not base64, one shorter than
 * WEBHOOK_KEY_MIN or longer than WEBHOOK_KEY_MAX bytes, a repeated secret, or
 * more than WEBHOOK_KEYS_MAX. Owned by the caller: webhook_keys_free it, which
 * wipes the key bytes. */
dq_webhook_keys *webhook_keys_parse(const char *spec, char *err, size_t errlen);
void webhook_keys_free(dq_webhook_keys *k);
size_t webhook_keys_count(const dq_webhook_keys *k);

/* Bytes webhook_sign needs for out, the NUL included. */
size_t webhook_signature_size(const dq_webhook_keys *k);

/* 1 if msg_id may be signed: 1 to WEBHOOK_ID_MAX bytes of printable ASCII
 * without spaces and without '.', since a '.' would let the id and the
 * timestamp trade characters and two deliveries share one signed string (the
 * specification asks ids to keep '.' out). delayq job ids may hold '.', so
 * the sender derives a webhook-id that does not. */
int webhook_id_valid(const char *msg_id);

/* Writes the webhook-signature header value for one delivery to out: one
 * "v1,<base64>" per secret, in the order given, space-separated, NUL ended.
 * body may hold any bytes (NULs too); body may be NULL when body_len is 0.
 * Returns 0, or -1 (out then "" when outlen > 0) when outlen is less than
 * webhook_signature_size(k), when msg_id is not webhook_id_valid, or if
 * libcrypto fails. */
int webhook_sign(const dq_webhook_keys *k, const char *msg_id, int64_t timestamp, const char *body,
                 size_t body_len, char *out, size_t outlen);

/* 1 if some "v1,<base64>" entry of a webhook-signature header matches the
 * signature one of the secrets gives for this delivery, else 0 (entries of
 * other versions, such as v1a, are passed over). Compares in constant time,
 * and compares every entry with every secret, so the time taken does not tell
 * which entry or how much of it was right. Does not judge the timestamp's age:
 * a receiver compares it with its clock. */
int webhook_verify(const dq_webhook_keys *k, const char *msg_id, int64_t timestamp, const char *body,
                   size_t body_len, const char *header);

#endif
