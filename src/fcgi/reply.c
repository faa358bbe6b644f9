/* reply: the protocol's JSON answers. */
#include "fcgi/reply.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void reply_key_string(dq_buf *out, const char *key, const char *s, size_t n)
{
    buf_putc(out, '"');
    buf_puts(out, key);
    buf_puts(out, "\":");
    buf_put_json_string(out, s ? s : "", s ? n : 0);
}

/* An error answer up to its closing brace, for more fields to follow. */
static void error_open(dq_buf *out, dq_status st, const char *msg)
{
    buf_reset(out);
    buf_puts(out, "{\"success\":false,\"error\":");
    buf_put_json_string(out, msg, strlen(msg));
    buf_puts(out, ",\"code\":\"");
    buf_puts(out, status_code(st));
    if (status_reason(st)) {
        buf_puts(out, "\",\"reason\":\"");
        buf_puts(out, status_reason(st));
    }
    buf_putc(out, '"');
}

void reply_error(dq_buf *out, dq_status st, const char *msg)
{
    error_open(out, st, msg);
    buf_putc(out, '}');
}

dq_status reply_errorf(dq_buf *out, dq_status st, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    reply_error(out, st, msg);
    return st;
}

void reply_partial(dq_buf *out, const char *msg, const store_spread *sp, int shards,
                   const char *count_field, int64_t count)
{
    error_open(out, DQ_TIMEOUT, msg);
    buf_printf(out, ",\"partial\":true,\"shards\":%d,\"failed_shards\":[", shards);
    const char *sep = "";
    for (int k = 0; k < shards; k++) {
        if (sp->fate[k] == STORE_SHARD_FAILED) {
            buf_printf(out, "%s%d", sep, k);
            sep = ",";
        }
    }
    buf_putc(out, ']');
    if (count_field)
        buf_printf(out, ",\"%s\":%lld", count_field, (long long)count);
    buf_putc(out, '}');
}

void reply_id(dq_buf *out, const char *id, const char *key, const char *value)
{
    buf_puts(out, "{\"success\":true,");
    reply_key_string(out, "id", id, strlen(id));
    if (key) {
        buf_putc(out, ',');
        reply_key_string(out, key, value, strlen(value));
    }
    buf_putc(out, '}');
}

/* ,"replaced":true|false for an upsert's outcome (nothing for -1). */
static void put_replaced(dq_buf *out, int replaced)
{
    if (replaced >= 0)
        buf_puts(out, replaced ? ",\"replaced\":true" : ",\"replaced\":false");
}

void reply_added(dq_buf *out, const char *id, int replaced)
{
    buf_puts(out, "{\"success\":true,");
    reply_key_string(out, "id", id, strlen(id));
    put_replaced(out, replaced);
    buf_putc(out, '}');
}

void reply_id_due(dq_buf *out, const char *id, int64_t due)
{
    buf_puts(out, "{\"success\":true,");
    reply_key_string(out, "id", id, strlen(id));
    buf_puts(out, ",\"due\":");
    buf_put_i64(out, due);
    buf_putc(out, '}');
}

/* ,"name":"<s>" for a field only some jobs have (s NULL: none). */
static void optional_string(dq_buf *out, const char *name, const char *s, size_t n)
{
    if (!s)
        return;
    buf_putc(out, ',');
    reply_key_string(out, name, s, n);
}

/* The fields every answer about one job starts with. */
static void job_head(dq_buf *out, const store_job *j)
{
    buf_puts(out, "{\"success\":true,");
    reply_key_string(out, "id", j->id, j->id_len);
    buf_putc(out, ',');
    reply_key_string(out, "topic", j->topic, j->topic_len);
    optional_string(out, "key", j->key, j->key_len);
    optional_string(out, "traceparent", j->traceparent, j->traceparent_len);
    optional_string(out, "tracestate", j->tracestate, j->tracestate_len);
}

/* ,"name":"<s>" or null (s NULL). */
static void string_or_null(dq_buf *out, const char *name, const char *s, size_t n)
{
    buf_printf(out, ",\"%s\":", name);
    if (s)
        buf_put_json_string(out, s, n);
    else
        buf_puts(out, "null");
}

/* A body is stored as the JSON text the producer sent: written as it is. */
static void job_value(dq_buf *out, const store_job *j)
{
    buf_puts(out, ",\"value\":");
    if (j->body)
        buf_append(out, j->body, j->body_len);
    else
        buf_puts(out, "null");
}

void reply_popped_open(dq_buf *out, const store_job *j)
{
    job_head(out, j);
    job_value(out, j);
    buf_puts(out, ",\"attempts\":");
    buf_put_i64(out, j->attempts);
    buf_puts(out, ",\"ttr\":");
    buf_put_seconds(out, j->ttr_ms);
}

void reply_popped(dq_buf *out, const store_job *j)
{
    reply_popped_open(out, j);
    buf_putc(out, '}');
}

void reply_int_or_null(dq_buf *out, const char *key, int64_t v)
{
    buf_puts(out, ",\"");
    buf_puts(out, key);
    buf_puts(out, "\":");
    if (v < 0)
        buf_puts(out, "null");
    else
        buf_put_i64(out, v);
}

void reply_policy_fields(dq_buf *out, const store_policy *p)
{
    static const struct {
        const char *name;
        int seconds;
    } fields[DQ_POLICY_NFIELDS] = {
#define POLICY_NAME(e, name, stored, min, max, unit) [DQ_POLICY_##e] = {name, unit == 1000},
        DQ_POLICY_FIELDS(POLICY_NAME)
#undef POLICY_NAME
    };
    for (int f = 0; f < DQ_POLICY_NFIELDS; f++) {
        buf_printf(out, "%s\"%s\":", f ? "," : "", fields[f].name);
        if (p->value[f] < 0)
            buf_puts(out, "null");
        else if (fields[f].seconds)
            buf_put_seconds(out, p->value[f]);
        else
            buf_put_i64(out, p->value[f]);
    }
}

/* backoff (seconds), callback and last_attempt, for the jobs that have them. */
static void job_push_fields(dq_buf *out, const store_job *j)
{
    if (j->backoff) {
        buf_puts(out, ",\"backoff\":[");
        const char *p = j->backoff, *end = j->backoff + j->backoff_len;
        while (p < end) {
            char *next;
            int64_t ms = strtoll(p, &next, 10);
            if (next == p)
                break;
            if (p != j->backoff)
                buf_putc(out, ',');
            buf_put_seconds(out, ms);
            p = next < end && *next == ',' ? next + 1 : end;
        }
        buf_putc(out, ']');
    }
    if (!j->url)
        return;
    buf_puts(out, ",\"callback\":{");
    reply_key_string(out, "url", j->url, j->url_len);
    buf_puts(out, ",\"timeout\":");
    buf_put_seconds(out, j->cb_timeout_ms);
    buf_puts(out, "},\"last_attempt\":");
    if (j->last_at < 0) {
        buf_puts(out, "null");
        return;
    }
    buf_puts(out, "{\"at\":");
    buf_put_i64(out, j->last_at);
    reply_int_or_null(out, "status", j->last_status);
    string_or_null(out, "error", j->last_error_len ? j->last_error : NULL, j->last_error_len);
    buf_putc(out, '}');
}

/* A push job's callback attempts, oldest first, when it has a log. */
static void job_deliveries(dq_buf *out, const store_job *j)
{
    size_t n = store_job_ndeliveries(j);
    if (!n)
        return;
    buf_puts(out, ",\"deliveries\":[");
    for (size_t i = 0; i < n; i++) {
        store_delivery d;
        store_job_delivery(j, i, &d);
        buf_puts(out, i ? ",{\"at\":" : "{\"at\":");
        buf_put_i64(out, d.at);
        reply_int_or_null(out, "status", d.status);
        string_or_null(out, "error", d.error, d.error_len);
        reply_int_or_null(out, "ms", d.ms);
        string_or_null(out, "response", d.response, d.response_len);
        string_or_null(out, "decision", d.decision, d.decision ? strlen(d.decision) : 0);
        reply_int_or_null(out, "retry_at", d.retry_at);
        buf_putc(out, '}');
    }
    buf_putc(out, ']');
}

/* A kept record of a finished or deleted job: what it says, and no value. */
static void job_record(dq_buf *out, const store_job *j)
{
    reply_int_or_null(out, "due", j->due);
    reply_int_or_null(out, "first_delivered", j->first_delivered);
    buf_puts(out, ",\"ended\":");
    buf_put_i64(out, j->ended);
    buf_puts(out, ",\"attempts\":");
    buf_put_i64(out, j->attempts);
    buf_puts(out, ",\"created\":");
    buf_put_i64(out, j->created);
    job_deliveries(out, j);
    buf_putc(out, '}');
}

void reply_job(dq_buf *out, const store_job *j)
{
    job_head(out, j);
    buf_putc(out, ',');
    reply_key_string(out, "state", j->state, j->state ? strlen(j->state) : 0);
    if (store_job_is_record(j)) {
        job_record(out, j);
        return;
    }
    job_value(out, j);
    reply_int_or_null(out, "due", j->due);
    buf_puts(out, ",\"ttr\":");
    buf_put_seconds(out, j->ttr_ms);
    buf_puts(out, ",\"attempts\":");
    buf_put_i64(out, j->attempts);
    reply_int_or_null(out, "retries", j->retries);
    buf_puts(out, ",\"created\":");
    buf_put_i64(out, j->created);
    if (j->first_delivered >= 0)
        reply_int_or_null(out, "first_delivered", j->first_delivered);
    job_push_fields(out, j);
    job_deliveries(out, j);
    buf_putc(out, '}');
}

void reply_results_begin(dq_buf *out)
{
    buf_puts(out, "{\"success\":true,\"results\":[");
}

void reply_result_ok(dq_buf *out, size_t i, const char *id, int replaced)
{
    buf_puts(out, i ? ",{" : "{");
    reply_key_string(out, "id", id, strlen(id));
    buf_puts(out, ",\"success\":true");
    put_replaced(out, replaced);
    buf_putc(out, '}');
}

void reply_result_error(dq_buf *out, size_t i, const char *id, dq_status st, const char *msg)
{
    buf_puts(out, i ? ",{" : "{");
    reply_key_string(out, "id", id, strlen(id));
    buf_puts(out, ",\"success\":false,\"code\":\"");
    buf_puts(out, status_code(st));
    buf_puts(out, "\",\"error\":");
    buf_put_json_string(out, msg, strlen(msg));
    buf_putc(out, '}');
}

void reply_results_end(dq_buf *out)
{
    buf_puts(out, "]}");
}

void reply_schedule(dq_buf *out, const store_schedule *sc, const int64_t *upcoming, int n)
{
    buf_puts(out, "{\"id\":");
    buf_put_json_string(out, sc->id, sc->id_len);
    buf_puts(out, ",\"topic\":");
    buf_put_json_string(out, sc->topic ? sc->topic : "", sc->topic_len);
    if (sc->cron) {
        buf_puts(out, ",\"cron\":");
        buf_put_json_string(out, sc->cron, strlen(sc->cron));
    } else {
        buf_printf(out, ",\"every\":%lld", (long long)sc->every_s);
    }
    buf_puts(out, ",\"tz\":");
    buf_put_json_string(out, sc->tz ? sc->tz : "UTC", sc->tz ? strlen(sc->tz) : 3);
    reply_int_or_null(out, "next", sc->next_ms);
    reply_int_or_null(out, "last", sc->last_ms);
    buf_printf(out, ",\"missed\":%lld", (long long)sc->missed);
    reply_int_or_null(out, "start", sc->start_s);
    reply_int_or_null(out, "end", sc->end_s);
    buf_puts(out, ",\"ttr\":");
    buf_put_seconds(out, sc->ttr_ms);
    reply_int_or_null(out, "retries", sc->retries);
    buf_printf(out, ",\"created\":%lld", (long long)sc->created_ms);
    if (sc->body) {
        buf_puts(out, ",\"body\":");
        buf_append(out, sc->body, sc->body_len);
    }
    if (n >= 0) {
        buf_puts(out, ",\"upcoming\":[");
        for (int i = 0; i < n; i++)
            buf_printf(out, "%s%lld", i ? "," : "", (long long)upcoming[i] * 1000);
        buf_putc(out, ']');
    }
    buf_putc(out, '}');
}

void reply_stats_object(dq_buf *out, const int64_t *v, const store_topic_stats *t)
{
    static const int64_t none[STORE_NSTATS];
    if (!v)
        v = none;
    buf_putc(out, '{');
    for (int f = 0; f < STORE_NSTATS; f++)
        buf_printf(out, "%s\"%s\":%lld", f ? "," : "", store_stat_names[f], (long long)v[f]);
    if (t)
        buf_printf(out, ",\"paused\":%s", t->paused ? "true" : "false");
    if (t && t->limited)
        buf_printf(out, ",\"throttled\":%lld,\"keys_waiting\":%lld", (long long)t->throttled,
                   (long long)t->keys_waiting);
    buf_putc(out, '}');
}

void reply_layout(dq_buf *out, const store_layout_info *info)
{
    if (!info) {
        buf_puts(out, ",\"layout\":null");
        return;
    }
    int stored = info->known; /* no shard holds any yet */
    if (info->highest > info->known)
        stored = info->highest;
    else if (info->lowest)
        stored = info->lowest;
    buf_printf(out, ",\"layout\":%d", stored);
    if (stored != info->known)
        buf_printf(out, ",\"layout_known\":%d", info->known);
    if (stored < info->known)
        buf_puts(out, ",\"layout_error\":\"data of an older stored layout: requests answer 503 "
                      "until 'delayq-fcgi --migrate' converts it\"");
    else if (stored > info->known)
        buf_puts(out, ",\"layout_error\":\"data of a newer stored layout than this delayq "
                      "knows: run the release that wrote it\"");
}
