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

/* What became of a request. */
enum {
    CLI_HTTP_ANSWERED = 0,  /* an HTTP answer arrived, whatever its status */
    CLI_HTTP_NOT_SENT = -1, /* nothing reached the server (cannot connect, bad URL) */
    CLI_HTTP_UNKNOWN = -2,  /* sent, but no answer (timed out, connection lost): the
                             * server may have carried it out */
};

/* One request to base_url + path: a GET when body is NULL, else a POST of
 * body[0..len) as application/json. Returns CLI_HTTP_ANSWERED with *status
 * set and the answer appended to out; otherwise CLI_HTTP_NOT_SENT or
 * CLI_HTTP_UNKNOWN with err set. */
int cli_http_request(cli_http *h, const char *path, const char *body, size_t len, long *status,
                     dq_buf *out, char *err, size_t errlen);

#endif
