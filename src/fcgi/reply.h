/* reply: the JSON answers of the protocol, written into a buffer. Each
 * shape that more than one command answers with has one writer here. */
#ifndef DQ_REPLY_H
#define DQ_REPLY_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/status.h"
#include "store/store_migrate.h"
#include "store/store_ops.h"

/* {"success":false,"error":msg,"code":..}; replaces what out held. */
void reply_error(dq_buf *out, dq_status st, const char *msg);
/* The same with a printf-style message; returns st. */
dq_status reply_errorf(dq_buf *out, dq_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The answer of a write to every shard that took effect in some shards
 * only: 504 `timeout` with msg, "partial":true, the deployment's shard
 * count, the shards whose calls failed (sp), and count_field: count when
 * count_field is set. Replaces what out held. */
void reply_partial(dq_buf *out, const char *msg, const store_spread *sp, int shards,
                   const char *count_field, int64_t count);

/* {"success":true,"id":..} with one more string field when key is set
 * (touch's due is a number: see reply_id_due). */
void reply_id(dq_buf *out, const char *id, const char *key, const char *value);
void reply_id_due(dq_buf *out, const char *id, int64_t due);
/* add's answer: {"success":true,"id":..}, with "replaced":true|false for
 * an upsert (replaced 1 or 0; -1: an add without replace). */
void reply_added(dq_buf *out, const char *id, int replaced);

/* A popped job: {"success":true,"id":..,"topic":..,"value":..,"attempts":..,"ttr":..}. */
void reply_popped(dq_buf *out, const store_job *j);
/* The same without its closing brace, for an answer with more fields. */
void reply_popped_open(dq_buf *out, const store_job *j);
/* get's answer: the job with its state, due, ttr, attempts, retries, created;
 * for a kept record, its state (finished or deleted), due, first_delivered,
 * ended, attempts and created, and no value. */
void reply_job(dq_buf *out, const store_job *j);

/* Batch answers: {"success":true,"results":[...]} built item by item. */
void reply_results_begin(dq_buf *out);
/* replaced: as reply_added's */
void reply_result_ok(dq_buf *out, size_t i, const char *id, int replaced);
void reply_result_error(dq_buf *out, size_t i, const char *id, dq_status st, const char *msg);
void reply_results_end(dq_buf *out);

/* ,"key":v, or ,"key":null when v < 0 (a value not set). */
void reply_int_or_null(dq_buf *out, const char *key, int64_t v);
/* A policy's fields, `"concurrency":50,...,"keep":null` (null where unset;
 * periods and keep in seconds), without braces. */
void reply_policy_fields(dq_buf *out, const store_policy *p);

/* "key":"<s>" with s escaped. */
void reply_key_string(dq_buf *out, const char *key, const char *s, size_t n);

/* A schedule as `schedules` lists it, with "upcoming" (its next n fires,
 * seconds since the epoch) when n >= 0. */
void reply_schedule(dq_buf *out, const store_schedule *sc, const int64_t *upcoming, int n);
/* A topic's figures, or the totals (t NULL: no "paused"; v NULL: zeros). */
void reply_stats_object(dq_buf *out, const int64_t *v, const store_topic_stats *t);
/* ,"layout":n: the stored layout of the deployment's data (its newest
 * shard's when newer than this delayq knows, else its oldest's; the one
 * this delayq writes while no shard holds any; null when Redis did not
 * say: info NULL). When it is not the one this delayq uses,
 * "layout_known" gives that and "layout_error" what to do. */
void reply_layout(dq_buf *out, const store_layout_info *info);

#endif
