/* store: the Redis connection of one thread. With store_ops.c and
 * store_errors.c, the only code that includes hiredis. It connects lazily
 * with bounded timeouts, backs off while Redis is down, runs delayq's
 * functions with FCALL (loading the library when Redis does not have it),
 * and classifies every failure as "no effect" (503) or "unknown outcome"
 * (504). Handlers use the typed operations of store_ops.h, never this
 * interface's arguments and replies directly. */
#ifndef DQ_STORE_H
#define DQ_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "lua_scripts.h"
#include "status.h"

typedef struct dq_store dq_store;
typedef struct redisReply store_reply;

/* Function arguments after KEYS[1] (the key prefix, added by store_call). */
#define STORE_MAX_ARGS 8200

dq_store *store_new(const dq_config *cfg);
void store_free(dq_store *s);
/* "{prefix}": the hash-tagged key prefix every key starts with. */
const char *store_prefix(const dq_store *s);

/* Building a call: store_args_begin resets the store's own argument list
 * (the store owns its scratch space), then the adders append ARGV items.
 * Strings are not copied: they must live until store_call returns. */
void store_args_begin(dq_store *s);
void store_arg(dq_store *s, const char *str, size_t n);
void store_arg_str(dq_store *s, const char *str);
void store_arg_int(dq_store *s, int64_t v);

/* Runs a function with the arguments built above. On DQ_OK, *reply is set
 * (free with store_reply_free). On a function's own error reply ("DQ_..."),
 * or Redis refusing the command, returns its status with the detail (the
 * words after the code, e.g. the state of a conflict) in detail. A read-only
 * function whose connection is lost cannot have changed anything, so that
 * maps to DQ_UNAVAILABLE rather than DQ_TIMEOUT. */
dq_status store_call(dq_store *s, dq_script fn, store_reply **reply, char *detail,
                     size_t detail_len);
/* PING, for /health. */
dq_status store_ping(dq_store *s);
/* Why Redis cannot be used right now, as a sentence for clients and logs
 * ("Redis refused delayq's credentials (WRONGPASS ...)"), or "" when the
 * last command worked. Process-wide: every thread's stores share it. */
void store_last_cause(char *out, size_t outlen);

/* Subscriber side (a store used for nothing else): subscribes to the
 * channels; then store_fd tells what to poll and store_read_message returns
 * the next message (0), nothing yet (1) or a lost connection (-1). */
dq_status store_subscribe(dq_store *s, const char *const *channels, int n);
int store_fd(const dq_store *s);
int store_read_message(dq_store *s, char *channel, size_t chlen, char *payload, size_t plen);
void store_disconnect(dq_store *s);

/* Reply access, for store_ops.c. */
void store_reply_free(store_reply *r);
int reply_is_nil(const store_reply *r);
size_t reply_len(const store_reply *r);
const store_reply *reply_at(const store_reply *r, size_t i);
/* String value (also for status replies); *n gets its length. NULL if not a string. */
const char *reply_str(const store_reply *r, size_t *n);
/* Integer value; strings holding integers are parsed; -1 for nil. */
int64_t reply_int(const store_reply *r);

#endif
