/* cli_http: the delayq command line's transport, the only includer of
 * libcurl. One curl handle per cli_http, reused for every request so a
 * command that makes several requests keeps one connection. */
#ifndef DQ_CLI_HTTP_H
#define DQ_CLI_HTTP_H

#include <stddef.h>

#include "common/buf.h"

typedef struct cli_http cli_http;

/* base_url: "http://host:port" with or without a trailing '/' (copied).
 * token: sent as "Authorization: Bearer <token>" when not NULL. Returns NULL
 * with err set on failure. Owned by the caller: cli_http_free it. */
cli_http *cli_http_new(const char *base_url, const char *token, char *err, size_t errlen);
void cli_http_free(cli_http *h);

/* One request to base_url + path: a GET when body is NULL, else a POST of
 * body[0..len) as application/json. Returns 0 once any HTTP answer arrived
 * (whatever its status), with *status set and the answer appended to out;
 * returns -1 with err set when no answer arrived (cannot connect, timed out,
 * connection lost). */
int cli_http_request(cli_http *h, const char *path, const char *body, size_t len, long *status,
                     dq_buf *out, char *err, size_t errlen);

#endif
