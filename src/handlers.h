/* handlers: run one validated request against Redis and write the response
 * body. One handler per command; no FastCGI here. */
#ifndef DQ_HANDLERS_H
#define DQ_HANDLERS_H

#include "auth.h"
#include "buf.h"
#include "config.h"
#include "request.h"
#include "status.h"
#include "store.h"

typedef struct {
    const dq_config *cfg;
    dq_store *store;
    store_args *args; /* scratch, reused per request */
    const dq_auth *auth;       /* NULL: auth is off */
    const char *authorization; /* this request's Authorization header, or NULL */
    /* Asks the front whether the client went away (nginx closed the
     * connection), so a long-poll stops instead of reserving a job for
     * nobody. NULL: never. */
    int (*client_gone)(void *arg);
    void *client_arg;
} dq_handler_ctx;

typedef struct {
    dq_status status;
    int is_text; /* /metrics: Prometheus text rather than JSON */
} dq_response;

/* Runs req and writes the whole response body (success or error) to out. */
dq_response handle_request(dq_handler_ctx *h, const dq_request *req, dq_buf *out);
/* Writes a failure body: {"success":false,"error":msg,"code":..}. */
void write_error(dq_buf *out, dq_status st, const char *msg);

#endif
