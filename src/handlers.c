/* handlers: one function per command, from request to response body. */
#include "handlers.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"
#include "notify.h"
#include "util.h"

#define GENERATED_ID_BYTES 12 /* 24 hex characters */

void write_error(dq_buf *out, dq_status st, const char *msg)
{
    buf_reset(out);
    buf_puts(out, "{\"success\":false,\"error\":");
    buf_put_json_string(out, msg, strlen(msg));
    buf_puts(out, ",\"code\":\"");
    buf_puts(out, status_code(st));
    buf_puts(out, "\"}");
}

static dq_response fail(dq_buf *out, dq_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static dq_response fail(dq_buf *out, dq_status st, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    write_error(out, st, msg);
    return (dq_response){st, 0};
}

/* The sentence for a failure that came from Redis rather than the request. */
static dq_response store_failure(dq_buf *out, dq_status st)
{
    switch (st) {
    case DQ_UNAVAILABLE:
        return fail(out, st, "Redis is unreachable or refused the command; nothing was changed");
    case DQ_TIMEOUT:
        return fail(out, st, "Redis did not answer in time; the request may or may not have "
                             "taken effect");
    default:
        return fail(out, DQ_INTERNAL, "internal error; see the delayq-fcgi log");
    }
}

static dq_response ok(void)
{
    return (dq_response){DQ_OK, 0};
}

static void put_key_string(dq_buf *out, const char *key, const char *s, size_t n)
{
    buf_printf(out, "\"%s\":", key);
    buf_put_json_string(out, s, n);
}

static void put_item_error(dq_buf *out, const char *id, dq_status st, const char *msg)
{
    buf_puts(out, "{");
    put_key_string(out, "id", id, strlen(id));
    buf_printf(out, ",\"success\":false,\"code\":\"%s\",\"error\":", status_code(st));
    buf_put_json_string(out, msg, strlen(msg));
    buf_puts(out, "}");
}

static void args_ids(store_args *a, const dq_request *req)
{
    for (size_t i = 0; i < req->nids; i++)
        args_cstr(a, req->ids[i]);
}

/* "conflict:<state>" -> "<state>"; NULL if the reply is not a conflict. */
static const char *conflict_state(const store_reply *r)
{
    size_t n;
    const char *s = reply_str(r, &n);
    if (s && n > 9 && strncmp(s, "conflict:", 9) == 0)
        return s + 9;
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* add                                                                       */
/* ------------------------------------------------------------------------ */

static dq_response handle_add(dq_handler_ctx *h, const dq_request *req, dq_buf *out)
{
    char (*generated)[2 * GENERATED_ID_BYTES + 1] = calloc(req->njobs, sizeof *generated);
    const char **ids = calloc(req->njobs, sizeof *ids);
    if (!generated || !ids)
        abort();
    store_args *a = h->args;
    args_reset(a);
    args_int(a, h->cfg->buckets);
    args_int(a, (int64_t)req->njobs);
    for (size_t i = 0; i < req->njobs; i++) {
        const dq_job_spec *j = &req->jobs[i];
        ids[i] = j->id;
        if (!ids[i]) {
            util_random_hex(generated[i], GENERATED_ID_BYTES);
            ids[i] = generated[i];
        }
        args_cstr(a, ids[i]);
        args_cstr(a, j->topic);
        args_str(a, j->body, j->body_len);
        args_int(a, j->ttr_ms);
        args_int(a, j->retries);
        args_int(a, j->delay_ms);
        args_int(a, j->at_ms);
        args_int(a, (int64_t)(util_crc32(ids[i], strlen(ids[i])) % (uint32_t)h->cfg->buckets));
    }
    store_reply *r = NULL;
    dq_status st = store_eval(h->store, SCRIPT_ADD, a, 0, &r);
    dq_response res;
    size_t n;
    const char *first = reply_str(reply_at(r, 0), &n);
    if (st != DQ_OK) {
        res = store_failure(out, st);
    } else if (first && strcmp(first, "buckets_mismatch") == 0) {
        log_error("config key 'buckets' (%d) differs from the one this deployment's Redis "
                  "records (key %s:buckets); refusing to add", h->cfg->buckets,
                  store_prefix(h->store));
        res = fail(out, DQ_INTERNAL, "server misconfigured: 'buckets' differs from the value this "
                                     "deployment was started with; see the delayq-fcgi log");
    } else if (first && strcmp(first, "at_range") == 0) {
        long idx = (long)reply_int(reply_at(r, 1));
        res = req->batch ? fail(out, DQ_BAD_REQUEST,
                                "field 'jobs[%ld].at' must be at most ten years from now", idx)
                         : fail(out, DQ_BAD_REQUEST,
                                "field 'at' must be at most ten years from now");
    } else if (!req->batch) {
        const char *state = conflict_state(reply_at(r, 0));
        if (state) {
            res = fail(out, DQ_CONFLICT, "a job with id '%s' already exists (state %s)", ids[0],
                       state);
        } else {
            buf_puts(out, "{\"success\":true,");
            put_key_string(out, "id", ids[0], strlen(ids[0]));
            buf_puts(out, "}");
            res = ok();
        }
    } else {
        buf_puts(out, "{\"success\":true,\"results\":[");
        for (size_t i = 0; i < req->njobs; i++) {
            if (i)
                buf_puts(out, ",");
            const char *state = conflict_state(reply_at(r, i));
            if (state) {
                char msg[128];
                snprintf(msg, sizeof msg, "a job with this id already exists (state %s)", state);
                put_item_error(out, ids[i], DQ_CONFLICT, msg);
            } else {
                buf_puts(out, "{");
                put_key_string(out, "id", ids[i], strlen(ids[i]));
                buf_puts(out, ",\"success\":true}");
            }
        }
        buf_puts(out, "]}");
        res = ok();
    }
    store_reply_free(r);
    free(generated);
    free(ids);
    return res;
}

/* ------------------------------------------------------------------------ */
/* pop                                                                       */
/* ------------------------------------------------------------------------ */

static void put_popped_job(dq_buf *out, const store_reply *job)
{
    size_t n;
    const char *s;
    buf_puts(out, "{\"success\":true,");
    s = reply_str(reply_at(job, 0), &n);
    put_key_string(out, "id", s, n);
    buf_puts(out, ",");
    s = reply_str(reply_at(job, 1), &n);
    put_key_string(out, "topic", s, n);
    buf_puts(out, ",\"value\":");
    s = reply_str(reply_at(job, 2), &n);
    buf_append(out, s, n); /* stored as the JSON text the producer sent */
    buf_puts(out, ",\"attempts\":");
    buf_put_i64(out, reply_int(reply_at(job, 3)));
    buf_puts(out, ",\"ttr\":");
    buf_put_seconds(out, reply_int(reply_at(job, 4)));
    buf_puts(out, "}");
}

static dq_response handle_pop(dq_handler_ctx *h, const dq_request *req, dq_buf *out)
{
    int64_t deadline = util_mono_ms() + req->timeout_ms;
    store_reply *r = NULL;
    for (;;) {
        uint64_t gen = notify_generation();
        store_args *a = h->args;
        args_reset(a);
        args_int(a, req->count > 0 ? req->count : 1);
        for (size_t i = 0; i < req->ntopics; i++)
            args_cstr(a, req->topics[i]);
        dq_status st = store_eval(h->store, SCRIPT_POP, a, 0, &r);
        if (st != DQ_OK)
            return store_failure(out, st);
        if (reply_len(r) > 0 || util_mono_ms() >= deadline || notify_stopping())
            break;
        store_reply_free(r);
        r = NULL;
        uint32_t woken_by = notify_wait(req->topics, req->ntopics, &gen, deadline);
        if (h->client_gone && h->client_gone(h->client_arg)) {
            notify_pass_on(woken_by); /* nobody to hand a job to: leave it ready */
            break;
        }
    }
    if (req->count > 0) {
        buf_puts(out, "{\"success\":true,\"jobs\":[");
        for (size_t i = 0; i < reply_len(r); i++) {
            if (i)
                buf_puts(out, ",");
            /* Each job shaped like the single-job answer. */
            put_popped_job(out, reply_at(r, i));
        }
        buf_puts(out, "]}");
    } else if (reply_len(r) > 0) {
        put_popped_job(out, reply_at(r, 0));
    } else {
        buf_puts(out, "{\"success\":true,\"id\":null,\"value\":null}");
    }
    store_reply_free(r);
    return ok();
}

/* ------------------------------------------------------------------------ */
/* finish / delete                                                           */
/* ------------------------------------------------------------------------ */

static dq_response handle_remove(dq_handler_ctx *h, const dq_request *req, dq_buf *out)
{
    store_args *a = h->args;
    args_reset(a);
    args_cstr(a, req->cmd == CMD_FINISH ? "finished" : "deleted");
    args_ids(a, req);
    store_reply *r = NULL;
    dq_status st = store_eval(h->store, SCRIPT_REMOVE, a, 0, &r);
    if (st != DQ_OK)
        return store_failure(out, st);
    dq_response res = ok();
    if (!req->batch) {
        if (reply_int(reply_at(r, 0)) == 1) {
            buf_puts(out, "{\"success\":true,");
            put_key_string(out, "id", req->ids[0], strlen(req->ids[0]));
            buf_puts(out, "}");
        } else {
            res = fail(out, DQ_NOT_FOUND, "no job with id '%s'", req->ids[0]);
        }
    } else {
        buf_puts(out, "{\"success\":true,\"results\":[");
        for (size_t i = 0; i < req->nids; i++) {
            if (i)
                buf_puts(out, ",");
            if (reply_int(reply_at(r, i)) == 1) {
                buf_puts(out, "{");
                put_key_string(out, "id", req->ids[i], strlen(req->ids[i]));
                buf_puts(out, ",\"success\":true}");
            } else {
                put_item_error(out, req->ids[i], DQ_NOT_FOUND, "no job with this id");
            }
        }
        buf_puts(out, "]}");
    }
    store_reply_free(r);
    return res;
}

/* ------------------------------------------------------------------------ */
/* get / touch / release / bury / kick                                       */
/* ------------------------------------------------------------------------ */

/* Runs a one-id script; maps 'not_found' and 'conflict:<state>' replies. */
static dq_status run_on_job(dq_handler_ctx *h, dq_script script, const dq_request *req,
                            int read_only, store_reply **r, dq_buf *out, dq_response *res)
{
    store_args *a = h->args;
    args_reset(a);
    args_cstr(a, req->ids[0]);
    if (req->cmd == CMD_RELEASE)
        args_int(a, req->delay_ms);
    dq_status st = store_eval(h->store, script, a, read_only, r);
    if (st != DQ_OK) {
        *res = store_failure(out, st);
        return st;
    }
    size_t n;
    const char *s = reply_str(*r, &n);
    const char *state = conflict_state(*r);
    if (reply_is_nil(*r) || (s && strcmp(s, "not_found") == 0)) {
        *res = fail(out, DQ_NOT_FOUND, "no job with id '%s'", req->ids[0]);
        st = DQ_NOT_FOUND;
    } else if (state) {
        *res = fail(out, DQ_CONFLICT, "job '%s' is %s, not reserved; %s needs a reserved job",
                    req->ids[0], state, command_name(req->cmd));
        st = DQ_CONFLICT;
    }
    if (st != DQ_OK) {
        store_reply_free(*r);
        *r = NULL;
    }
    return st;
}

static void put_ms_or_null(dq_buf *out, const char *key, int64_t ms)
{
    buf_printf(out, ",\"%s\":", key);
    if (ms < 0)
        buf_puts(out, "null");
    else
        buf_put_i64(out, ms);
}

static dq_response handle_get(dq_handler_ctx *h, const dq_request *req, dq_buf *out)
{
    store_reply *r = NULL;
    dq_response res;
    if (run_on_job(h, SCRIPT_GET, req, 1, &r, out, &res) != DQ_OK)
        return res;
    /* {state, topic, body, due, ttr_ms, attempts, retries, created} */
    size_t n;
    const char *s;
    buf_puts(out, "{\"success\":true,");
    put_key_string(out, "id", req->ids[0], strlen(req->ids[0]));
    buf_puts(out, ",");
    s = reply_str(reply_at(r, 1), &n);
    put_key_string(out, "topic", s, n);
    buf_puts(out, ",");
    s = reply_str(reply_at(r, 0), &n);
    put_key_string(out, "state", s, n);
    buf_puts(out, ",\"value\":");
    s = reply_str(reply_at(r, 2), &n);
    buf_append(out, s, n);
    put_ms_or_null(out, "due", reply_int(reply_at(r, 3)));
    buf_puts(out, ",\"ttr\":");
    buf_put_seconds(out, reply_int(reply_at(r, 4)));
    buf_puts(out, ",\"attempts\":");
    buf_put_i64(out, reply_int(reply_at(r, 5)));
    buf_puts(out, ",\"retries\":");
    int64_t retries = reply_int(reply_at(r, 6));
    if (retries < 0)
        buf_puts(out, "null");
    else
        buf_put_i64(out, retries);
    buf_puts(out, ",\"created\":");
    buf_put_i64(out, reply_int(reply_at(r, 7)));
    buf_puts(out, "}");
    store_reply_free(r);
    return ok();
}

static void put_id_answer(dq_buf *out, const char *id, const char *extra_key, const char *extra)
{
    buf_puts(out, "{\"success\":true,");
    put_key_string(out, "id", id, strlen(id));
    if (extra_key) {
        buf_puts(out, ",");
        put_key_string(out, extra_key, extra, strlen(extra));
    }
    buf_puts(out, "}");
}

static dq_response handle_touch(dq_handler_ctx *h, const dq_request *req, dq_buf *out)
{
    store_reply *r = NULL;
    dq_response res;
    if (run_on_job(h, SCRIPT_TOUCH, req, 0, &r, out, &res) != DQ_OK)
        return res;
    buf_puts(out, "{\"success\":true,");
    put_key_string(out, "id", req->ids[0], strlen(req->ids[0]));
    buf_puts(out, ",\"due\":");
    buf_put_i64(out, reply_int(reply_at(r, 1)));
    buf_puts(out, "}");
    store_reply_free(r);
    return ok();
}

static dq_response handle_release(dq_handler_ctx *h, const dq_request *req, dq_buf *out)
{
    store_reply *r = NULL;
    dq_response res;
    if (run_on_job(h, SCRIPT_RELEASE, req, 0, &r, out, &res) != DQ_OK)
        return res;
    put_id_answer(out, req->ids[0], "state", reply_str(r, NULL));
    store_reply_free(r);
    return ok();
}

static dq_response handle_bury(dq_handler_ctx *h, const dq_request *req, dq_buf *out)
{
    store_reply *r = NULL;
    dq_response res;
    if (run_on_job(h, SCRIPT_BURY, req, 0, &r, out, &res) != DQ_OK)
        return res;
    put_id_answer(out, req->ids[0], NULL, NULL);
    store_reply_free(r);
    return ok();
}

static dq_response handle_kick(dq_handler_ctx *h, const dq_request *req, dq_buf *out)
{
    store_args *a = h->args;
    args_reset(a);
    args_cstr(a, req->topics[0]);
    args_int(a, req->count > 0 ? req->count : 1);
    store_reply *r = NULL;
    dq_status st = store_eval(h->store, SCRIPT_KICK, a, 0, &r);
    if (st != DQ_OK)
        return store_failure(out, st);
    buf_puts(out, "{\"success\":true,\"kicked\":");
    buf_put_i64(out, reply_int(r));
    buf_puts(out, "}");
    store_reply_free(r);
    return ok();
}

/* ------------------------------------------------------------------------ */
/* stats / metrics / health                                                  */
/* ------------------------------------------------------------------------ */

static const char *const stat_fields[] = {"delay",    "ready",   "reserved", "buried",
                                          "added",    "popped",  "finished", "deleted",
                                          "redelivered", "buries", "kicked"};
#define NSTATS (sizeof stat_fields / sizeof stat_fields[0])
#define NGAUGES 4 /* the first four are states */

/* Reads one topic's HGETALL reply into values ordered like stat_fields. */
static void read_topic_stats(const store_reply *flat, int64_t *values)
{
    memset(values, 0, NSTATS * sizeof *values);
    for (size_t i = 0; i + 1 < reply_len(flat); i += 2) {
        const char *name = reply_str(reply_at(flat, i), NULL);
        for (size_t f = 0; name && f < NSTATS; f++) {
            if (strcmp(name, stat_fields[f]) == 0)
                values[f] = reply_int(reply_at(flat, i + 1));
        }
    }
}

static void put_stats_object(dq_buf *out, const int64_t *values)
{
    buf_puts(out, "{");
    for (size_t f = 0; f < NSTATS; f++)
        buf_printf(out, "%s\"%s\":%lld", f ? "," : "", stat_fields[f], (long long)values[f]);
    buf_puts(out, "}");
}

static dq_status fetch_stats(dq_handler_ctx *h, const char *topic, store_reply **r)
{
    store_args *a = h->args;
    args_reset(a);
    args_cstr(a, topic ? topic : "");
    return store_eval(h->store, SCRIPT_STATS, a, 1, r);
}

static dq_response handle_stats(dq_handler_ctx *h, const dq_request *req, dq_buf *out)
{
    store_reply *r = NULL;
    dq_status st = fetch_stats(h, req->ntopics ? req->topics[0] : NULL, &r);
    if (st != DQ_OK)
        return store_failure(out, st);
    int64_t values[NSTATS], total[NSTATS] = {0};
    buf_puts(out, "{\"success\":true,\"topics\":{");
    for (size_t i = 0; i + 1 < reply_len(r); i += 2) {
        size_t n;
        const char *topic = reply_str(reply_at(r, i), &n);
        read_topic_stats(reply_at(r, i + 1), values);
        for (size_t f = 0; f < NSTATS; f++)
            total[f] += values[f];
        if (i)
            buf_puts(out, ",");
        buf_put_json_string(out, topic, n);
        buf_puts(out, ":");
        put_stats_object(out, values);
    }
    buf_puts(out, "},\"total\":");
    put_stats_object(out, total);
    buf_puts(out, "}");
    store_reply_free(r);
    return ok();
}

static dq_response handle_metrics(dq_handler_ctx *h, dq_buf *out)
{
    store_reply *r = NULL;
    dq_status st = fetch_stats(h, NULL, &r);
    if (st != DQ_OK)
        return store_failure(out, st);
    int64_t values[NSTATS];
    buf_puts(out, "# HELP delayq_jobs Jobs by topic and state.\n# TYPE delayq_jobs gauge\n");
    for (size_t i = 0; i + 1 < reply_len(r); i += 2) {
        const char *topic = reply_str(reply_at(r, i), NULL);
        read_topic_stats(reply_at(r, i + 1), values);
        for (size_t f = 0; f < NGAUGES; f++)
            buf_printf(out, "delayq_jobs{topic=\"%s\",state=\"%s\"} %lld\n", topic, stat_fields[f],
                       (long long)values[f]);
    }
    /* Counters: the Prometheus name of each stats counter. */
    static const struct {
        size_t field;
        const char *name;
    } counters[] = {{4, "added"}, {5, "popped"}, {6, "finished"}, {7, "deleted"},
                    {8, "redelivered"}, {9, "buried"}, {10, "kicked"}};
    for (size_t c = 0; c < sizeof counters / sizeof counters[0]; c++) {
        buf_printf(out, "# HELP delayq_jobs_%s_total Jobs %s, by topic.\n"
                        "# TYPE delayq_jobs_%s_total counter\n",
                   counters[c].name, counters[c].name, counters[c].name);
        for (size_t i = 0; i + 1 < reply_len(r); i += 2) {
            const char *topic = reply_str(reply_at(r, i), NULL);
            read_topic_stats(reply_at(r, i + 1), values);
            buf_printf(out, "delayq_jobs_%s_total{topic=\"%s\"} %lld\n", counters[c].name, topic,
                       (long long)values[counters[c].field]);
        }
    }
    store_reply_free(r);
    metrics_render_requests(out);
    return (dq_response){DQ_OK, 1};
}

static dq_response handle_health(dq_handler_ctx *h, dq_buf *out)
{
    if (store_ping(h->store) == DQ_OK) {
        buf_puts(out, "{\"success\":true,\"redis\":\"ok\"}");
        return ok();
    }
    buf_puts(out, "{\"success\":false,\"error\":\"Redis is unreachable\",\"code\":\"unavailable\","
                  "\"redis\":\"down\"}");
    return (dq_response){DQ_UNAVAILABLE, 0};
}

/* ------------------------------------------------------------------------ */
/* Access control                                                            */
/* ------------------------------------------------------------------------ */

static dq_response deny(dq_buf *out, const char *why, const char *what)
{
    return fail(out, DQ_UNAUTHORIZED, "%s%s", why, what);
}

/* Checks the bearer token against the command and every topic the request
 * touches; for commands that name only ids, the jobs' topics are looked up.
 * /health needs no token, so load balancers can probe it. */
static dq_response authorize(dq_handler_ctx *h, const dq_request *req, dq_buf *out)
{
    if (!h->auth || req->cmd == CMD_HEALTH)
        return ok();
    const dq_token *t = auth_find(h->auth, h->authorization);
    if (!t)
        return deny(out, "missing or unknown bearer token (send Authorization: Bearer <token>)", "");
    if (!auth_command_allowed(t, req->cmd))
        return deny(out, "this token may not use the command ", command_name(req->cmd));
    if (!auth_topic_limited(t))
        return ok();
    if (req->cmd == CMD_METRICS)
        return deny(out, "metrics needs a token that is not limited to topics", "");
    if (req->cmd == CMD_STATS && !req->ntopics)
        return deny(out, "a token limited to topics must name a topic in stats", "");
    for (size_t i = 0; i < req->njobs; i++) {
        if (!auth_topic_allowed(t, req->jobs[i].topic))
            return deny(out, "this token may not use the topic ", req->jobs[i].topic);
    }
    for (size_t i = 0; i < req->ntopics; i++) {
        if (!auth_topic_allowed(t, req->topics[i]))
            return deny(out, "this token may not use the topic ", req->topics[i]);
    }
    if (!req->nids)
        return ok();
    store_args *a = h->args;
    args_reset(a);
    args_ids(a, req);
    store_reply *r = NULL;
    dq_status st = store_eval(h->store, SCRIPT_TOPICS, a, 1, &r);
    if (st != DQ_OK)
        return store_failure(out, st);
    dq_response res = ok();
    for (size_t i = 0; i < req->nids && res.status == DQ_OK; i++) {
        const char *topic = reply_str(reply_at(r, i), NULL);
        if (topic && !auth_topic_allowed(t, topic))
            res = deny(out, "this token may not use the job ", req->ids[i]);
    }
    store_reply_free(r);
    return res;
}

dq_response handle_request(dq_handler_ctx *h, const dq_request *req, dq_buf *out)
{
    buf_reset(out);
    dq_response allowed = authorize(h, req, out);
    if (allowed.status != DQ_OK)
        return allowed;
    switch (req->cmd) {
    case CMD_ADD: return handle_add(h, req, out);
    case CMD_POP: return handle_pop(h, req, out);
    case CMD_FINISH:
    case CMD_DELETE: return handle_remove(h, req, out);
    case CMD_GET: return handle_get(h, req, out);
    case CMD_TOUCH: return handle_touch(h, req, out);
    case CMD_RELEASE: return handle_release(h, req, out);
    case CMD_BURY: return handle_bury(h, req, out);
    case CMD_KICK: return handle_kick(h, req, out);
    case CMD_STATS: return handle_stats(h, req, out);
    case CMD_METRICS: return handle_metrics(h, out);
    case CMD_HEALTH: return handle_health(h, out);
    case CMD_COUNT: break;
    }
    return fail(out, DQ_INTERNAL, "internal error: no handler");
}
