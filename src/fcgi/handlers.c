/* handlers: one function per command, from request to response body. */
#include "fcgi/handlers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "fcgi/metrics.h"
#include "fcgi/prometheus.h"
#include "fcgi/reply.h"
#include "fcgi/shard_pop.h"
#include "sched/sched_time.h"
#include "store/store_migrate.h"
#include "store/store_ops.h"
#include "store/store_replicas.h"

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
    return (dq_response){st, 0, 0, 0};
}

/* The sentence for a failure that came from Redis rather than the request. */
static dq_response store_failure(call_ctx *c, dq_status st, const store_error *err)
{
    char cause[300];
    switch (st) {
    case DQ_UNAVAILABLE:
        if (err && replicas_is_refusal(err->detail)) {
            reply_error(c->out, st, err->detail);
            return answer(st);
        }
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

/* A write to every shard that failed in some (PROTOCOL, "Writes to every
 * shard"): as store_failure when it took effect nowhere, else 504
 * `timeout` marked partial, naming the failed shards. done: what took
 * effect, as the end of a sentence; count_field: a count to answer
 * (NULL: none). */
static dq_response spread_failure(call_ctx *c, dq_status st, const store_error *err,
                                  const store_spread *sp, int took_effect, const char *done,
                                  const char *count_field, int64_t count)
{
    if (!took_effect)
        return store_failure(c, st, err);
    int shards = store_shards(c->h->store);
    int failed = shards - store_spread_answered(sp, shards);
    char msg[300];
    snprintf(msg, sizeof msg, "Redis failed in %d of %d shards (failed_shards); %s: send it "
                              "again to finish it", failed, shards, done);
    reply_partial(c->out, msg, sp, shards, count_field, count);
    return answer(DQ_TIMEOUT);
}

/* ------------------------------------------------------------------------ */
/* add                                                                       */
/* ------------------------------------------------------------------------ */

/* Whether an `at` is more than ten years ahead. Checked against this
 * host's clock: years of slack make its drift irrelevant. */
static int at_too_far(int64_t at_ms)
{
    return at_ms > util_wall_ms() + DQ_DELAY_MAX_MS;
}

/* The 400 for an `at` too far ahead: the batch's jobs[i], or i < 0 for the
 * request's own field. */
static dq_response at_too_far_answer(call_ctx *c, long i)
{
    if (i >= 0)
        return answer(reply_errorf(c->out, DQ_BAD_REQUEST,
                                   "field 'jobs[%ld].at' must be at most ten years from now", i));
    return answer(reply_errorf(c->out, DQ_BAD_REQUEST,
                               "field 'at' must be at most ten years from now"));
}

/* A job with a key lives in its key's shard and is found by its id alone,
 * so an id of the client's choosing must name that shard (store.h,
 * store_key_shard). */
static dq_response key_shard_answer(call_ctx *c, long i)
{
    char where[32] = "";
    if (i >= 0)
        snprintf(where, sizeof where, "jobs[%ld].", i);
    return answer(reply_errorf(c->out, DQ_BAD_REQUEST,
                               "field '%sid' must name the shard of field '%skey' on a deployment "
                               "of %d shards: leave 'id' out (the server makes one there) or use "
                               "'<key>@<digits>'",
                               where, where, store_shards(c->h->store)));
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

/* How a command's items are answered in a batch: the verb of a call
 * failure, and which of the store's answers are the item's own. */
typedef struct {
    const char *done;  /* "added": "... it was not added" */
    int not_found;     /* DQ_NOT_FOUND answers "no job with this id" */
    int upsert;        /* an item's `replaced` is answered (add) */
    void (*conflict)(char *msg, size_t n, const store_item *it); /* NULL: none */
} item_words;

/* The entries of a batch answer, one per id, in request order. */
static void put_items(dq_buf *out, const char *const *ids, const store_item *items, size_t n,
                      const item_words *w)
{
    char msg[DQ_TOPIC_MAX + 256];
    for (size_t i = 0; i < n; i++) {
        dq_status st = items[i].status;
        if (st == DQ_OK) {
            reply_result_ok(out, i, ids[i], w->upsert ? items[i].replaced : -1);
        } else if (st == DQ_CONFLICT && w->conflict) {
            w->conflict(msg, sizeof msg, &items[i]);
            reply_result_error(out, i, ids[i], DQ_CONFLICT, msg);
        } else if (st == DQ_NOT_FOUND && w->not_found) {
            reply_result_error(out, i, ids[i], DQ_NOT_FOUND, "no job with this id");
        } else {
            item_failure(out, i, ids[i], st, w->done);
        }
    }
}

/* {"success":true,"results":[...]} */
static void reply_items(dq_buf *out, const char *const *ids, const store_item *items, size_t n,
                        const item_words *w)
{
    reply_results_begin(out);
    put_items(out, ids, items, n, w);
    reply_results_end(out);
}

/* Why an add met an existing id: a live job (its state, when the caller
 * may see it), or the kept record of one finished or deleted, with when
 * (the idempotency window); or why an upsert could not replace a job: it
 * is reserved, or of another topic. */
static void conflict_sentence(char *msg, size_t n, const char *id, const store_item *it)
{
    char subject[DQ_ID_MAX + 32] = "a job with this id";
    if (id)
        snprintf(subject, sizeof subject, "a job with id '%s'", id);
    char when[32];
    switch (it->reason) {
    case ADD_REASON_RESERVED:
        snprintf(msg, n, "%s is reserved (a consumer or a callback holds it) and cannot be "
                 "replaced; nothing was written", subject);
        return;
    case ADD_REASON_TOPIC:
        snprintf(msg, n,
                 "%s is in topic '%s' (state %s); a replace keeps a job's topic, so "
                 "nothing was written",
                 subject, it->topic, it->state);
        return;
    case ADD_REASON_KEPT:
        util_format_utc_ms(it->ended_ms, when, sizeof when);
        snprintf(msg, n,
                 "%s was %s at %s (%lld ms) and is kept in its topic's history; "
                 "nothing was written",
                 subject, it->state, when, (long long)it->ended_ms);
        return;
    case ADD_REASON_HIDDEN:
        snprintf(msg, n, "%s already exists", subject);
        return;
    case ADD_REASON_LIVE:
        snprintf(msg, n, "%s already exists (state %s)", subject, it->state);
        return;
    }
    abort(); /* read_conflict answers only the declared reasons */
}

static void add_conflict(char *msg, size_t n, const store_item *it)
{
    conflict_sentence(msg, n, NULL, it);
}

static const item_words add_words = {"added", 0, 1, add_conflict};
static const item_words finish_words = {"finished", 1, 0, NULL};
static const item_words delete_words = {"deleted", 1, 0, NULL};

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
    for (size_t i = 0; i < req->njobs; i++) {
        if (at_too_far(req->jobs[i].at_ms))
            return at_too_far_answer(c, req->batch ? (long)i : -1);
    }
    char (*generated)[2 * GENERATED_ID_BYTES + 1] = util_xcalloc(req->njobs, sizeof *generated);
    const char **ids = util_xcalloc(req->njobs, sizeof *ids);
    store_item *items = util_xcalloc(req->njobs, sizeof *items);
    for (size_t i = 0; i < req->njobs; i++) {
        ids[i] = req->jobs[i].id;
        int fits = 1;
        if (!ids[i]) {
            fits = store_key_id(c->h->store, req->jobs[i].key, generated[i], GENERATED_ID_BYTES) == 0;
            ids[i] = generated[i];
        } else {
            fits = store_id_fits_key(c->h->store, ids[i], req->jobs[i].key);
        }
        if (!fits) {
            free(generated);
            free(ids);
            free(items);
            if (!req->jobs[i].id)
                return answer(reply_errorf(c->out, DQ_INTERNAL, "no id could be made for the job"));
            return key_shard_answer(c, req->batch ? (long)i : -1);
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
        if (items[0].status == DQ_CONFLICT) {
            char why[DQ_ID_MAX + DQ_TOPIC_MAX + 200];
            conflict_sentence(why, sizeof why, ids[0], &items[0]);
            reply_error(c->out, DQ_CONFLICT, why);
            res = answer(DQ_CONFLICT);
        } else
            reply_added(c->out, ids[0], items[0].replaced);
    } else {
        reply_items(c->out, ids, items, req->njobs, &add_words);
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
    put_items(c->out, (const char *const *)req->ids, c->progress->finished, req->nids,
              &finish_words);
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
            pg->finished = util_xcalloc(req->nids, sizeof *pg->finished);
        }
        q.finish = (const char *const *)req->ids;
        q.nfinish = req->nids;
        q.finished = pg->finished;
    }
    /* Single-job pops of one shard share calls (group commit). */
    int may_wait = !c->h->stopping && !c->h->recheck &&
                   util_mono_ms() < c->h->started_ms + req->timeout_ms;
    dq_status st = store_shards(c->h->store) == 1 && q.count == 1
                       ? group_pop(c->h->group, c->h->store, &q, jobs, err)
                       : shard_pop(c->h->store, c->h->hints, &q, may_wait, jobs, err);
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
        int64_t token_wait = jobs.token_wait_ms;
        store_jobs_free(&jobs);
        /* wait for a job, or for the token a rate-limited topic's ready jobs need */
        return (dq_response){DQ_OK, 0, 1, token_wait};
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
    store_item *items = util_xcalloc(req->nids, sizeof *items);
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
        reply_items(c->out, (const char *const *)req->ids, items, req->nids,
                    finished ? &finish_words : &delete_words);
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
    if (st == DQ_CONFLICT && strcmp(err->detail, "delivering") == 0)
        return answer(reply_errorf(c->out, st, "job '%s' is reserved by delayq-push, its callback "
                                   "request in flight; only its outcome ends the reservation, "
                                   "so %s is refused", id, command_name(c->req->cmd)));
    if (st == DQ_CONFLICT)
        return answer(reply_errorf(c->out, st, "job '%s' is %s, not reserved; %s needs a reserved job",
                                   id, err->detail, command_name(c->req->cmd)));
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

static void kick_conflict(char *msg, size_t n, const store_item *it)
{
    snprintf(msg, n, "the job is %s, not buried", it->state);
}

static const item_words kick_words = {"kicked", 1, 0, kick_conflict};

/* kick by id or ids: each named job must be buried. */
static dq_response kick_ids(call_ctx *c)
{
    const dq_request *req = c->req;
    store_item *items = util_xcalloc(req->nids, sizeof *items);
    store_error err;
    dq_status st = store_kick_ids(c->h->store, c->allow, req->ids, req->nids, items, &err);
    dq_response res = answer(DQ_OK);
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
        reply_items(c->out, (const char *const *)req->ids, items, req->nids, &kick_words);
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
    store_spread sp;
    dq_status st = store_kick(c->h->store, c->req->topics[0], c->req->count > 0 ? c->req->count : 1,
                              &kicked, &sp, &err);
    if (st != DQ_OK) {
        char done[64];
        snprintf(done, sizeof done, "%lld jobs were kicked in the others", (long long)kicked);
        return spread_failure(c, st, &err, &sp, kicked > 0, done, "kicked", kicked);
    }
    buf_puts(c->out, "{\"success\":true,\"kicked\":");
    buf_put_i64(c->out, kicked);
    buf_putc(c->out, '}');
    return answer(DQ_OK);
}

static dq_response handle_reschedule(call_ctx *c)
{
    const dq_request *req = c->req;
    const char *id = req->ids[0];
    if (at_too_far(req->at_ms))
        return at_too_far_answer(c, -1);
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
                                   req->limit, &page, next, sizeof next, &err);
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

/* The first fire of the schedule sc strictly after after_s, counting an
 * `every` without `start` from now_s, and its anchor. -1 with a 400
 * written when there is none. */
static int first_fire(call_ctx *c, dq_tz *tz, int64_t now_s, int64_t after_s, int64_t *anchor_s,
                      int64_t *next_s, dq_response *res)
{
    const dq_schedule_spec *sc = &c->req->schedule;
    *anchor_s = sc->start_s >= 0 ? sc->start_s : now_s;
    dq_sched def;
    char why[256];
    if (sched_define(&def, sc->cron, tz, sc->every_s, *anchor_s, sc->start_s, sc->end_s, why,
                     sizeof why) < 0) { /* parse_schedule parsed it already */
        *res = answer(reply_errorf(c->out, DQ_BAD_REQUEST, "field 'cron': %s", why));
        return -1;
    }
    *next_s = sched_next(&def, after_s);
    if (*next_s != SCHED_NONE)
        return 0;
    def.end_s = SCHED_NONE;
    if (sc->end_s >= 0 && sched_next(&def, after_s) != SCHED_NONE)
        *res = answer(reply_errorf(c->out, DQ_BAD_REQUEST,
                                   "field 'end' leaves the schedule no fire time after now"));
    else
        *res = answer(reply_errorf(c->out, DQ_BAD_REQUEST,
                                   "field 'cron' matches no date in the next %d days",
                                   CRON_HORIZON_DAYS));
    return -1;
}

/* Tries of a schedule's store: the first on this host's clock, the next
 * on the Redis time (and last fire) the store answered. */
#define SCHEDULE_PUT_TRIES 3

static dq_response handle_schedule(call_ctx *c)
{
    const dq_schedule_spec *sc = &c->req->schedule;
    dq_response res = answer(DQ_OK);
    dq_tz *tz = schedule_zone(c, sc->tz, &res);
    if (!tz)
        return res;
    /* The first fire strictly after now and after the schedule's last
     * fire: fires run on Redis' clock, so the store refuses a first fire
     * computed on a clock more than a second off it (or not after the last
     * fire) and answers its time, to compute it again on. */
    store_schedule_put_result put = {.retry = 1, .now_ms = util_wall_ms(), .last_ms = -1};
    int64_t next_s = 0;
    dq_status st = DQ_OK;
    store_error err;
    for (int try = 0; try < SCHEDULE_PUT_TRIES && st == DQ_OK && put.retry; try++) {
        int64_t now_s = put.now_ms / 1000, last_s = put.last_ms / 1000, anchor_s;
        int64_t after_s = now_s > last_s ? now_s : last_s;
        if (first_fire(c, tz, now_s, after_s, &anchor_s, &next_s, &res) < 0) {
            tz_free(tz);
            return res;
        }
        st = store_schedule_put(c->h->store, c->allow, sc, anchor_s, next_s * 1000, put.now_ms,
                                &put, &err);
    }
    tz_free(tz);
    if (st == DQ_CONFLICT)
        return answer(reply_errorf(c->out, DQ_CONFLICT, "a schedule with id '%s' exists under a "
                                   "topic this token may not use", sc->id));
    if (st != DQ_OK)
        return store_failure(c, st, &err);
    if (put.retry) /* Redis' clock ran off each answer it gave */
        return answer(reply_errorf(c->out, DQ_UNAVAILABLE,
                                   "Redis' clock moved too fast to compute the schedule's "
                                   "first fire on; try again"));
    buf_puts(c->out, "{\"success\":true,\"id\":");
    buf_put_json_string(c->out, sc->id, strlen(sc->id));
    buf_printf(c->out, ",\"next\":%lld,\"replaced\":%s}", (long long)next_s * 1000,
               put.replaced ? "true" : "false");
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

/* The upcoming fires of a schedule (s): its stored next fire and those
 * after, at most n. Returns how many. */
static int schedule_upcoming(const store_schedule *sc, int n, int64_t *fires)
{
    int found = 0;
    char why[256];
    dq_tz *tz = tz_load(sc->tz, why, sizeof why);
    dq_sched def;
    if (tz && sc->next_ms >= 0 &&
        sched_define(&def, sc->cron, tz, sc->every_s, sc->anchor_s, sc->start_s, sc->end_s, why,
                     sizeof why) == 0)
        found = sched_upcoming(&def, sc->next_ms / 1000 - 1, fires, n);
    tz_free(tz);
    return found;
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
        int64_t fires[DQ_PREVIEW_MAX];
        int n = req->preview > 0 ? schedule_upcoming(&list.list[i], req->preview, fires) : -1;
        reply_schedule(c->out, &list.list[i], fires, n);
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
    store_spread sp;
    dq_status st = store_pause(c->h->store, topic, pause, &sp, &err);
    if (st != DQ_OK)
        return spread_failure(c, st, &err, &sp, sp.calls_answered > 0,
                              pause ? "the topic is paused in the others"
                                    : "the topic is resumed in the others",
                              NULL, 0);
    buf_puts(c->out, "{\"success\":true,\"topic\":");
    buf_put_json_string(c->out, topic, strlen(topic));
    buf_printf(c->out, ",\"paused\":%s}", pause ? "true" : "false");
    return answer(DQ_OK);
}

static dq_response handle_purge(call_ctx *c)
{
    const char *topic = c->req->topics[0];
    int64_t purged = 0;
    store_error err;
    store_spread sp;
    dq_status st = store_purge(c->h->store, topic, c->req->state, &purged, &sp, &err);
    if (st != DQ_OK) {
        char done[64];
        snprintf(done, sizeof done, "%lld jobs were purged", (long long)purged);
        return spread_failure(c, st, &err, &sp, purged > 0, done, "purged", purged);
    }
    buf_puts(c->out, "{\"success\":true,\"topic\":");
    buf_put_json_string(c->out, topic, strlen(topic));
    buf_printf(c->out, ",\"purged\":%lld}", (long long)purged);
    return answer(DQ_OK);
}

/* ------------------------------------------------------------------------ */
/* policy / policies                                                         */
/* ------------------------------------------------------------------------ */

static dq_response handle_policy(call_ctx *c)
{
    const char *topic = c->req->topics[0];
    const dq_policy_spec *spec = &c->req->policy;
    int shards = store_shards(c->h->store);
    /* Each shard enforces its share of a topic-wide concurrency (lib/85-shares.lua,
     * shard_share): below one job per shard, some shard's jobs would wait
     * for ever. */
    if (spec->op[DQ_POLICY_CONCURRENCY] == DQ_POLICY_SET && spec->value[DQ_POLICY_CONCURRENCY] < shards)
        return answer(reply_errorf(c->out, DQ_BAD_REQUEST,
                                   "field 'concurrency' must be at least %d on this deployment of "
                                   "%d shards: each shard allows its share of it",
                                   shards, shards));
    /* The same for `rate` (lib/85-shares.lua, rate_share): below one token per
     * shard, the shards' bursts together would pass the one burst of
     * `rate` the protocol allows. */
    if (spec->op[DQ_POLICY_RATE] == DQ_POLICY_SET && spec->value[DQ_POLICY_RATE] < shards)
        return answer(reply_errorf(c->out, DQ_BAD_REQUEST,
                                   "field 'rate' must be at least %d on this deployment of "
                                   "%d shards: each shard allows its share of it",
                                   shards, shards));
    store_policy p;
    store_error err;
    store_spread sp;
    dq_status st = store_policy_set(c->h->store, topic, spec, &p, &sp, &err);
    if (st != DQ_OK)
        return spread_failure(c, st, &err, &sp, sp.calls_answered > 0,
                              "the policy is stored in the others", NULL, 0);
    buf_puts(c->out, "{\"success\":true,\"topic\":");
    buf_put_json_string(c->out, topic, strlen(topic));
    buf_puts(c->out, ",\"policy\":{");
    reply_policy_fields(c->out, &p);
    buf_puts(c->out, "}}");
    return answer(DQ_OK);
}

static dq_response handle_policies(call_ctx *c)
{
    const dq_request *req = c->req;
    store_policies ps;
    store_error err;
    dq_status st = store_policies_read(c->h->store, req->ntopics ? req->topics[0] : NULL,
                                       req->cursor, req->limit, &ps, &err);
    if (st != DQ_OK)
        return store_failure(c, st, &err);
    buf_puts(c->out, "{\"success\":true,\"policies\":{");
    for (size_t i = 0; i < ps.n; i++) {
        const store_policy *p = &ps.policies[i];
        if (i)
            buf_putc(c->out, ',');
        buf_put_json_string(c->out, p->topic, p->topic_len);
        buf_puts(c->out, ":{");
        reply_policy_fields(c->out, p);
        buf_printf(c->out, ",\"reserved\":%lld,\"throttled\":%lld,\"keys_waiting\":%lld,\"tokens\":",
                   (long long)p->reserved, (long long)p->throttled, (long long)p->keys_waiting);
        if (p->tokens >= 0)
            buf_printf(c->out, "%lld}", (long long)p->tokens);
        else
            buf_puts(c->out, "null}");
    }
    buf_puts(c->out, "},\"cursor\":");
    if (ps.next_cursor)
        buf_put_json_string(c->out, ps.next_cursor, strlen(ps.next_cursor));
    else
        buf_puts(c->out, "null");
    buf_putc(c->out, '}');
    store_policies_free(&ps);
    return answer(DQ_OK);
}

/* ------------------------------------------------------------------------ */
/* stats / metrics / health                                                  */
/* ------------------------------------------------------------------------ */

static dq_response handle_stats(call_ctx *c)
{
    const dq_request *req = c->req;
    store_stats st;
    store_error err;
    dq_status s = store_stats_read(c->h->store, req->ntopics ? req->topics[0] : NULL, req->cursor,
                                   req->limit, &st, &err);
    if (s != DQ_OK)
        return store_failure(c, s, &err);
    buf_puts(c->out, "{\"success\":true,\"topics\":{");
    for (size_t i = 0; i < st.n; i++) {
        if (i)
            buf_putc(c->out, ',');
        buf_put_json_string(c->out, st.topics[i].name, st.topics[i].name_len);
        buf_putc(c->out, ':');
        reply_stats_object(c->out, st.topics[i].v, &st.topics[i]);
    }
    buf_puts(c->out, "},\"total\":");
    if (req->ntopics)
        reply_stats_object(c->out, st.n ? st.topics[0].v : NULL, NULL);
    else
        reply_stats_object(c->out, st.totals, NULL);
    if (!req->ntopics) {
        buf_puts(c->out, ",\"cursor\":");
        if (st.next_cursor)
            buf_put_json_string(c->out, st.next_cursor, strlen(st.next_cursor));
        else
            buf_puts(c->out, "null");
    }
    buf_printf(c->out, ",\"unconfirmed_writes\":%llu}", (unsigned long long)replicas_unconfirmed());
    store_stats_free(&st);
    return answer(DQ_OK);
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
    store_policies ps;
    s = store_policies_read(c->h->store, NULL, NULL, limit > 0 ? limit : 1, &ps, &err);
    if (s != DQ_OK) {
        store_lag_free(&lag);
        store_stats_free(&st);
        return store_failure(c, s, &err);
    }
    int *replicas = util_xcalloc((size_t)store_shards(c->h->store), sizeof *replicas);
    store_replica_counts(c->h->store, replicas);
    prometheus_figures f = {&st,      limit > 0 ? st.n : 0, &lag, &layout, store_shards(c->h->store),
                            0,        0, limit > 0 ? &ps : NULL, c->h->cfg->redis_wait_replicas,
                            replicas, replicas_unconfirmed()};
    f.masters_used = store_cluster_spread(c->h->store, &f.masters);
    prometheus_render(c->out, &f);
    free(replicas);
    store_policies_free(&ps);
    store_lag_free(&lag);
    store_stats_free(&st);
    metrics_render_requests(c->out);
    return (dq_response){DQ_OK, 1, 0, 0};
}

/* With redis_wait_replicas: the shards whose master has fewer replicas
 * ("short_of_replicas": [{"shard","replicas"}], replicas -1 when its
 * master did not answer), and a sentence saying what that means. */
static void put_replicas(dq_buf *out, dq_store *store, int wanted)
{
    if (!wanted)
        return;
    int shards = store_shards(store);
    int *replicas = util_xcalloc((size_t)shards, sizeof *replicas);
    int nshort = store_replica_counts(store, replicas);
    buf_printf(out, ",\"wait_replicas\":%d,\"short_of_replicas\":[", wanted);
    for (int k = 0, n = 0; k < shards; k++) {
        if (replicas[k] >= 0 && replicas[k] < wanted)
            buf_printf(out, "%s{\"shard\":%d,\"replicas\":%d}", n++ ? "," : "", k, replicas[k]);
    }
    buf_putc(out, ']');
    if (nshort)
        buf_printf(out, ",\"replicas_warning\":\"%d of %d shards have fewer replicas than "
                        "redis_wait_replicas (%d): adds there answer 503, pops, finishes and "
                        "callbacks go on unconfirmed\"", nshort, shards, wanted);
    free(replicas);
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
        store_layout_info layout;
        reply_layout(c->out, store_layout_read(c->h->store, &layout) == DQ_OK ? &layout : NULL);
        put_replicas(c->out, c->h->store, c->h->cfg->redis_wait_replicas);
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
#define DQ_COMMAND(e, name, flags, fields, parser, handler) [CMD_##e] = handler,
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
