/* store_migrate: the stored layout of a deployment's data (which keys, of
 * which types: docs/OPERATIONS.md, "Upgrading without losing jobs") and
 * the migration of data of an older layout (src/store/lua/migrate.lua). */
#ifndef DQ_STORE_MIGRATE_H
#define DQ_STORE_MIGRATE_H

#include <stddef.h>

#include "common/config.h"
#include "common/status.h"
#include "store/store.h"

typedef struct {
    int lowest;  /* the oldest layout a shard's data is in; 0 when no shard holds any */
    int highest; /* the newest */
    int known;   /* the layout this delayq reads and writes */
    int unrecorded; /* shards whose data is at `known` but that do not record it yet */
} store_layout_info;

/* Reads every shard's layout in one round. */
dq_status store_layout_read(dq_store *s, store_layout_info *info);

/* Runs one bounded migration step on a shard (at most `limit` entries):
 * *done is 1 once the shard records the known layout; `what` says what is
 * left. A shard already at it is only recorded (one step, done). */
dq_status store_migrate_step(dq_store *s, int shard, int limit, int *done, char *what,
                             size_t whatlen);

/* delayq-fcgi --migrate: every shard, step by step until done, progress
 * logged every few seconds. Returns the exit status (0 when done). */
int store_migrate_run(const dq_config *cfg);

/* At start: 1 (logged) when the data is of a newer layout than this
 * delayq knows, so it must not run. Data of an older layout is logged
 * (requests answer 503 until migrated); data at the known layout that
 * does not record it yet gets it recorded. */
int store_layout_refused(const dq_config *cfg);

#endif
