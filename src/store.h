/* store: the Redis connection of one thread. The only module that includes
 * hiredis. It connects lazily with bounded timeouts, backs off while Redis is
 * down, loads the scripts (SCRIPT LOAD) and runs them with EVALSHA, reloading
 * on NOSCRIPT, and classifies every failure as "no effect" (503) or "unknown
 * outcome" (504). */
#ifndef DQ_STORE_H
#define DQ_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "scripts.h"
#include "status.h"

typedef struct dq_store dq_store;
typedef struct redisReply store_reply;

/* Script arguments: ARGV[1] (the key prefix) is added by store_eval. */
#define STORE_MAX_ARGS 8200

/* EVALSHA, sha, numkeys, prefix: store_eval fills the slots before the
 * arguments, so a command is sent without copying them. */
#define STORE_HEAD_ARGS 4

typedef struct {
    const char *argv[STORE_HEAD_ARGS + STORE_MAX_ARGS];
    size_t len[STORE_HEAD_ARGS + STORE_MAX_ARGS];
    int argc; /* arguments after the head */
    char nums[STORE_MAX_ARGS][24]; /* storage for numbers added with args_int */
    int nnums;
} store_args;

void args_reset(store_args *a);
void args_str(store_args *a, const char *s, size_t n);
void args_cstr(store_args *a, const char *s);
void args_int(store_args *a, int64_t v);

dq_store *store_new(const dq_config *cfg);
void store_free(dq_store *s);
/* "{prefix}": the hash-tagged key prefix every key starts with. */
const char *store_prefix(const dq_store *s);

/* Runs a script. On DQ_OK, *reply is set (free with store_reply_free).
 * read_only: a lost connection cannot have changed anything, so it maps to
 * DQ_UNAVAILABLE rather than DQ_TIMEOUT. */
dq_status store_eval(dq_store *s, dq_script script, store_args *a, int read_only,
                     store_reply **reply);
/* PING, for /health. */
dq_status store_ping(dq_store *s);

/* Subscriber side (a store used for nothing else): subscribes to the
 * channels; then store_fd tells what to poll and store_read_message returns
 * the next message (0), nothing yet (1) or a lost connection (-1). */
dq_status store_subscribe(dq_store *s, const char *const *channels, int n);
int store_fd(const dq_store *s);
int store_read_message(dq_store *s, char *channel, size_t chlen, char *payload, size_t plen);
void store_disconnect(dq_store *s);

/* Reply access, so callers need not include hiredis. */
void store_reply_free(store_reply *r);
int reply_is_nil(const store_reply *r);
int reply_is_array(const store_reply *r);
size_t reply_len(const store_reply *r);
const store_reply *reply_at(const store_reply *r, size_t i);
/* String value (also for status replies); *n gets its length. NULL if not a string. */
const char *reply_str(const store_reply *r, size_t *n);
/* Integer value; strings holding integers are parsed. */
int64_t reply_int(const store_reply *r);

#endif
