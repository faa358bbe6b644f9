/* status: the one table that maps an outcome to its HTTP status and its
 * stable protocol code (shared/PROTOCOL.md, "Transport"). */
#ifndef DQ_STATUS_H
#define DQ_STATUS_H

typedef enum {
    DQ_OK = 0,
    DQ_BAD_REQUEST,
    DQ_UNAUTHORIZED,
    DQ_FORBIDDEN, /* a browser request from another site's page (Origin) */
    DQ_NOT_FOUND,
    DQ_CONFLICT,
    DQ_TOO_LARGE,
    DQ_UNAVAILABLE,
    DQ_TIMEOUT,
    DQ_INTERNAL,
    DQ_MISCONFIGURED, /* this process disagrees with the deployment (buckets) */
    DQ_UNKNOWN_COMMAND, /* 400 bad_request with reason unknown_command: clients tell an
                         * older server by it */
    DQ_STATUS_COUNT
} dq_status;

/* "200 OK" style text for the FastCGI Status header. */
const char *status_line(dq_status s);
/* Stable protocol code: "bad_request", "not_found", ... ("ok" for DQ_OK). */
const char *status_code(dq_status s);
/* A finer stable word some errors carry beside their code ("reason"), or
 * NULL: the code stays the contract's (PROTOCOL's table). */
const char *status_reason(dq_status s);

#endif
