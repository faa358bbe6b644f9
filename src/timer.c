/* timer: bucket ownership and moving due jobs. */
#include "timer.h"

#include <inttypes.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "store.h"
#include "store_ops.h"
#include "util.h"

#define NEVER INT64_MAX
#define RETRY_MS 200 /* after a failed Redis call */
#define SWEEP_BATCH 100 /* topics forgotten per sweep call */
#define SWEEP_CALLS 10  /* sweep calls per maintain, at most */

typedef struct {
    const dq_config *cfg;
    dq_store *cmd; /* function calls */
    dq_store *sub; /* wake-up messages */
    char token[64]; /* owner of our bucket locks: timer_id, else random */
    int nbuckets;
    int *held;
    int64_t *next_due;   /* monotonic ms when each held bucket needs a move */
    int64_t redis_offset; /* Redis ms minus monotonic ms, from the last move */
    int64_t last_maintained;
    char wake_channel[96];
} timer_state;

static void drop_all(timer_state *t)
{
    for (int k = 0; k < t->nbuckets; k++) {
        t->held[k] = 0;
        t->next_due[k] = NEVER;
    }
}

/* Heartbeat, renew, rebalance. Newly taken buckets are due now. Returns 0,
 * -1 on a Redis failure (retried), -2 on a configuration the deployment
 * refuses (fatal). */
static int maintain(timer_state *t)
{
    int *held = calloc((size_t)t->nbuckets, sizeof *held);
    int *now_held = calloc((size_t)t->nbuckets, sizeof *now_held);
    if (!held || !now_held)
        abort();
    int nheld = 0;
    store_error err;
    dq_status st = store_lock_maintain(t->cmd, t->token, t->cfg->timer_lease_ms, t->nbuckets,
                                       rand() % t->nbuckets, held, &nheld, &err);
    if (st != DQ_OK) {
        free(held);
        free(now_held);
        if (st == DQ_MISCONFIGURED) {
            log_error("config key 'buckets' (%d) differs from the %s this deployment's Redis "
                      "records; stopping", t->nbuckets, err.detail);
            return -2;
        }
        if (util_mono_ms() - t->last_maintained > t->cfg->timer_lease_ms)
            drop_all(t); /* our leases have run out by now */
        return -1;
    }
    for (int i = 0; i < nheld; i++)
        now_held[held[i]] = 1;
    int gained = 0, lost = 0;
    for (int k = 0; k < t->nbuckets; k++) {
        if (now_held[k] && !t->held[k]) {
            t->next_due[k] = 0;
            gained++;
        } else if (!now_held[k] && t->held[k]) {
            t->next_due[k] = NEVER;
            lost++;
        }
        t->held[k] = now_held[k];
    }
    if (gained || lost)
        log_info("buckets: %d held (+%d -%d)", nheld, gained, lost);
    free(held);
    free(now_held);
    t->last_maintained = util_mono_ms();
    return 0;
}

/* Forgets topics idle past topic_retention_s. One timer does it: the
 * holder of bucket 0. Bounded per maintain, so Redis is never blocked. */
static void sweep(timer_state *t)
{
    if (!t->held[0])
        return;
    for (int i = 0; i < SWEEP_CALLS; i++) {
        int64_t forgotten = 0;
        if (store_sweep(t->cmd, (int64_t)t->cfg->topic_retention_s * 1000, SWEEP_BATCH,
                        &forgotten) != DQ_OK)
            return;
        if (forgotten)
            log_debug("forgot %lld idle topics", (long long)forgotten);
        if (forgotten < SWEEP_BATCH)
            return;
    }
}

/* Moves what is due in bucket k, then records when it is next due. */
static void move_bucket(timer_state *t, int k)
{
    for (;;) {
        int64_t moved, earliest, redis_now;
        if (store_move(t->cmd, k, t->cfg->timer_batch, &moved, &earliest, &redis_now) != DQ_OK) {
            t->next_due[k] = util_mono_ms() + RETRY_MS;
            return;
        }
        int64_t mono = util_mono_ms();
        t->redis_offset = redis_now - mono;
        if (moved)
            log_debug("bucket %d: moved %" PRId64, k, moved);
        if (moved >= t->cfg->timer_batch)
            continue; /* more are due right now */
        t->next_due[k] = earliest < 0 ? NEVER : mono + (earliest - redis_now);
        return;
    }
}

/* (Re)subscribes to wake-ups; after a gap, every held bucket is rechecked
 * since messages may have been missed. */
static void ensure_subscribed(timer_state *t)
{
    if (store_fd(t->sub) >= 0)
        return;
    const char *channels[1] = {t->wake_channel};
    if (store_subscribe(t->sub, channels, 1) != DQ_OK)
        return;
    for (int k = 0; k < t->nbuckets; k++) {
        if (t->held[k])
            t->next_due[k] = 0;
    }
}

/* "<bucket>:<due ms>": an earlier job arrived in a bucket.
 * "rebalance": a timer joined or gave buckets back; maintain now, so buckets
 * change hands at once rather than at the next renewal. */
static void read_wakeups(timer_state *t, int64_t *next_maintain)
{
    char channel[128], payload[64];
    int r;
    while ((r = store_read_message(t->sub, channel, sizeof channel, payload, sizeof payload)) == 0) {
        if (strcmp(payload, "rebalance") == 0) {
            *next_maintain = 0;
            continue;
        }
        char *colon = strchr(payload, ':');
        if (!colon)
            continue;
        int k = atoi(payload);
        int64_t due = strtoll(colon + 1, NULL, 10) - t->redis_offset;
        if (k >= 0 && k < t->nbuckets && t->held[k] && due < t->next_due[k])
            t->next_due[k] = due;
    }
    if (r < 0)
        log_warn("wake-up subscription lost; resubscribing");
}

int timer_run(const dq_config *cfg, int stop_fd)
{
    timer_state t;
    memset(&t, 0, sizeof t);
    t.cfg = cfg;
    t.nbuckets = cfg->buckets;
    t.cmd = store_new(cfg);
    t.sub = store_new(cfg);
    t.held = calloc((size_t)t.nbuckets, sizeof *t.held);
    t.next_due = calloc((size_t)t.nbuckets, sizeof *t.next_due);
    if (!t.cmd || !t.sub || !t.held || !t.next_due)
        return 1;
    if (cfg->timer_id[0])
        snprintf(t.token, sizeof t.token, "%s", cfg->timer_id);
    else
        util_random_hex(t.token, 16);
    snprintf(t.wake_channel, sizeof t.wake_channel, "%s:wake", store_prefix(t.cmd));
    srand((unsigned)util_crc32(t.token, strlen(t.token)));
    drop_all(&t);
    log_info("started; %d buckets, lease %d ms", t.nbuckets, cfg->timer_lease_ms);

    int64_t next_maintain = 0;
    int exit_code = 0;
    for (;;) {
        int64_t now = util_mono_ms();
        if (now >= next_maintain) {
            int rc = maintain(&t);
            if (rc == -2) {
                exit_code = 1;
                break;
            }
            if (rc == 0)
                sweep(&t);
            next_maintain = now + (rc == 0 ? cfg->timer_lease_ms / 3 : RETRY_MS);
        }
        ensure_subscribed(&t);
        int64_t wake = next_maintain;
        for (int k = 0; k < t.nbuckets; k++) {
            if (!t.held[k])
                continue;
            if (t.next_due[k] <= util_mono_ms())
                move_bucket(&t, k);
            if (t.next_due[k] < wake)
                wake = t.next_due[k];
        }
        if (store_fd(t.sub) < 0 && wake > util_mono_ms() + RETRY_MS)
            wake = util_mono_ms() + RETRY_MS; /* retry the subscription soon */
        int64_t timeout = wake - util_mono_ms();
        if (timeout < 0)
            timeout = 0;
        struct pollfd fds[2] = {{stop_fd, POLLIN, 0}, {store_fd(t.sub), POLLIN, 0}};
        int nfds = fds[1].fd >= 0 ? 2 : 1;
        if (poll(fds, (nfds_t)nfds, (int)timeout) < 0)
            continue;
        if (fds[0].revents)
            break;
        if (nfds == 2 && fds[1].revents)
            read_wakeups(&t, &next_maintain);
    }

    /* Hand the buckets over at once rather than after a lease. */
    int64_t released = 0;
    if (store_lock_release(t.cmd, t.token, cfg->timer_lease_ms, t.nbuckets, &released) == DQ_OK)
        log_info("stopped; released %" PRId64 " bucket locks", released);
    else
        log_warn("stopped; could not release bucket locks (they expire with the lease)");
    store_free(t.cmd);
    store_free(t.sub);
    free(t.held);
    free(t.next_due);
    return exit_code;
}
