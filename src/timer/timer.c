/* timer: bucket ownership and moving due jobs, in every shard. */
#define _GNU_SOURCE /* ppoll */
#include "timer/timer.h"

#include <inttypes.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "job/job.h"
#include "sched/sched_time.h"
#include "store/store.h"
#include "store/store_ops.h"
#include "store/store_sentinel.h"
#include "timer/redis_clock.h"

#define NEVER INT64_MAX
#define US 1000 /* due times are monotonic us: a ms would add up to one to every job */
#define RETRY_MS 200 /* after a failed Redis call */
/* A held bucket's head is read again at least DQ_HEAD_RECHECK_MS after
 * each maintain, whatever its cached due time says: a wake-up lost with a
 * failed-over master, or a job a promoted replica holds that its old
 * master never announced, would otherwise wait until the next job of that
 * bucket; and a job due beyond the next such read is announced by no
 * wake-up at all (the wake-up horizon, src/job/job.h). */
_Static_assert(DQ_WAKE_HORIZON_MS >=
                   DQ_TIMER_LEASE_MAX_MS / 3 + DQ_HEAD_RECHECK_MS + DQ_HEAD_READ_SPARE_MS,
               "a job due beyond the wake-up horizon must be due after the next head read");
#define FAILURE_REPORT_MS 10000 /* failed moves are logged at most this often */
/* A move that found its bucket not due yet, though the clock said it was,
 * is tried again this much later (not at once, again and again). */
#define EARLY_RETRY_US 250
#define SWEEP_BATCH 100 /* topics forgotten per sweep call */
#define SWEEP_CALLS 10  /* sweep calls per sweep and shard, at most */
#define SWEEP_MAX_MS 30000 /* the longest wait between two sweeps */
#define MAX_FDS 66      /* stop, and the subscriber's nodes */
#define FIRE_BATCH 100  /* due schedules read (and fired) per call */
#define FIRE_ROUNDS 100 /* rounds of FIRE_BATCH per shard and wake-up, at most */
#define CATCH_UP_STEPS 100000 /* cron fires walked per schedule and round */
#define BROKEN_RETRY_MS 60000 /* a schedule the timer cannot compute waits this */
#define ZONES_MAX 64    /* time zones kept loaded */

/* Bucket b of shard k is entry k * buckets + b of the per-bucket arrays. */
typedef struct {
    const dq_config *cfg;
    dq_store *cmd; /* function calls */
    dq_store *sub; /* wake-up messages */
    char token[64]; /* owner of our bucket locks: timer_id, else random */
    int nshards, nbuckets;
    unsigned char *held, *now_held; /* per bucket */
    int64_t *next_due;       /* per bucket: monotonic us when it needs a move */
    unsigned char *answered; /* per shard: the last maintain reached it */
    redis_clock *clocks;     /* per shard: its Redis' clock */
    int64_t *maintained;     /* per shard: monotonic us of its last maintain */
    store_move_call *moves;  /* one round of moves */
    size_t moves_cap;
    int64_t *sched_due;      /* per shard: monotonic us when its schedules need a look;
                                NEVER unless we hold its bucket 0 */
    dq_tz *zones[ZONES_MAX]; /* loaded time zones, by tz_name */
    int nzones;
    int64_t failed_moves;    /* since the last report of them */
    int64_t failures_reported_ms;
} timer_state;

static size_t at(const timer_state *t, int shard, int b)
{
    return (size_t)shard * (size_t)t->nbuckets + (size_t)b;
}

static void drop_shard(timer_state *t, int k)
{
    for (int b = 0; b < t->nbuckets; b++) {
        t->held[at(t, k, b)] = 0;
        t->next_due[at(t, k, b)] = NEVER;
    }
    t->sched_due[k] = NEVER;
}

/* Heartbeat, renew, rebalance, in every shard. Newly taken buckets are due
 * now. Returns 0, -1 when some shard did not answer (retried soon), -2 on
 * a layout the deployment refuses (fatal). */
static int maintain(timer_state *t)
{
    store_error err;
    dq_status st = store_lock_maintain(t->cmd, t->token, t->cfg->timer_lease_ms, t->nbuckets,
                                       rand() % t->nbuckets, t->now_held, t->answered, &err);
    if (st == DQ_MISCONFIGURED) {
        log_error("config keys 'buckets' (%d) and 'shards' (%d) differ from what this "
                  "deployment's Redis records (%s); stopping", t->nbuckets, t->nshards,
                  err.detail);
        return -2;
    }
    int64_t now = util_mono_us();
    int gained = 0, lost = 0, nheld = 0, missing = 0;
    for (int k = 0; k < t->nshards; k++) {
        if (!t->answered[k]) {
            missing++;
            if (now - t->maintained[k] > (int64_t)t->cfg->timer_lease_ms * US)
                drop_shard(t, k); /* our leases there have run out by now */
            continue;
        }
        t->maintained[k] = now;
        for (int b = 0; b < t->nbuckets; b++) {
            size_t i = at(t, k, b);
            if (t->now_held[i] && !t->held[i]) {
                t->next_due[i] = 0;
                if (b == 0)
                    t->sched_due[k] = 0; /* the shard's schedules are ours now */
                gained++;
            } else if (!t->now_held[i] && t->held[i]) {
                t->next_due[i] = NEVER;
                if (b == 0)
                    t->sched_due[k] = NEVER;
                lost++;
            }
            t->held[i] = t->now_held[i];
            nheld += t->held[i];
            if (t->held[i] && t->next_due[i] > now + DQ_HEAD_RECHECK_MS * US)
                t->next_due[i] = now + DQ_HEAD_RECHECK_MS * US;
        }
    }
    if (gained || lost)
        log_info("buckets: %d held (+%d -%d)", nheld, gained, lost);
    return missing ? -1 : 0;
}

/* Forgets topics idle past topic_retention_s. In each shard one timer
 * does it: the holder of the shard's bucket 0. Bounded per maintain, so
 * Redis is never blocked. */
static void sweep(timer_state *t)
{
    for (int k = 0; k < t->nshards; k++) {
        if (!t->held[at(t, k, 0)])
            continue;
        for (int i = 0; i < SWEEP_CALLS; i++) {
            int64_t forgotten = 0;
            if (store_sweep(t->cmd, k, (int64_t)t->cfg->topic_retention_s * 1000, SWEEP_BATCH,
                            &forgotten) != DQ_OK)
                break;
            if (forgotten)
                log_debug("shard %d: forgot %lld idle topics", k, (long long)forgotten);
            if (forgotten < SWEEP_BATCH)
                break;
        }
    }
}

/* (Re)subscribes to wake-ups; after a gap, every held bucket is rechecked
 * since messages may have been missed. */
static void ensure_subscribed(timer_state *t)
{
    if (store_sub_open_now(t->sub) || store_sub_open(t->sub, ":wake") != DQ_OK)
        return;
    size_t n = (size_t)t->nshards * (size_t)t->nbuckets;
    for (size_t i = 0; i < n; i++) {
        if (t->held[i])
            t->next_due[i] = 0;
    }
    for (int k = 0; k < t->nshards; k++) {
        if (t->held[at(t, k, 0)])
            t->sched_due[k] = 0;
    }
}

/* "<bucket>:<due ms>": an earlier job arrived in a bucket of the shard.
 * "sched:<ms>": a schedule's next fire became the shard's earliest.
 * "rebalance": a timer joined or gave buckets back; maintain now, so buckets
 * change hands at once rather than at the next renewal. */
static void read_wakeups(timer_state *t, int64_t *next_maintain)
{
    char payload[64];
    int k, r;
    while ((r = store_sub_read(t->sub, &k, payload, sizeof payload, NULL)) == 0) {
        if (strcmp(payload, "rebalance") == 0) {
            *next_maintain = 0;
            continue;
        }
        if (strncmp(payload, "sched:", 6) == 0) {
            int64_t due = redis_clock_mono_us(&t->clocks[k], strtoll(payload + 6, NULL, 10));
            if (t->held[at(t, k, 0)] && due < t->sched_due[k])
                t->sched_due[k] = due;
            continue;
        }
        char *colon = strchr(payload, ':');
        if (!colon)
            continue;
        int b = atoi(payload);
        if (b < 0 || b >= t->nbuckets)
            continue;
        size_t i = at(t, k, b);
        int64_t due = redis_clock_mono_us(&t->clocks[k], strtoll(colon + 1, NULL, 10));
        if (t->held[i] && due < t->next_due[i])
            t->next_due[i] = due;
    }
    if (r < 0)
        log_warn("wake-up subscription lost; resubscribing");
}

/* When Redis' `earliest` (ms; -1: nothing) of shard comes here, from an
 * answer read at answered_us that said its clock stood at redis_now: what
 * Redis said is not due yet is not tried again at once, whatever the
 * clock's estimate says. */
static int64_t due_here(timer_state *t, int shard, int64_t earliest, int64_t redis_now,
                        int64_t answered_us)
{
    if (earliest < 0)
        return NEVER;
    int64_t due = redis_clock_mono_us(&t->clocks[shard], earliest);
    int64_t floor = earliest > redis_now ? answered_us + EARLY_RETRY_US : 0;
    return due > floor ? due : floor;
}

/* A failed move is retried every RETRY_MS, so a line per failure would
 * flood the log: one at most every FAILURE_REPORT_MS says how many failed
 * and why the first of this round did. */
static void report_failed_moves(timer_state *t, size_t failed, const store_move_call *first,
                                const store_error *err)
{
    t->failed_moves += (int64_t)failed;
    int64_t now = util_mono_ms();
    if (t->failures_reported_ms && now - t->failures_reported_ms < FAILURE_REPORT_MS)
        return;
    log_warn("moves failing: %" PRId64 " failed since the last report, e.g. shard %d bucket %d: "
             "%s%s%s; retrying every %d ms", t->failed_moves, first->shard, first->bucket,
             status_code(first->status), err->detail[0] ? ": " : "", err->detail, RETRY_MS);
    t->failed_moves = 0;
    t->failures_reported_ms = now;
}

/* Moves every held bucket that is due, all of them in one pipelined round
 * per node (a round trip per bucket would make the last of many buckets
 * late); a bucket with more due than timer_batch goes again at once.
 * Returns the earliest next due time (or until). */
static int64_t move_due(timer_state *t, int64_t until)
{
    size_t total = (size_t)t->nshards * (size_t)t->nbuckets;
    for (;;) {
        size_t n = 0;
        int64_t now = util_mono_us();
        for (size_t i = 0; i < total && n < t->moves_cap; i++) {
            if (t->held[i] && t->next_due[i] <= now)
                t->moves[n++] = (store_move_call){.timer = t->token,
                                                  .shard = (int)(i / (size_t)t->nbuckets),
                                                  .bucket = (int)(i % (size_t)t->nbuckets)};
        }
        if (n == 0)
            break;
        int64_t sent_us = util_mono_us();
        store_error err;
        store_move_many(t->cmd, t->moves, n, t->cfg->timer_batch, &err);
        int64_t answered_us = util_mono_us();
        const store_move_call *first_failed = NULL;
        size_t failed = 0;
        for (size_t m = 0; m < n; m++) {
            const store_move_call *c = &t->moves[m];
            size_t i = at(t, c->shard, c->bucket);
            if (c->status != DQ_OK) {
                t->next_due[i] = answered_us + RETRY_MS * US;
                if (!failed++)
                    first_failed = c;
                continue;
            }
            redis_clock_learn(&t->clocks[c->shard], c->redis_now, sent_us, answered_us);
            if (c->moved)
                log_debug("shard %d bucket %d: moved %" PRId64, c->shard, c->bucket, c->moved);
            if (c->moved >= t->cfg->timer_batch)
                t->next_due[i] = 0; /* more are due right now */
            else
                t->next_due[i] = due_here(t, c->shard, c->earliest, c->redis_now, answered_us);
        }
        if (failed)
            report_failed_moves(t, failed, first_failed, &err);
    }
    for (size_t i = 0; i < total; i++) {
        if (t->held[i] && t->next_due[i] < until)
            until = t->next_due[i];
    }
    return until;
}

/* ------------------------------------------------------------------------ */
/* Schedules                                                                 */
/* ------------------------------------------------------------------------ */

/* A loaded zone by name, or NULL with why set. Zones stay loaded for the
 * life of the timer (at most ZONES_MAX; then they are loaded afresh). */
static const dq_tz *zone(timer_state *t, const char *name, char *why, size_t whylen)
{
    for (int i = 0; i < t->nzones; i++) {
        if (strcmp(tz_name(t->zones[i]), name) == 0)
            return t->zones[i];
    }
    dq_tz *tz = tz_load(name, why, whylen);
    if (!tz)
        return NULL;
    if (t->nzones == ZONES_MAX) {
        for (int i = 0; i < t->nzones; i++)
            tz_free(t->zones[i]);
        t->nzones = 0;
    }
    t->zones[t->nzones++] = tz;
    return tz;
}

/* What to do with one due schedule: the latest of its due fire times
 * fires, the earlier ones count as missed, and its next fire follows. */
static void plan_fire(timer_state *t, const store_schedule *sc, int64_t redis_now,
                      store_fire_call *c)
{
    char why[256] = "";
    memset(c, 0, sizeof *c);
    c->id = sc->id;
    c->version = sc->version;
    c->expected_ms = sc->next_ms;
    const dq_tz *tz = zone(t, sc->tz, why, sizeof why);
    dq_sched def;
    if (!tz || sched_define(&def, sc->cron, tz, sc->every_s, sc->anchor_s, sc->start_s, sc->end_s,
                            why, sizeof why) < 0) {
        /* Another version's definition, or a zone this host lacks: wait
         * rather than fire at a wrong time. */
        log_error("schedule '%s': %s; trying again in %d s", sc->id, why, BROKEN_RETRY_MS / 1000);
        c->fire_ms = -1;
        c->next_ms = redis_now + BROKEN_RETRY_MS;
        return;
    }
    int64_t fire, missed, next;
    sched_catch_up(&def, sc->next_ms / 1000, redis_now / 1000, CATCH_UP_STEPS, &fire, &missed,
                   &next);
    c->fire_ms = fire == SCHED_NONE ? -1 : fire * 1000;
    c->next_ms = next == SCHED_NONE ? -1 : next * 1000;
    c->missed = missed;
    if (missed)
        log_info("schedule '%s': %" PRId64 " fires missed (no timer ran through them)", sc->id,
                 missed);
}

/* Fires the due schedules of the shards whose bucket 0 we hold (each
 * shard's are fired by one timer, like sweep; the fire function makes a
 * second timer's attempt a no-op anyway). Returns the earliest time a
 * shard's schedules need a look again (or until). */
static int64_t fire_schedules(timer_state *t, int64_t until)
{
    for (int k = 0; k < t->nshards; k++) {
        if (!t->held[at(t, k, 0)] || t->sched_due[k] > util_mono_us())
            continue;
        for (int round = 0;; round++) {
            store_schedules due;
            int64_t redis_now = 0, earliest = -1, sent_us = util_mono_us();
            if (round == FIRE_ROUNDS ||
                store_sched_due(t->cmd, k, FIRE_BATCH, &redis_now, &earliest, &due) != DQ_OK) {
                t->sched_due[k] = util_mono_us() + RETRY_MS * US;
                break;
            }
            int64_t answered_us = util_mono_us();
            redis_clock_learn(&t->clocks[k], redis_now, sent_us, answered_us);
            if (due.n == 0) {
                t->sched_due[k] = due_here(t, k, earliest, redis_now, answered_us);
                store_schedules_free(&due);
                break;
            }
            store_fire_call *calls = util_xcalloc(due.n, sizeof *calls);
            for (size_t i = 0; i < due.n; i++)
                plan_fire(t, &due.list[i], redis_now, &calls[i]);
            store_fire_many(t->cmd, k, calls, due.n);
            int failed = 0;
            for (size_t i = 0; i < due.n; i++) {
                if (calls[i].status != DQ_OK)
                    failed = 1;
                else if (calls[i].fired)
                    log_debug("schedule '%s': fired %" PRId64, calls[i].id, calls[i].fire_ms / 1000);
            }
            free(calls);
            store_schedules_free(&due);
            if (failed) {
                t->sched_due[k] = util_mono_us() + RETRY_MS * US;
                break;
            }
        }
    }
    for (int k = 0; k < t->nshards; k++) {
        if (t->held[at(t, k, 0)] && t->sched_due[k] < until)
            until = t->sched_due[k];
    }
    return until;
}

static int timer_init(timer_state *t, const dq_config *cfg)
{
    memset(t, 0, sizeof *t);
    t->cfg = cfg;
    t->nshards = cfg->shards;
    t->nbuckets = cfg->buckets;
    t->cmd = store_new(cfg);
    t->sub = store_new(cfg);
    if (!t->cmd || !t->sub)
        return -1;
    /* A move, lock or fire that a failover loses is done again on the new
     * master (each is idempotent against the state it finds), and a pop
     * that saw its effect waited for a replica that had it too: waiting
     * for replicas here only slows the timer, and on a master that lost
     * its replica would answer every move 504 though it was applied. */
    store_skip_wait(t->cmd);
    size_t n = (size_t)t->nshards * (size_t)t->nbuckets;
    t->held = util_xcalloc(n, 1);
    t->now_held = util_xcalloc(n, 1);
    t->next_due = util_xcalloc(n, sizeof *t->next_due);
    t->answered = util_xcalloc((size_t)t->nshards, 1);
    t->clocks = util_xcalloc((size_t)t->nshards, sizeof *t->clocks);
    t->maintained = util_xcalloc((size_t)t->nshards, sizeof *t->maintained);
    t->sched_due = util_xcalloc((size_t)t->nshards, sizeof *t->sched_due);
    t->moves_cap = n < STORE_MOVES_PER_ROUND ? n : STORE_MOVES_PER_ROUND;
    t->moves = util_xcalloc(t->moves_cap, sizeof *t->moves);
    if (cfg->timer_id[0])
        snprintf(t->token, sizeof t->token, "%s", cfg->timer_id);
    else
        util_random_hex(t->token, 16);
    srand((unsigned)util_crc32(t->token, strlen(t->token)));
    for (int k = 0; k < t->nshards; k++)
        drop_shard(t, k);
    return 0;
}

static void timer_free(timer_state *t)
{
    store_free(t->cmd);
    store_free(t->sub);
    free(t->held);
    free(t->now_held);
    free(t->next_due);
    free(t->answered);
    free(t->clocks);
    free(t->maintained);
    free(t->moves);
    free(t->sched_due);
    for (int i = 0; i < t->nzones; i++)
        tz_free(t->zones[i]);
}

int timer_run(const dq_config *cfg, int stop_fd)
{
    timer_state t;
    if (timer_init(&t, cfg) < 0)
        return 1;
    if (cfg->redis_sentinels[0] && sentinel_watch_start(cfg) < 0)
        return 1;
    log_info("started; %d shards of %d buckets, lease %d ms", t.nshards, t.nbuckets,
             cfg->timer_lease_ms);

    int64_t next_maintain = 0, next_sweep = 0; /* monotonic us */
    /* Topics idle past the retention are forgotten within a quarter of it:
     * an idle timer does not sweep at every maintain. */
    int64_t sweep_every = (int64_t)cfg->topic_retention_s * 1000 / 4;
    if (sweep_every > SWEEP_MAX_MS)
        sweep_every = SWEEP_MAX_MS;
    if (sweep_every < cfg->timer_lease_ms / 3)
        sweep_every = cfg->timer_lease_ms / 3;
    int exit_code = 0;
    struct pollfd fds[MAX_FDS];
    for (;;) {
        int64_t now = util_mono_us();
        if (now >= next_maintain) {
            int rc = maintain(&t);
            if (rc == -2) {
                exit_code = 1;
                break;
            }
            if (now >= next_sweep) {
                sweep(&t);
                next_sweep = now + sweep_every * US;
            }
            next_maintain = now + (int64_t)(rc == 0 ? cfg->timer_lease_ms / 3 : RETRY_MS) * US;
        }
        ensure_subscribed(&t);
        int64_t wake = fire_schedules(&t, move_due(&t, next_maintain));
        now = util_mono_us();
        if (!store_sub_open_now(t.sub) && wake > now + RETRY_MS * US)
            wake = now + RETRY_MS * US; /* retry the subscription soon */
        if (store_sub_open_now(t.sub) && wake > now + (int64_t)store_sub_wait_ms(t.sub) * US)
            wake = now + (int64_t)store_sub_wait_ms(t.sub) * US; /* its keepalive */
        int64_t timeout_us = wake - now;
        if (timeout_us < 0)
            timeout_us = 0;
        struct timespec ts = {timeout_us / 1000000, (timeout_us % 1000000) * 1000};
        fds[0] = (struct pollfd){stop_fd, POLLIN, 0};
        int nfds = 1 + store_sub_fds(t.sub, fds + 1, MAX_FDS - 1);
        if (ppoll(fds, (nfds_t)nfds, &ts, NULL) < 0)
            continue;
        if (fds[0].revents)
            break;
        if (store_sub_open_now(t.sub))
            read_wakeups(&t, &next_maintain);
    }

    /* Hand the buckets over at once rather than after a lease. */
    int64_t released = 0;
    if (store_lock_release(t.cmd, t.token, cfg->timer_lease_ms, t.nbuckets, &released) == DQ_OK)
        log_info("stopped; released %" PRId64 " bucket locks", released);
    else
        log_warn("stopped; could not release every bucket lock (they expire with the lease)");
    timer_free(&t);
    return exit_code;
}
