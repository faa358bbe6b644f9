/* handlers: run one validated request against Redis and write the response
 * body. One handler per command (named in src/protocol/commands.def); no FastCGI
 * here. */
#ifndef DQ_HANDLERS_H
#define DQ_HANDLERS_H

#include <stdint.h>

#include "common/buf.h"
#include "common/config.h"
#include "common/status.h"
#include "fcgi/group.h"
#include "fcgi/shard_hints.h"
#include "protocol/auth.h"
#include "protocol/request.h"
#include "store/store.h"
#include "store/store_ops.h"

typedef struct {
    const dq_config *cfg;
    dq_store *store;           /* the calling thread's Redis connection */
    const dq_auth *auth;       /* NULL: auth is off */
    shard_hints *hints;        /* where ready jobs are (NULL with one shard) */
    dq_group *group;           /* the process's group commit of single-job requests */
    const char *authorization; /* this request's Authorization header, or NULL */
    int64_t started_ms;        /* monotonic ms when the request arrived */
    int stopping;              /* the worker is stopping: long-polls answer now */
    int recheck;               /* a parked long-poll woken by its recheck timer, not a
                                  message: a message may have been lost */
} dq_handler_ctx;

typedef struct {
    dq_status status;
    int is_text; /* /metrics: Prometheus text rather than JSON */
    int wait;    /* pop found nothing and may still wait: nothing was written;
                    run it again when a job may have become ready */
    int64_t wait_ms; /* wait: run it again after this long at most (a topic's
                        `rate` has its next token due then); 0: no such bound */
} dq_response;

/* What a request has done across the runs of a parked long-poll: the
 * finishes of a finish-and-pop happen once, on the first run, and are
 * answered with the job on the last. Zeroed when the request arrives;
 * handle_progress_free() when it ends. */
typedef struct {
    int finish_done;
    store_item *finished; /* one outcome per id in req->ids */
} dq_progress;

/* Runs req and writes the whole response body (success or error) to out,
 * unless the answer is wait. */
dq_response handle_request(dq_handler_ctx *h, const dq_request *req, dq_progress *progress,
                           dq_buf *out);
void handle_progress_free(dq_progress *progress);

#endif
