/* push: delayq-push's loop. Reserves due callback jobs in every shard
 * (push_take), POSTs them concurrently with libcurl's multi interface
 * (connection reuse, push_per_host connections per host at most, every
 * connection's address checked against push_allow), and reports each
 * outcome (push_done): 2xx finishes, 410 deletes, 429/503 with Retry-After
 * waits that long, anything else takes the job's next backoff step. */
#ifndef DQ_PUSH_H
#define DQ_PUSH_H

#include "common/config.h"

/* Runs until stop_fd is readable (a signalfd), then stops taking jobs and
 * lets the requests in flight finish (at most their timeout). Returns the
 * exit code. */
int push_run(const dq_config *cfg, int stop_fd);

/* The webhook-id of a job: its id with each '.' written as "%2E", since
 * Standard Webhooks keep '.' out of ids ('%' never occurs in a job id, so
 * the mapping is one to one). out needs 3 * strlen(id) + 1 bytes. */
void push_webhook_id(const char *id, char *out);

#endif
