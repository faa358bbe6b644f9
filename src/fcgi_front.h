/* fcgi_front: the FastCGI side of a worker process. The only module that
 * includes fcgiapp.h. Each of cfg->threads threads accepts requests on the
 * shared listening socket, owns one Redis connection and answers one request
 * at a time, so a long-poll holds only its own thread. */
#ifndef DQ_FCGI_FRONT_H
#define DQ_FCGI_FRONT_H

#include "config.h"

/* Opens the listening socket (host:port, :port or a unix socket path;
 * unix sockets get mode 0666 so nginx workers of any user can connect).
 * Returns the fd, or -1. */
int front_listen(const dq_config *cfg);
/* Runs a worker: starts the threads, waits for SIGTERM/SIGINT, then stops
 * accepting, lets in-flight requests finish (long-polls answer empty) and
 * returns the process exit code. Call with those signals blocked. */
int front_run_worker(const dq_config *cfg, int listen_fd);

#endif
