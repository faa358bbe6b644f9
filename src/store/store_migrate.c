/* store_migrate: stored layout checks and the migration (see
 * store_migrate.h). */
#include "store/store_migrate.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "store/lua_calls.h"

#define MIGRATE_STEP 1000 /* list entries or jobs per call: a few ms of Redis */

dq_status store_layout_read(dq_store *s, store_layout_info *info)
{
    memset(info, 0, sizeof *info);
    int shards = store_shards(s);
    store_batch_every_shard(s, SCRIPT_LAYOUT, NULL, 0, NULL, 0);
    for (int k = 0; k < shards; k++) {
        store_reply *r = NULL;
        dq_status st = store_batch_result(s, (size_t)k, &r, NULL, 0);
        if (st != DQ_OK)
            return st;
        int layout = (int)store_reply_int(store_reply_at(r, LAYOUT_REPLY_STORED));
        info->known = (int)store_reply_int(store_reply_at(r, LAYOUT_REPLY_KNOWN));
        if (layout > 0) {
            if (!info->lowest || layout < info->lowest)
                info->lowest = layout;
            if (layout > info->highest)
                info->highest = layout;
            if (layout == info->known &&
                store_reply_int(store_reply_at(r, LAYOUT_REPLY_RECORDED)) == 0)
                info->unrecorded++;
        }
        store_reply_free(r);
    }
    return DQ_OK;
}

dq_status store_migrate_step(dq_store *s, int shard, int limit, int *done, char *what,
                             size_t whatlen)
{
    store_begin(s, SCRIPT_MIGRATE, shard);
    args_migrate(s, limit);
    store_reply *r = NULL;
    dq_status st = store_run(s, &r, what, whatlen);
    if (st == DQ_OK) {
        *done = store_reply_int(store_reply_at(r, MIGRATE_REPLY_DONE)) == 1;
        const char *w = store_reply_str(store_reply_at(r, MIGRATE_REPLY_LEFT), NULL);
        snprintf(what, whatlen, "%s", w ? w : "");
    }
    store_reply_free(r);
    return st;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int store_migrate_run(const dq_config *cfg)
{
    dq_store *s = store_new(cfg);
    if (!s)
        return 1;
    int code = 0;
    double started = now_s(), reported = started;
    long steps = 0;
    for (int k = 0; k < store_shards(s) && !code; k++) {
        int done = 0;
        while (!done) {
            char what[128];
            dq_status st = store_migrate_step(s, k, MIGRATE_STEP, &done, what, sizeof what);
            if (st != DQ_OK) {
                log_error("migrating shard %s failed (%s); run --migrate again: it goes on "
                          "where it stopped", store_tag(s, k), what);
                code = 1;
                break;
            }
            steps++;
            if (now_s() - reported >= 2) {
                log_info("migrating shard %s: %s", store_tag(s, k), what);
                reported = now_s();
            }
        }
    }
    store_layout_info info;
    if (!code && store_layout_read(s, &info) == DQ_OK)
        log_info("every shard records layout %d (%ld steps, %.1f s)", info.known, steps,
                 now_s() - started);
    store_free(s);
    return code;
}

int store_layout_refused(const dq_config *cfg)
{
    dq_store *s = store_new(cfg);
    if (!s)
        return 1;
    store_layout_info info;
    int refused = 0;
    if (store_layout_read(s, &info) != DQ_OK) {
        /* Redis is not there yet: the functions check on use. */
    } else if (info.highest > info.known) {
        log_error("Redis holds delayq data of stored layout %d, newer than this delayq knows "
                  "(%d): run the release that wrote it (docs/OPERATIONS.md, \"Downgrading\"); "
                  "not starting",
                  info.highest, info.known);
        refused = 1;
    } else if (info.lowest && info.lowest < info.known) {
        log_warn("Redis holds delayq data of stored layout %d; this delayq uses layout %d: "
                 "nothing is served or moved (503) until 'delayq-fcgi --migrate' converts it",
                 info.lowest, info.known);
    } else if (info.unrecorded) {
        for (int k = 0; k < store_shards(s); k++) {
            int done = 0;
            char what[128];
            if (store_migrate_step(s, k, 0, &done, what, sizeof what) != DQ_OK)
                break; /* the functions check on use */
        }
    }
    store_free(s);
    return refused;
}
