/* libFuzzer target: the whole pure request path (strict JSON, query strings,
 * every field rule, the trace context headers). Input:
 * "<METHOD> <path>[?query][\t<traceparent header>[\t<tracestate header>]]\n<body>". Any crash,
 * leak or sanitizer report is a bug; a successful parse is re-checked for the
 * invariants the handlers rely on (a job body is itself strict JSON), and
 * every error must be a valid UTF-8 sentence. */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_scan.h"
#include "common/push_guard.h"
#include "protocol/request.h"

static json_doc doc; /* reused across inputs, as a request thread does */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *nl = memchr(data, '\n', size);
    size_t head_len = nl ? (size_t)(nl - (const char *)data) : size;
    if (head_len > 512)
        return 0;
    char head[513];
    memcpy(head, data, head_len);
    head[head_len] = '\0';
    if (strlen(head) != head_len)
        return 0; /* NUL in the request line: not something FastCGI passes */
    size_t body_len = nl ? size - head_len - 1 : 0;
    /* The parser works in place on the body: give it a private copy. */
    char *body = malloc(body_len ? body_len : 1);
    assert(body);
    if (body_len)
        memcpy(body, nl + 1, body_len);

    /* The headers ride after tabs on the request line. */
    dq_headers headers = {NULL, NULL};
    char *tab = strchr(head, '\t');
    if (tab) {
        *tab++ = '\0';
        headers.traceparent = tab;
        if ((tab = strchr(tab, '\t')) != NULL) {
            *tab++ = '\0';
            headers.tracestate = tab;
        }
    }

    char *space = strchr(head, ' ');
    const char *method = "POST";
    char *path = head;
    if (space) {
        *space = '\0';
        method = head;
        path = space + 1;
    }
    char *query = strchr(path, '?');
    if (query)
        *query++ = '\0';

    static dq_allow *allow;
    if (!allow) {
        char aerr[256];
        allow = guard_allow_parse("*, loopback", aerr, sizeof aerr);
        assert(allow);
    }
    dq_limits lim = {65536, 60000, allow};
    dq_request req;
    char err[512];
    dq_status st = request_parse(&doc, method, path, query, &headers, body, body_len, &lim,
                                 &req, err, sizeof err);
    json_doc_trim(&doc);
    if (st != DQ_OK) {
        assert(err[0] != '\0'); /* every failure names its reason */
        assert(json_utf8_valid(err, strlen(err)));
        for (const char *p = err; *p; p++)
            assert((unsigned char)*p >= 0x20);
        free(body);
        return 0;
    }
    assert(req.cmd < CMD_COUNT);
    for (size_t i = 0; i < req.njobs; i++) {
        const dq_job_spec *j = &req.jobs[i];
        assert(request_topic_valid(j->topic, strlen(j->topic)));
        assert(!j->id || request_id_valid(j->id, strlen(j->id)));
        assert(!j->replace || j->id); /* an upsert names the job it replaces */
        assert(j->ttr_ms >= 1 && j->ttr_ms <= DQ_TTR_MAX_MS);
        assert(j->delay_ms >= 0 && j->delay_ms <= DQ_DELAY_MAX_MS);
        assert(j->body_len <= lim.max_body);
        assert(!j->traceparent || strlen(j->traceparent) == DQ_TRACEPARENT_LEN);
        if (j->tracestate) { /* sent on as a header line: printable, bounded */
            assert(j->traceparent);
            size_t n = strlen(j->tracestate);
            assert(n >= 1 && n <= DQ_TRACESTATE_MAX);
            for (size_t c = 0; c < n; c++)
                assert(j->tracestate[c] >= 0x20 && j->tracestate[c] <= 0x7e);
        }
        if (j->url) {
            static dq_url u;
            assert(guard_parse_url(j->url, strlen(j->url), &u, err, sizeof err) == 0);
            assert(j->cb_timeout_ms >= 1 && j->cb_timeout_ms <= DQ_CALLBACK_TIMEOUT_MAX_MS);
            assert(j->backoff); /* callbacks always have a schedule */
        }
        if (j->backoff) {
            json_doc steps;
            json_doc_init(&steps);
            assert(json_scan(&steps, j->backoff, j->backoff_len, err, sizeof err) == 0);
            json_doc_free(&steps);
        }
        json_doc check;
        json_doc_init(&check);
        assert(json_scan(&check, j->body, j->body_len, err, sizeof err) == 0);
        json_doc_free(&check);
    }
    for (size_t i = 0; i < req.nids; i++)
        assert(request_id_valid(req.ids[i], strlen(req.ids[i])));
    for (size_t i = 0; i < req.ntopics; i++)
        assert(request_topic_valid(req.topics[i], strlen(req.topics[i])));
    assert(req.timeout_ms >= 0 && req.timeout_ms <= DQ_POP_TIMEOUT_MAX_MS);
    request_free(&req);
    free(body);
    return 0;
}
