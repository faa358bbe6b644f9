/* handlers: run one validated request against Redis and write the response
 * body. One handler per command (named in src/commands.def); no FastCGI
 * here. */
#ifndef DQ_HANDLERS_H
#define DQ_HANDLERS_H

#include <stdint.h>

#include "auth.h"
#include "buf.h"
#include "config.h"
#include "request.h"
#include "shard_hints.h"
#include "status.h"
#include "store.h"

typedef struct {
    const dq_config *cfg;
    dq_store *store;           /* the calling thread's Redis connection */
    const dq_auth *auth;       /* NULL: auth is off */
    shard_hints *hints;        /* where ready jobs are (NULL with one shard) */
    const char *authorization; /* this request's Authorization header, or NULL */
    int64_t started_ms;        /* monotonic ms when the request arrived */
    int stopping;              /* the worker is stopping: long-polls answer now */
} dq_handler_ctx;

typedef struct {
    dq_status status;
    int is_text; /* /metrics: Prometheus text rather than JSON */
    int wait;    /* pop found nothing and may still wait: nothing was written;
                    run it again when a job may have become ready */
} dq_response;

/* Runs req and writes the whole response body (success or error) to out,
 * unless the answer is wait. */
dq_response handle_request(dq_handler_ctx *h, const dq_request *req, dq_buf *out);

#endif
