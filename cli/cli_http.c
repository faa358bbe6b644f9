/* cli_http: libcurl behind a four-function interface. */
#include "cli_http.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longer than nginx's fastcgi_read_timeout (75 s, nginx/delayq-locations.conf)
 * and thus than the longest long-poll (60 s): a slow backend then reaches us
 * as nginx's own 504 "timeout" answer instead of a client-side guess. */
#define CLI_HTTP_TIMEOUT_MS 90000L
#define CLI_HTTP_CONNECT_TIMEOUT_MS 10000L
/* No answer of the protocol comes near this (100 jobs of 64 KiB); a peer
 * that sends more is not a delayq server. */
#define CLI_HTTP_MAX_ANSWER (64u * 1024 * 1024)

struct cli_http {
    CURL *curl;
    struct curl_slist *get_headers;
    struct curl_slist *post_headers; /* the same plus Content-Type */
    char *base;
    char errbuf[CURL_ERROR_SIZE];
};

void cli_http_free(cli_http *h)
{
    if (!h)
        return;
    if (h->curl)
        curl_easy_cleanup(h->curl);
    curl_slist_free_all(h->get_headers);
    curl_slist_free_all(h->post_headers);
    free(h->base);
    free(h);
    curl_global_cleanup();
}

static int add_header(struct curl_slist **list, const char *line)
{
    struct curl_slist *l = curl_slist_append(*list, line);
    if (!l)
        return -1;
    *list = l;
    return 0;
}

/* Adds line to both header lists. */
static int add_common_header(cli_http *h, const char *line)
{
    if (add_header(&h->get_headers, line) < 0 || add_header(&h->post_headers, line) < 0)
        return -1;
    return 0;
}

cli_http *cli_http_new(const char *base_url, const char *token, char *err, size_t errlen)
{
    cli_http *h = NULL;
    char *auth = NULL;

    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(err, errlen, "cannot initialise libcurl");
        return NULL;
    }
    h = calloc(1, sizeof *h);
    if (!h) {
        curl_global_cleanup();
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->base = strdup(base_url);
    h->curl = curl_easy_init();
    if (!h->base || !h->curl)
        goto fail;
    size_t n = strlen(h->base);
    while (n > 0 && h->base[n - 1] == '/')
        h->base[--n] = '\0';

    /* Without an empty Expect, curl asks for "100 Continue" before a body
     * over 1 KiB and waits up to a second for it. */
    if (add_common_header(h, "Expect:") < 0 ||
        add_header(&h->post_headers, "Content-Type: application/json") < 0)
        goto fail;
    if (token) {
        size_t len = strlen("Authorization: Bearer ") + strlen(token) + 1;
        auth = malloc(len);
        if (!auth)
            goto fail;
        snprintf(auth, len, "Authorization: Bearer %s", token);
        if (add_common_header(h, auth) < 0)
            goto fail;
    }
    free(auth);
    return h;

fail:
    free(auth);
    cli_http_free(h);
    snprintf(err, errlen, "cannot set up an HTTP client");
    return NULL;
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *userdata)
{
    dq_buf *out = userdata;
    size_t n = size * nmemb;
    if (out->len + n > CLI_HTTP_MAX_ANSWER)
        return 0; /* makes curl fail the transfer with CURLE_WRITE_ERROR */
    buf_append(out, data, n);
    return n;
}

int cli_http_request(cli_http *h, const char *path, const char *body, size_t len, long *status,
                     dq_buf *out, char *err, size_t errlen)
{
    int rc = CLI_HTTP_NOT_SENT;
    CURL *c = h->curl;

    size_t ulen = strlen(h->base) + strlen(path) + 1;
    char *url = malloc(ulen);
    if (!url) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    snprintf(url, ulen, "%s%s", h->base, path);

    /* The same handle serves GET and POST requests: reset what the previous
     * request set; the connection cache survives a reset. */
    curl_easy_reset(c);
    h->errbuf[0] = '\0';
    if (body) {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h->post_headers);
    } else {
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h->get_headers);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "delayq/" PACKAGE_VERSION);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, h->errbuf);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, CLI_HTTP_TIMEOUT_MS);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, CLI_HTTP_CONNECT_TIMEOUT_MS);
    /* Timeouts by signal would disturb a caller's own handlers. */
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
#if LIBCURL_VERSION_NUM >= 0x075500
    /* A --url of file:// or another scheme is a mistake, not a server. */
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
#endif

    CURLcode res = curl_easy_perform(c);
    if (res != CURLE_OK) {
        snprintf(err, errlen, "%s: %s", url, h->errbuf[0] ? h->errbuf : curl_easy_strerror(res));
        /* Request bytes went out: the server may have acted on them. */
        long sent = 0;
        if (curl_easy_getinfo(c, CURLINFO_REQUEST_SIZE, &sent) == CURLE_OK && sent > 0)
            rc = CLI_HTTP_UNKNOWN;
        goto out;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    rc = CLI_HTTP_ANSWERED;

out:
    free(url);
    return rc;
}
