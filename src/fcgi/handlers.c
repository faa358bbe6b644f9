/* handlers: one function per command, from request to response body. */
#include "fcgi/handlers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "fcgi/metrics.h"
#include "fcgi/reply.h"
#include "fcgi/shard_pop.h"
#include "sched/sched_time.h"
#include "store/store_migrate.h"
#include "store/store_ops.h"

#define GENERATED_ID_BYTES 12 /* 24 hex characters */

typedef struct {
    dq_handler_ctx *h;
    const dq_request *req;
    dq_progress *progress;
    dq_buf *out;
    const char *allow; /* topic limit for jobs named by id (auth_check) */
} call_ctx;

static dq_response answer(dq_status st)
{
    return (dq_response){st, 0, 0};
}

/* The sentence for a failure that came from Redis rather than the request. */
static dq_response store_failure(call_ctx *c, dq_status st, const store_error *err)
{
    char cause[300];
    switch (st) {
    case DQ_UNAVAILABLE:
        store_last_cause(cause, sizeof cause);
        if (!cause[0] && err && err->detail[0])
            snprintf(cause, sizeof cause, "Redis refused the command (%.200s)", err->detail);
        return answer(reply_errorf(c->out, st, "%s; nothing was changed",
                                   cause[0] ? cause : "Redis is unreachable"));
    case DQ_TIMEOUT:
        return answer(reply_errorf(c->out, st, "Redis did not answer in time; the request may or "
                                               "may not have taken effect"));
    default:
        return answer(reply_errorf(c->out, DQ_INTERNAL, "internal error; see the delayq-fcgi log"));
    }
}

static const char *ids_word(const call_ctx *c)
{
    return command_name(c->req->cmd);
}

/* ------------------------------------------------------------------------ */
/* add                                                                       */
/* ------------------------------------------------------------------------ */

/* The first job whose `at` is more than ten years ahead, or -1. Checked
 * against this host's clock: years of slack make its drift irrelevant. */
static long at_out_of_range(const dq_request *req)
{
    int64_t limit = util_wall_ms() + DQ_DELAY_MAX_MS;
    for (size_t i = 0; i < req->njobs; i++) {
        if (req->jobs[i].at_ms > limit)
            return (long)i;
    }
    return -1;
}

/* The result entry of an item whose shard's call failed. */
static void item_failure(dq_buf *out, size_t i, const char *id, dq_status st, const char *done)
{
    char msg[128];
    if (st == DQ_TIMEOUT)
        snprintf(msg, sizeof msg, "Redis did not answer in time; it may or may not have been %s",
                 done);
    else if (st == DQ_UNAVAILABLE)
        snprintf(msg, sizeof msg, "Redis is unreachable for this id's shard; it was not %s", done);
    else
        snprintf(msg, sizeof msg, "internal error; see the delayq-fcgi log");
    reply_result_error(out, i, id, st == DQ_TIMEOUT || st == DQ_UNAVAILABLE ? st : DQ_INTERNAL,
                       msg);
}

static dq_response misconfigured(call_ctx *c, const store_error *err)
{
    log_error("config keys 'buckets' (%d) and 'shards' (%d) differ from the layout this "
              "deployment's Redis records (%s); refusing to add",
              c->h->cfg->buckets, c->h->cfg->shards, err->detail);
    return answer(reply_errorf(c->out, DQ_INTERNAL,
                               "server misconfigured: 'buckets' or 'shards' differs from the "
                               "values this deployment was started with; see the delayq-fcgi "
                               "log"));
}

static dq_response handle_add(call_ctx *c)
{
    const dq_request *req = c->req;
    long late = at_out_of_range(req);
    if (late >= 0) {
        if (req->batch)
            return answer(reply_errorf(c->out, DQ_BAD_REQUEST,
                                       "field 'jobs[%ld].at' must be at most ten years from now",
                                       late));
        return answer(reply_errorf(c->out, DQ_BAD_REQUEST,
                                   "field 'at' must be at most ten years from now"));
    }
    char (*generated)[2 * GENERATED_ID_BYTES + 1] = calloc(req->njobs, sizeof *generated);
    const char **ids = calloc(req->njobs, sizeof *ids);
    store_item *items = calloc(req->njobs, sizeof *items);
    if (!generated || !ids || !items)
        abort();
    for (size_t i = 0; i < req->njobs; i++) {
        ids[i] = req->jobs[i].id;
        if (!ids[i]) {
            util_random_hex(generated[i], GENERATED_ID_BYTES);
            ids[i] = generated[i];
        }
    }
    store_error err;
    dq_status st = req->batch ? store_add(c->h->store, c->allow, req->jobs, ids, req->njobs, items, &err)
                              : group_add(c->h->group, c->h->store, c->allow, &req->jobs[0], ids[0],
                                          &items[0], &err);
    dq_response res = answer(DQ_OK);
    if (st == DQ_MISCONFIGURED) {
        res = misconfigured(c, &err);
    } else if (st != DQ_OK && !(req->batch && store_items_partly_done(items, req->njobs))) {
        res = store_failure(c, st, &err);
    } else if (!req->batch) {
        if (items[0].status == DQ_CONFLICT)
            res = answer(reply_errorf(c->out, DQ_CONFLICT, "a job with id '%s' already exists%s%s%s",
                                      ids[0], items[0].state[0] ? " (state " : "",
                                      items[0].state, items[0].state[0] ? ")" : ""));
        else
            reply_id(c->out, ids[0], NULL, NULL);
    } else {
        reply_results_begin(c->out);
        for (size_t i = 0; i < req->njobs; i++) {
            if (items[i].status == DQ_CONFLICT) {
                char msg[128];
                snprintf(msg, sizeof msg, "a job with this id already exists%s%s%s",
                         items[i].state[0] ? " (state " : "", items[i].state,
                         items[i].state[0] ? ")" : "");
                reply_result_error(c->out, i, ids[i], DQ_CONFLICT, msg);
            } else if (items[i].status != DQ_OK) {
                item_failure(c->out, i, ids[i], items[i].status, "added");
            } else {
                reply_result_ok(c->out, i, ids[i]);
            }
        }
        reply_results_end(c->out);
    }
    free(generated);
    free(ids);
    free(items);
    return res;
}

/* ------------------------------------------------------------------------ */
/* pop                                                                       */
/* ------------------------------------------------------------------------ */

/* The outcome of each id of a finish-and-pop, in request order. */
static void reply_finished(call_ctx *c)
{
    const dq_request *req = c->req;
    buf_puts(c->out, ",\"finished\":[");
    for (size_t i = 0; i < req->nids; i++) {
        const store_item *it = &c->progress->finished[i];
        if (it->status == DQ_OK)
            reply_result_ok(c->out, i, req->ids[i]);
        else if (it->status == DQ_NOT_FOUND)
            reply_result_error(c->out, i, req->ids[i], DQ_NOT_FOUND, "no job with this id");
        else
            item_failure(c->out, i, req->ids[i], it->status, "finished");
    }
    buf_putc(c->out, ']');
}

/* Finish-and-pop: the finishes run with the first pop of the request only. */
static dq_status pop_once(call_ctx *c, store_jobs *jobs, store_error *err)
{
    const dq_request *req = c->req;
    dq_progress *pg = c->progress;
    store_pop_req q = {(const char *const *)req->topics, req->ntopics, req->count > 0 ? req->count : 1,
                       c->allow, NULL, 0, NULL};
    if (req->nids > 0 && !pg->finish_done) {
        if (!pg->finished) {
            pg->finished = calloc(req->nids, sizeof *pg->finished);
            if (!pg->finished)
                abort();
        }
        q.finish = (const char *const *)req->ids;
        q.nfinish = req->nids;
        q.finished = pg->finished;
    }
    /* Single-job pops of one shard share calls (group commit). */
    dq_status st = store_shards(c->h->store) == 1 && q.count == 1
                       ? group_pop(c->h->group, c->h->store, &q, jobs, err)
                       : shard_pop(c->h->store, c->h->hints, &q, jobs, err);
    if (q.nfinish > 0 && (st == DQ_OK || store_items_partly_done(pg->finished, req->nids)))
        pg->finish_done = 1;
    /* Finishes that took effect are answered even when no shard could then
     * be popped: the pop finds nothing, as it would with no job ready. But
     * a pop that may have reserved jobs answers 504, never a 200 that would
     * hide them. */
    return st != DQ_OK && st != DQ_TIMEOUT && pg->finish_done ? DQ_OK : st;
}

static dq_response handle_pop(call_ctx *c)
{
    const dq_request *req = c->req;
    store_jobs jobs;
    memset(&jobs, 0, sizeof jobs);
    store_error err;
    dq_status st = pop_once(c, &jobs, &err);
    if (st != DQ_OK)
        return store_failure(c, st, &err);
    if (jobs.n == 0 && !c->h->stopping &&
        util_mono_ms() < c->h->started_ms + req->timeout_ms) {
        store_jobs_free(&jobs);
        return (dq_response){DQ_OK, 0, 1}; /* wait for a job */
    }
    if (req->count > 0) {
        buf_puts(c->out, "{\"success\":true,\"jobs\":[");
        for (size_t i = 0; i < jobs.n; i++) {
            if (i)
                buf_putc(c->out, ',');
            reply_popped(c->out, &jobs.jobs[i]); /* each shaped like the single-job answer */
        }
        buf_putc(c->out, ']');
    } else if (jobs.n > 0) {
        reply_popped_open(c->out, &jobs.jobs[0]);
    } else {
        buf_puts(c->out, "{\"success\":true,\"id\":null,\"value\":null");
    }
    if (req->nids > 0)
        reply_finished(c);
    buf_putc(c->out, '}');
    store_jobs_free(&jobs);
    return answer(DQ_OK);
}

/* ------------------------------------------------------------------------ */
/* finish / delete                                                           */
/* ------------------------------------------------------------------------ */

static dq_response handle_remove(call_ctx *c)
{
    const dq_request *req = c->req;
    store_item *items = calloc(req->nids, sizeof *items);
    if (!items)
        abort();
    store_error err;
    int finished = req->cmd == CMD_FINISH;
    dq_status st = req->batch ? store_remove(c->h->store, c->allow, finished, req->ids, req->nids,
                                             items, &err)
                              : group_remove(c->h->group, c->h->store, c->allow, finished,
                                             req->ids[0], &items[0], &err);
    dq_response res = answer(DQ_OK);
    if (st != DQ_OK && !(req->batch && store_items_partly_done(items, req->nids))) {
        res = store_failure(c, st, &err);
    } else if (!req->batch) {
        if (items[0].status == DQ_OK)
            reply_id(c->out, req->ids[0], NULL, NULL);
        else
            res = answer(reply_errorf(c->out, DQ_NOT_FOUND, "no job with id '%s'", req->ids[0]));
    } else {
        reply_results_begin(c->out);
        for (size_t i = 0; i < req->nids; i++) {
            if (items[i].status == DQ_OK)
                reply_result_ok(c->out, i, req->ids[i]);
            else if (items[i].status == DQ_NOT_FOUND)
                reply_result_error(c->out, i, req->ids[i], DQ_NOT_FOUND, "no job with this id");
            else
                item_failure(c->out, i, req->ids[i], items[i].status,
                             req->cmd == CMD_FINISH ? "finished" : "deleted");
        }
        reply_results_end(c->out);
    }
    free(items);
    return res;
}

/* ------------------------------------------------------------------------ */
/* get / touch / release / bury / kick                                       */
/* ------------------------------------------------------------------------ */

/* The answer of a one-id command that failed: not found, not reserved, or
 * a store failure. */
static dq_response job_failure(call_ctx *c, dq_status st, const store_error *err)
{
    const char *id = c->req->ids[0];
    if (st == DQ_NOT_FOUND)
        return answer(reply_errorf(c->out, st, "no job with id '%s'", id));
    if (st == DQ_CONFLICT)
        return answer(reply_errorf(c->out, st, "job '%s' is %s, not reserved; %s needs a reserved job",
                                   id, err->detail, ids_word(c)));
    return store_failure(c, st, err);
}

static dq_response handle_get(call_ctx *c)
{
    store_jobs job;
    store_error err;
    dq_status st = store_get(c->h->store, c->allow, c->req->ids[0], &job, &err);
    if (st != DQ_OK)
        return job_failure(c, st, &err);
    reply_job(c->out, &job.jobs[0]);
    store_jobs_free(&job);
    return answer(DQ_OK);
}

static dq_response handle_touch(call_ctx *c)
{
    int64_t due = 0;
    store_error err;
    dq_status st = store_touch(c->h->store, c->allow, c->req->ids[0], &due, &err);
    if (st != DQ_OK)
        return job_failure(c, st, &err);
    reply_id_due(c->out, c->req->ids[0], due);
    return answer(DQ_OK);
}

static dq_response handle_release(call_ctx *c)
{
    char state[STORE_STATE_MAX];
    store_error err;
    dq_status st = store_release(c->h->store, c->allow, c->req->ids[0], c->req->delay_ms, state, &err);
    if (st != DQ_OK)
        return job_failure(c, st, &err);
    reply_id(c->out, c->req->ids[0], "state", state);
    return answer(DQ_OK);
}

static dq_response handle_bury(call_ctx *c)
{
    store_error err;
    dq_status st = store_bury(c->h->store, c->allow, c->req->ids[0], &err);
    if (st != DQ_OK)
        return job_failure(c, st, &err);
    reply_id(c->out, c->req->ids[0], NULL, NULL);
    return answer(DQ_OK);
}

/* kick by id or ids: each named job must be buried. */
static dq_response kick_ids(call_ctx *c)
{
    const dq_request *req = c->req;
    store_item *items = calloc(req->nids, sizeof *items);
    if (!items)
        abort();
    store_error err;
    dq_status st = store_kick_ids(c->h->store, c->allow, req->ids, req->nids, items, &err);
    dq_response res = answer(DQ_OK);
    char msg[128];
    if (st != DQ_OK && !(req->batch && store_items_partly_done(items, req->nids))) {
        res = store_failure(c, st, &err);
    } else if (!req->batch) {
        if (items[0].status == DQ_OK)
            reply_id(c->out, req->ids[0], "state", "ready");
        else if (items[0].status == DQ_CONFLICT)
            res = answer(reply_errorf(c->out, DQ_CONFLICT, "job '%s' is %s, not buried; kick needs "
                                      "a buried job", req->ids[0], items[0].state));
        else
            res = answer(reply_errorf(c->out, DQ_NOT_FOUND, "no job with id '%s'", req->ids[0]));
    } else {
        reply_results_begin(c->out);
        for (size_t i = 0; i < req->nids; i++) {
            if (items[i].status == DQ_OK) {
                reply_result_ok(c->out, i, req->ids[i]);
            } else if (items[i].status == DQ_CONFLICT) {
                snprintf(msg, sizeof msg, "the job is %s, not buried", items[i].state);
                reply_result_error(c->out, i, req->ids[i], DQ_CONFLICT, msg);
            } else if (items[i].status == DQ_NOT_FOUND) {
                reply_result_error(c->out, i, req->ids[i], DQ_NOT_FOUND, "no job with this id");
            } else {
                item_failure(c->out, i, req->ids[i], items[i].status, "kicked");
            }
        }
        reply_results_end(c->out);
    }
    free(items);
    return res;
}

static dq_response handle_kick(call_ctx *c)
{
    if (c->req->nids)
        return kick_ids(c);
    int64_t kicked = 0;
    store_error err;
    dq_status st = store_kick(c->h->store, c->req->topics[0], c->req->count > 0 ? c->req->count : 1,
                              &kicked, &err);
    if (st != DQ_OK)
        return store_failure(c, st, &err);
    buf_puts(c->out, "{\"success\":true,\"kicked\":");
    buf_put_i64(c->out, kicked);
    buf_putc(c->out, '}');
    return answer(DQ_OK);
}

static dq_response handle_reschedule(call_ctx *c)
{
    const dq_request *req = c->req;
    const char *id = req->ids[0];
    if (req->at_ms > util_wall_ms() + DQ_DELAY_MAX_MS)
        return answer(reply_errorf(c->out, DQ_BAD_REQUEST,
                                   "field 'at' must be at most ten years from now"));
    char state[STORE_STATE_MAX];
    int64_t due = -1;
    store_error err;
    dq_status st = store_reschedule(c->h->store, c->allow, id, req->delay_ms, req->at_ms, state,
                                    &due, &err);
    if (st == DQ_NOT_FOUND)
        return answer(reply_errorf(c->out, st, "no job with id '%s'", id));
    if (st == DQ_CONFLICT)
        return answer(reply_errorf(c->out, st, "job '%s' is %s; reschedule needs a job in delay, "
                                   "ready or buried", id, err.detail));
    if (st != DQ_OK)
        return store_failure(c, st, &err);
    buf_puts(c->out, "{\"success\":true,");
    reply_key_string(c->out, "id", id, strlen(id));
    buf_putc(c->out, ',');
    reply_key_string(c->out, "state", state, strlen(state));
    buf_puts(c->out, ",\"due\":");
    if (due < 0)
        buf_puts(c->out, "null");
    else
        buf_put_i64(c->out, due);
    buf_putc(c->out, '}');
    return answer(DQ_OK);
}

/* ------------------------------------------------------------------------ */
/* jobs (listing)                                                            */
/* ------------------------------------------------------------------------ */

static dq_response handle_jobs(call_ctx *c)
{
    const dq_request *req = c->req;
    store_jobs page;
    store_error err;
    char next[DQ_ID_MAX + 32];
    dq_status st = store_jobs_page(c->h->store, req->topics[0], req->state, req->cursor,
                                   req->count, &page, next, sizeof next, &err);
    if (st != DQ_OK)
        return store_failure(c, st, &err);
    buf_puts(c->out, "{\"success\":true,\"jobs\":[");
    for (size_t i = 0; i < page.n; i++) {
        if (i)
            buf_putc(c->out, ',');
        reply_job(c->out, &page.jobs[i]); /* each as get answers it */
    }
    buf_puts(c->out, "],\"cursor\":");
    if (next[0])
        buf_put_json_string(c->out, next, strlen(next));
    else
        buf_puts(c->out, "null");
    buf_putc(c->out, '}');
    store_jobs_free(&page);
    return answer(DQ_OK);
}

/* ------------------------------------------------------------------------ */
/* schedule / unschedule / schedules                                         */
/* ------------------------------------------------------------------------ */

/* Loads a schedule's zone; NULL with a 400 written when it is unknown. */
static dq_tz *schedule_zone(call_ctx *c, const char *name, dq_response *res)
{
    char why[256];
    dq_tz *tz = tz_load(name, why, sizeof why);
    if (!tz)
        *res = answer(reply_errorf(c->out, DQ_BAD_REQUEST,
                                   "field 'tz' must name an IANA time zone: %s", why));
    return tz;
}

static void schedule_def(dq_sched *def, const dq_cron *cron, const dq_tz *tz, int64_t every_s,
                         int64_t anchor_s, int64_t start_s, int64_t end_s)
{
    memset(def, 0, sizeof *def);
    def->is_cron = cron != NULL;
    if (cron)
        def->cron = *cron;
    def->tz = tz;
    def->every_s = every_s;
    def->anchor_s = anchor_s;
    def->start_s = start_s < 0 ? SCHED_NONE : start_s;
    def->end_s = end_s < 0 ? SCHED_NONE : end_s;
}

static dq_response handle_schedule(call_ctx *c)
{
    const dq_schedule_spec *sc = &c->req->schedule;
    dq_response res = answer(DQ_OK);
    dq_tz *tz = schedule_zone(c, sc->tz, &res);
    if (!tz)
        return res;
    /* The first fire strictly after now: this host's clock, like add's
     * `at` check; `every` without `start` counts from now. */
    int64_t now_s = util_wall_ms() / 1000;
    int64_t anchor_s = sc->start_s >= 0 ? sc->start_s : now_s;
    dq_sched def;
    schedule_def(&def, sc->cron ? &sc->cron_parsed : NULL, tz, sc->every_s, anchor_s, sc->start_s,
                 sc->end_s);
    int64_t next = sched_next(&def, now_s);
    if (next == SCHED_NONE) {
        def.end_s = SCHED_NONE;
        if (sc->end_s >= 0 && sched_next(&def, now_s) != SCHED_NONE)
            res = answer(reply_errorf(c->out, DQ_BAD_REQUEST,
                                      "field 'end' leaves the schedule no fire time after now"));
        else
            res = answer(reply_errorf(c->out, DQ_BAD_REQUEST,
                                      "field 'cron' matches no date in the next %d days",
                                      CRON_HORIZON_DAYS));
        tz_free(tz);
        return res;
    }
    tz_free(tz);
    int replaced = 0;
    store_error err;
    dq_status st = store_schedule_put(c->h->store, c->allow, sc, anchor_s, next * 1000, &replaced,
                                      &err);
    if (st == DQ_CONFLICT)
        return answer(reply_errorf(c->out, DQ_CONFLICT, "a schedule with id '%s' exists under a "
                                   "topic this token may not use", sc->id));
    if (st != DQ_OK)
        return store_failure(c, st, &err);
    buf_puts(c->out, "{\"success\":true,\"id\":");
    buf_put_json_string(c->out, sc->id, strlen(sc->id));
    buf_printf(c->out, ",\"next\":%lld,\"replaced\":%s}", (long long)next * 1000,
               replaced ? "true" : "false");
    return res;
}

static dq_response handle_unschedule(call_ctx *c)
{
    store_error err;
    const char *id = c->req->ids[0];
    dq_status st = store_unschedule(c->h->store, c->allow, id, &err);
    if (st == DQ_NOT_FOUND)
        return answer(reply_errorf(c->out, st, "no schedule with id '%s'", id));
    if (st != DQ_OK)
        return store_failure(c, st, &err);
    reply_id(c->out, id, NULL, NULL);
    return answer(DQ_OK);
}

static void put_int_or_null(dq_buf *out, const char *name, int64_t v)
{
    buf_printf(out, ",\"%s\":", name);
    if (v < 0)
        buf_puts(out, "null");
    else
        buf_put_i64(out, v);
}

/* The upcoming fires of a schedule: its stored next fire and those after. */
static void put_upcoming(call_ctx *c, const store_schedule *sc, int n)
{
    int64_t fires[DQ_PREVIEW_MAX];
    int found = 0;
    char why[256];
    dq_tz *tz = tz_load(sc->tz, why, sizeof why);
    if (tz && sc->next_ms >= 0) {
        dq_cron cron;
        int is_cron = sc->cron != NULL;
        if (!is_cron || cron_parse(sc->cron, &cron, why, sizeof why) == 0) {
            dq_sched def;
            schedule_def(&def, is_cron ? &cron : NULL, tz, sc->every_s, sc->anchor_s, sc->start_s,
                         sc->end_s);
            found = sched_upcoming(&def, sc->next_ms / 1000 - 1, fires, n);
        }
    }
    tz_free(tz);
    buf_puts(c->out, ",\"upcoming\":[");
    for (int i = 0; i < found; i++)
        buf_printf(c->out, "%s%lld", i ? "," : "", (long long)fires[i] * 1000);
    buf_putc(c->out, ']');
}

static void put_schedule(call_ctx *c, const store_schedule *sc)
{
    dq_buf *out = c->out;
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
    put_int_or_null(out, "next", sc->next_ms);
    put_int_or_null(out, "last", sc->last_ms);
    buf_printf(out, ",\"missed\":%lld", (long long)sc->missed);
    put_int_or_null(out, "start", sc->start_s);
    put_int_or_null(out, "end", sc->end_s);
    buf_puts(out, ",\"ttr\":");
    buf_put_seconds(out, sc->ttr_ms);
    put_int_or_null(out, "retries", sc->retries);
    buf_printf(out, ",\"created\":%lld", (long long)sc->created_ms);
    if (sc->body) {
        buf_puts(out, ",\"body\":");
        buf_append(out, sc->body, sc->body_len);
    }
    if (c->req->count > 0)
        put_upcoming(c, sc, c->req->count);
    buf_putc(out, '}');
}

static dq_response handle_schedules(call_ctx *c)
{
    const dq_request *req = c->req;
    store_schedules list;
    store_error err;
    const char *id = req->nids ? req->ids[0] : NULL;
    dq_status st = store_schedules_read(c->h->store, c->allow, id, &list, &err);
    if (st == DQ_NOT_FOUND)
        return answer(reply_errorf(c->out, st, "no schedule with id '%s'", id));
    if (st != DQ_OK)
        return store_failure(c, st, &err);
    buf_puts(c->out, "{\"success\":true,\"schedules\":[");
    for (size_t i = 0; i < list.n; i++) {
        if (i)
            buf_putc(c->out, ',');
        put_schedule(c, &list.list[i]);
    }
    buf_puts(c->out, "]}");
    store_schedules_free(&list);
    return answer(DQ_OK);
}

/* ------------------------------------------------------------------------ */
/* pause / resume                                                            */
/* ------------------------------------------------------------------------ */

static dq_response handle_pause(call_ctx *c)
{
    const char *topic = c->req->topics[0];
    int pause = c->req->cmd == CMD_PAUSE;
    store_error err;
    dq_status st = store_pause(c->h->store, topic, pause, &err);
    if (st != DQ_OK)
        return store_failure(c, st, &err);
    buf_puts(c->out, "{\"success\":true,\"topic\":");
    buf_put_json_string(c->out, topic, strlen(topic));
    buf_printf(c->out, ",\"paused\":%s}", pause ? "true" : "false");
    return answer(DQ_OK);
}

/* ------------------------------------------------------------------------ */
/* stats / metrics / health                                                  */
/* ------------------------------------------------------------------------ */

/* A topic's figures, or the totals (t NULL: no "paused"). */
static void put_stats_object(dq_buf *out, const int64_t *v, const store_topic_stats *t)
{
    static const int64_t none[STORE_NSTATS];
    if (!v)
        v = none;
    buf_putc(out, '{');
    for (int f = 0; f < STORE_NSTATS; f++)
        buf_printf(out, "%s\"%s\":%lld", f ? "," : "", store_stat_names[f], (long long)v[f]);
    if (t)
        buf_printf(out, ",\"paused\":%s", t->paused ? "true" : "false");
    buf_putc(out, '}');
}

static dq_response handle_stats(call_ctx *c)
{
    const dq_request *req = c->req;
    store_stats st;
    store_error err;
    dq_status s = store_stats_read(c->h->store, req->ntopics ? req->topics[0] : NULL, req->cursor,
                                   req->count, &st, &err);
    if (s != DQ_OK)
        return store_failure(c, s, &err);
    buf_puts(c->out, "{\"success\":true,\"topics\":{");
    for (size_t i = 0; i < st.n; i++) {
        if (i)
            buf_putc(c->out, ',');
        buf_put_json_string(c->out, st.topics[i].name, st.topics[i].name_len);
        buf_putc(c->out, ':');
        put_stats_object(c->out, st.topics[i].v, &st.topics[i]);
    }
    buf_puts(c->out, "},\"total\":");
    if (req->ntopics)
        put_stats_object(c->out, st.n ? st.topics[0].v : NULL, NULL);
    else
        put_stats_object(c->out, st.totals, NULL);
    if (!req->ntopics) {
        buf_puts(c->out, ",\"cursor\":");
        if (st.next_cursor)
            buf_put_json_string(c->out, st.next_cursor, strlen(st.next_cursor));
        else
            buf_puts(c->out, "null");
    }
    buf_putc(c->out, '}');
    store_stats_free(&st);
    return answer(DQ_OK);
}

/* Prometheus label values: backslash, quote and newline escaped. Topics
 * cannot hold them today; the escaping keeps the format right regardless. */
static void put_label(dq_buf *out, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' || s[i] == '"')
            buf_putc(out, '\\');
        if (s[i] == '\n') {
            buf_puts(out, "\\n");
            continue;
        }
        buf_putc(out, s[i]);
    }
}

/* The figures an operator alerts on: per topic whether it is paused and
 * the age of its oldest ready job; for the deployment the oldest overdue
 * bucket entry (timer lag as jobs see it), the oldest ready push job, and
 * each live timer's lateness per shard. */
static void put_alert_metrics(dq_buf *out, const store_stats *st, size_t shown,
                              const store_lag *lag)
{
    buf_puts(out, "# HELP delayq_topic_paused 1 while the topic is paused (pause/resume).\n"
                  "# TYPE delayq_topic_paused gauge\n");
    for (size_t i = 0; i < shown; i++) {
        buf_puts(out, "delayq_topic_paused{topic=\"");
        put_label(out, st->topics[i].name, st->topics[i].name_len);
        buf_printf(out, "\"} %d\n", st->topics[i].paused ? 1 : 0);
    }
    buf_puts(out, "# HELP delayq_topics_paused Paused topics.\n# TYPE delayq_topics_paused gauge\n");
    buf_printf(out, "delayq_topics_paused %lld\n", (long long)lag->paused_topics);
    buf_puts(out, "# HELP delayq_oldest_ready_age_seconds Age of the topic's oldest ready job "
                  "(since it became ready; 0 when none).\n"
                  "# TYPE delayq_oldest_ready_age_seconds gauge\n");
    for (size_t i = 0; i < shown; i++) {
        int64_t age = st->topics[i].ready_age_ms;
        buf_puts(out, "delayq_oldest_ready_age_seconds{topic=\"");
        put_label(out, st->topics[i].name, st->topics[i].name_len);
        buf_printf(out, "\"} %.3f\n", age > 0 ? (double)age / 1000 : 0.0);
    }
    buf_puts(out, "# HELP delayq_push_oldest_ready_age_seconds Age of the oldest ready push job "
                  "waiting for delayq-push, all topics (0 when none).\n"
                  "# TYPE delayq_push_oldest_ready_age_seconds gauge\n");
    buf_printf(out, "delayq_push_oldest_ready_age_seconds %.3f\n",
               lag->push_age_ms > 0 ? (double)lag->push_age_ms / 1000 : 0.0);
    buf_puts(out, "# HELP delayq_oldest_overdue_seconds How long the oldest delayed job (or TTR "
                  "deadline) past its due time has waited for a timer, all topics (0 when none).\n"
                  "# TYPE delayq_oldest_overdue_seconds gauge\n");
    buf_printf(out, "delayq_oldest_overdue_seconds %.3f\n", (double)lag->overdue_ms / 1000);
    buf_puts(out, "# HELP delayq_timer_lag_seconds A live timer's lateness behind due times in a "
                  "shard: the largest of its moves within a second, 0 if it moved nothing "
                  "in the last minute.\n# TYPE delayq_timer_lag_seconds gauge\n");
    for (size_t i = 0; i < lag->ntimers; i++) {
        const store_timer_lag *l = &lag->timers[i];
        buf_puts(out, "delayq_timer_lag_seconds{timer=\"");
        put_label(out, l->timer, strlen(l->timer));
        buf_printf(out, "\",shard=\"%d\"} %.3f\n", l->shard,
                   l->age_ms <= 60000 ? (double)l->late_ms / 1000 : 0.0);
    }
}

/* How the deployment spreads over a Redis Cluster's masters: a master that
 * serves none of its shards holds none of its jobs. */
static void put_spread_metrics(call_ctx *c)
{
    int masters, used = store_cluster_spread(c->h->store, &masters);
    buf_printf(c->out, "# HELP delayq_shards The deployment's shards.\n# TYPE delayq_shards gauge\n"
                       "delayq_shards %d\n", store_shards(c->h->store));
    buf_printf(c->out, "# HELP delayq_cluster_masters Masters of the Redis Cluster (0 without "
                       "one).\n# TYPE delayq_cluster_masters gauge\ndelayq_cluster_masters %d\n",
               masters);
    buf_printf(c->out, "# HELP delayq_cluster_masters_unused Cluster masters serving none of the "
                       "deployment's shards: they hold none of its jobs.\n"
                       "# TYPE delayq_cluster_masters_unused gauge\n"
                       "delayq_cluster_masters_unused %d\n", masters - used);
}

/* The layout gauges: the stored layout of the data (its oldest shard's)
 * and the one this delayq uses; they differ only until a migration. */
static void put_layout_metrics(dq_buf *out, const store_layout_info *info)
{
    buf_printf(out, "# HELP delayq_layout_stored The stored layout of the deployment's data (its "
                    "oldest shard's; docs/OPERATIONS.md).\n# TYPE delayq_layout_stored gauge\n"
                    "delayq_layout_stored %d\n"
                    "# HELP delayq_layout_known The stored layout this delayq reads and writes.\n"
                    "# TYPE delayq_layout_known gauge\ndelayq_layout_known %d\n",
               info->lowest ? info->lowest : info->known, info->known);
}

static dq_response handle_metrics(call_ctx *c)
{
    store_stats st;
    store_error err;
    store_layout_info layout;
    if (store_layout_read(c->h->store, &layout) != DQ_OK)
        memset(&layout, 0, sizeof layout);
    int limit = c->h->cfg->metrics_max_topics;
    dq_status s = store_stats_read(c->h->store, NULL, NULL, limit > 0 ? limit : 1, &st, &err);
    if (s != DQ_OK)
        return store_failure(c, s, &err);
    store_lag lag;
    s = store_lag_read(c->h->store, &lag, &err);
    if (s != DQ_OK) {
        store_stats_free(&st);
        return store_failure(c, s, &err);
    }
    dq_buf *out = c->out;
    size_t shown = limit > 0 ? st.n : 0;
    buf_puts(out, "# HELP delayq_topics Topics that hold jobs or held one within topic_retention_s "
                  "(with several shards: the most one shard knows, a lower bound).\n"
                  "# TYPE delayq_topics gauge\n");
    buf_printf(out, "delayq_topics %lld\n", (long long)st.topics_known);
    buf_puts(out, "# HELP delayq_topics_not_shown Topics left out of the per-topic series "
                  "(metrics_max_topics).\n# TYPE delayq_topics_not_shown gauge\n");
    int64_t not_shown = st.topics_known - (int64_t)shown;
    buf_printf(out, "delayq_topics_not_shown %lld\n", (long long)(not_shown > 0 ? not_shown : 0));
    buf_puts(out, "# HELP delayq_deployment_jobs Jobs of all topics by state.\n"
                  "# TYPE delayq_deployment_jobs gauge\n");
    for (int f = 0; f < STORE_NGAUGES; f++)
        buf_printf(out, "delayq_deployment_jobs{state=\"%s\"} %lld\n", store_stat_names[f],
                   (long long)st.totals[f]);
    put_spread_metrics(c);
    buf_puts(out, "# HELP delayq_jobs Jobs by topic and state.\n# TYPE delayq_jobs gauge\n");
    for (size_t i = 0; i < shown; i++) {
        for (int f = 0; f < STORE_NGAUGES; f++) {
            buf_puts(out, "delayq_jobs{topic=\"");
            put_label(out, st.topics[i].name, st.topics[i].name_len);
            buf_printf(out, "\",state=\"%s\"} %lld\n", store_stat_names[f],
                       (long long)st.topics[i].v[f]);
        }
    }
    /* Counters: the Prometheus name of each stats counter. */
    static const struct {
        store_stat field;
        const char *name;
    } counters[] = {{STAT_ADDED, "added"},       {STAT_POPPED, "popped"},
                    {STAT_FINISHED, "finished"}, {STAT_DELETED, "deleted"},
                    {STAT_REDELIVERED, "redelivered"}, {STAT_BURIES, "buried"},
                    {STAT_KICKED, "kicked"}};
    for (size_t k = 0; k < sizeof counters / sizeof counters[0]; k++) {
        const char *name = counters[k].name;
        buf_printf(out, "# HELP delayq_deployment_jobs_%s_total Jobs %s, all topics.\n"
                        "# TYPE delayq_deployment_jobs_%s_total counter\n"
                        "delayq_deployment_jobs_%s_total %lld\n",
                   name, name, name, name, (long long)st.totals[counters[k].field]);
        buf_printf(out, "# HELP delayq_jobs_%s_total Jobs %s, by topic.\n"
                        "# TYPE delayq_jobs_%s_total counter\n",
                   name, name, name);
        for (size_t i = 0; i < shown; i++) {
            buf_printf(out, "delayq_jobs_%s_total{topic=\"", name);
            put_label(out, st.topics[i].name, st.topics[i].name_len);
            buf_printf(out, "\"} %lld\n", (long long)st.topics[i].v[counters[k].field]);
        }
    }
    put_alert_metrics(out, &st, shown, &lag);
    put_layout_metrics(out, &layout);
    store_lag_free(&lag);
    store_stats_free(&st);
    metrics_render_requests(out);
    return (dq_response){DQ_OK, 1, 0};
}

/* The stored layout of the deployment's data (its oldest shard's; the one
 * this delayq writes while no shard holds any; null when Redis did not
 * say). When it is not the one this delayq uses, "layout_known" gives
 * that and "layout_error" what to do. */
static void put_layout(dq_buf *out, dq_store *store)
{
    store_layout_info info;
    if (store_layout_read(store, &info) != DQ_OK) {
        buf_puts(out, ",\"layout\":null");
        return;
    }
    int stored = info.highest > info.known ? info.highest : info.lowest ? info.lowest : info.known;
    buf_printf(out, ",\"layout\":%d", stored);
    if (stored != info.known)
        buf_printf(out, ",\"layout_known\":%d", info.known);
    if (stored < info.known)
        buf_puts(out, ",\"layout_error\":\"data of an older stored layout: requests answer 503 "
                      "until 'delayq-fcgi --migrate' converts it\"");
    else if (stored > info.known)
        buf_puts(out, ",\"layout_error\":\"data of a newer stored layout than this delayq "
                      "knows: run the release that wrote it\"");
}

static dq_response handle_health(call_ctx *c)
{
    if (store_ping(c->h->store) == DQ_OK) {
        int masters, used = store_cluster_spread(c->h->store, &masters);
        buf_printf(c->out, "{\"success\":true,\"redis\":\"ok\",\"shards\":%d",
                   store_shards(c->h->store));
        if (masters) /* a Cluster */
            buf_printf(c->out, ",\"masters\":%d,\"masters_used\":%d", masters, used);
        if (used < masters)
            buf_printf(c->out, ",\"warning\":\"%d of the Redis Cluster's %d masters serve none of "
                               "this deployment's %d shards and hold none of its jobs\"",
                       masters - used, masters, store_shards(c->h->store));
        put_layout(c->out, c->h->store);
        buf_putc(c->out, '}');
        return answer(DQ_OK);
    }
    char cause[300];
    store_last_cause(cause, sizeof cause);
    buf_puts(c->out, "{\"success\":false,\"error\":");
    if (!cause[0])
        snprintf(cause, sizeof cause, "Redis is unreachable");
    buf_put_json_string(c->out, cause, strlen(cause));
    buf_puts(c->out, ",\"code\":\"unavailable\",\"redis\":\"down\"}");
    return answer(DQ_UNAVAILABLE);
}

/* ------------------------------------------------------------------------ */
/* Dispatch                                                                  */
/* ------------------------------------------------------------------------ */

typedef dq_response (*handler_fn)(call_ctx *c);

static const handler_fn handlers[CMD_COUNT] = {
#define DQ_COMMAND(e, name, flags, parser, handler) [CMD_##e] = handler,
#include "protocol/commands.def"
#undef DQ_COMMAND
};

dq_response handle_request(dq_handler_ctx *h, const dq_request *req, dq_progress *progress,
                           dq_buf *out)
{
    char allow[AUTH_ALLOW_MAX], err[512];
    buf_reset(out);
    dq_status st = auth_check(h->auth, h->authorization, req, allow, sizeof allow, err, sizeof err);
    if (st != DQ_OK) {
        reply_error(out, st, err);
        return answer(st);
    }
    call_ctx c = {h, req, progress, out, allow};
    return handlers[req->cmd](&c);
}

void handle_progress_free(dq_progress *progress)
{
    free(progress->finished);
    memset(progress, 0, sizeof *progress);
}
