/* status: outcome -> HTTP status line and protocol code. */
#include "common/status.h"

#include <assert.h>

static const struct {
    const char *line; /* the HTTP status, as FastCGI's Status header takes it */
    const char *code;
    const char *reason; /* a finer stable word beside the contract's code, or NULL */
} table[DQ_STATUS_COUNT] = {
    [DQ_OK] = {"200 OK", "ok"},
    [DQ_BAD_REQUEST] = {"400 Bad Request", "bad_request"},
    [DQ_UNAUTHORIZED] = {"401 Unauthorized", "unauthorized"},
    [DQ_FORBIDDEN] = {"403 Forbidden", "forbidden"},
    [DQ_NOT_FOUND] = {"404 Not Found", "not_found"},
    [DQ_CONFLICT] = {"409 Conflict", "conflict"},
    [DQ_TOO_LARGE] = {"413 Payload Too Large", "too_large"},
    [DQ_UNAVAILABLE] = {"503 Service Unavailable", "unavailable"},
    [DQ_TIMEOUT] = {"504 Gateway Timeout", "timeout"},
    [DQ_INTERNAL] = {"500 Internal Server Error", "internal"},
    [DQ_MISCONFIGURED] = {"500 Internal Server Error", "internal"},
    [DQ_UNKNOWN_COMMAND] = {"400 Bad Request", "bad_request", "unknown_command"},
};

const char *status_line(dq_status s)
{
    assert(s < DQ_STATUS_COUNT);
    return table[s].line;
}

const char *status_code(dq_status s)
{
    assert(s < DQ_STATUS_COUNT);
    return table[s].code;
}

const char *status_reason(dq_status s)
{
    assert(s < DQ_STATUS_COUNT);
    return table[s].reason;
}
