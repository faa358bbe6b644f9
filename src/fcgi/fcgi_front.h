/* fcgi_front: one FastCGI connection from nginx and the requests on it.
 * The only module that includes fcgiapp.h. A connection is an object of
 * its own, not tied to a thread: the worker's event loop (worker.c) waits
 * for it to become readable, any thread then reads and answers a request
 * on it, and a long-poll is parked without a thread until it can answer. */
#ifndef DQ_FCGI_FRONT_H
#define DQ_FCGI_FRONT_H

#include <stddef.h>

#include "common/buf.h"
#include "common/config.h"
#include "common/status.h"

typedef struct fcgi_conn fcgi_conn;

/* Initialises libfcgi and opens the listening socket (host:port, :port or
 * a unix socket path; unix sockets get mode 0666 so nginx workers of any
 * user can connect). Returns the fd, or -1. */
int fcgi_listen(const dq_config *cfg);

/* Wraps a connection accepted on the listening socket (a blocking fd). */
fcgi_conn *fcgi_conn_new(int fd);
/* Closes the connection (if open) and frees it; NULL is a no-op. */
void fcgi_conn_free(fcgi_conn *c);
/* The connection's fd, -1 once closed. */
int fcgi_conn_fd(const fcgi_conn *c);

/* Reads the next request's header and parameters from a readable
 * connection. Returns 0, or -1 when nginx closed the connection (or sent
 * garbage): then the connection is closed and only fcgi_conn_free is left. */
int fcgi_next_request(fcgi_conn *c);
/* A request parameter (REQUEST_METHOD, DOCUMENT_URI, HTTP_AUTHORIZATION,
 * ...), or NULL. Valid until fcgi_end_request. */
const char *fcgi_param(fcgi_conn *c, const char *name);
/* Reads the whole request body into out (replacing what it held). Returns
 * 0, or -1 with *st: DQ_TOO_LARGE beyond limit bytes (the rest is read and
 * dropped, so the answer reaches nginx), DQ_BAD_REQUEST when it is shorter
 * than its Content-Length. */
int fcgi_read_body(fcgi_conn *c, dq_buf *out, size_t limit, dq_status *st);
/* Sends the answer: status line, content type, length, body. */
void fcgi_respond(fcgi_conn *c, dq_status st, int is_text, const dq_buf *body);
/* 1 if nginx has closed the connection (its client went away). */
int fcgi_client_gone(fcgi_conn *c);
/* Ends the request. Returns 1 when the connection stays open for the next
 * one (nginx keeps it alive); 0 when it was closed as expected (nginx did
 * not ask to keep it or had hung up, or keep = 0); -1 when it was to stay
 * open but libfcgi saw an error on it and closed it. */
int fcgi_end_request(fcgi_conn *c, int keep);

#endif
