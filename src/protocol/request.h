/* request: turn one HTTP request (method, path, query, body) into a
 * validated command, applying every rule of the protocol. Pure: no I/O, no
 * clock, no Redis; a request that fails here has written nothing.
 *
 * The body is parsed in place, once (json_scan): strings the command uses
 * are decoded where they stand and job bodies are compacted where they
 * stand, so the parsed request points into the caller's body buffer, which
 * must outlive it. */
#ifndef DQ_REQUEST_H
#define DQ_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "common/json_scan.h"
#include "common/status.h"
#include "job/job.h"
#include "sched/cron.h"

/* A command's flags (commands.def says what each means). */
#define CMDF_READ_ONLY 1
#define CMDF_PUBLIC 2
#define CMDF_ALL_TOPICS 4
#define CMDF_NAMES_TOPIC 8
#define CMDF_DELETE_RIGHT 16

typedef enum {
#define DQ_COMMAND(e, name, flags, fields, parser, handler) CMD_##e,
#include "protocol/commands.def"
#undef DQ_COMMAND
    CMD_COUNT
} dq_command;

/* Every field name the protocol knows (fields.def). */
typedef enum {
#define DQ_FIELD(e, name) F_##e,
#include "protocol/fields.def"
#undef DQ_FIELD
    NFIELDS
} dq_field;
/* A set of fields as bits: more than 32 fields, so 64 bits. */
typedef uint64_t field_bits;
#define FIELD_BIT(id) ((field_bits)1 << (id))

#define DQ_POP_COUNT_MAX 100
#define DQ_POP_TOPICS_MAX 64
#define DQ_POP_TIMEOUT_MAX_MS 60000
#define DQ_TTR_MAX_MS (86400 * 1000LL)
#define DQ_DELAY_MAX_MS (3652LL * 86400 * 1000) /* ten years, leap days included */
#define DQ_KICK_MAX 10000
#define DQ_RETRIES_MAX 1000000
#define DQ_STATS_LIMIT_MAX 1000
#define DQ_JOBS_LIMIT_DEFAULT 50
#define DQ_BACKOFF_STEPS_MAX 32
#define DQ_BACKOFF_STEP_MAX_S 31536000 /* a year */
#define DQ_BACKOFF_STEPPED "[15,180,600,1800,1800,3600,7200,21600,54000]"
#define DQ_CALLBACK_TIMEOUT_MS 10000
#define DQ_CALLBACK_TIMEOUT_MAX_MS 300000
#define DQ_PREVIEW_MAX 100
#define DQ_UNIX_S_MAX 253402300799LL /* 9999-12-31T23:59:59Z */

typedef struct {
    dq_command cmd;
    field_bits fields; /* every field the request carries, a batch's jobs' included */
    int batch; /* add with "jobs", finish/delete with "ids" */

    dq_job_spec *jobs; /* add: njobs entries */
    size_t njobs;

    const char **ids; /* finish/delete/get/touch/release/bury: nids entries */
    size_t nids;

    const char **topics; /* pop: ntopics; kick/stats: 0 or 1 */
    size_t ntopics;
    int64_t timeout_ms; /* pop */
    int count;          /* pop: how many jobs, 0 for the single-job answer; kick: how many */
    int limit;          /* stats, jobs: the page size */
    int preview;        /* schedules: upcoming fires shown per schedule, 0 for none */
    int64_t delay_ms;   /* release, reschedule */
    int64_t at_ms;      /* reschedule: Unix ms, -1 for none (delay_ms then) */
    const char *state;  /* jobs, purge: delay, ready, reserved or buried (purge: NULL for all) */
    const char *cursor; /* stats: list topics after this one; jobs: "<score>:<id>";
                           NULL from the start */
    dq_schedule_spec schedule; /* schedule (also sets topics[0] for auth_check) */
    dq_policy_spec policy;     /* policy (its topic is topics[0]) */

    /* Owned storage the pointers above point into (besides the body). */
    void *arrays;
    char *query; /* GET: the decoded copy of the query string */
} dq_request;

struct dq_allow;

typedef struct {
    size_t max_body;        /* bytes of one job body */
    int64_t default_ttr_ms; /* ttr when add omits it */
    const struct dq_allow *push_allow; /* where callbacks may go (push_guard.h) */
} dq_limits;

/* The request headers the protocol reads, NULL where absent: W3C Trace
 * Context (traceparent, tracestate), which a single add takes when its job
 * has no trace field. */
typedef struct {
    const char *traceparent;
    const char *tracestate;
} dq_headers;

const char *command_name(dq_command c);
/* Returns the command for a name, or CMD_COUNT if unknown. */
dq_command command_from_name(const char *name, size_t len);
int command_flags(dq_command c);
const char *field_name(dq_field f);

/* 1 when a request may come with this Origin header (NULL: none, as every
 * client but a browser sends) to this Host: only a page of the server's
 * own site (the dashboard) may. A page of another site, or an opaque
 * origin ("null"), could otherwise write through the user's browser, with
 * no token to stop it when auth is off (cross-site request forgery). */
int request_origin_allowed(const char *origin, const char *host);

/* Parses and validates. method: "GET", "HEAD" or "POST"; path: the URI path
 * ("/" or "/<command>"); query: the raw query string or NULL; headers: NULL
 * for none (they must outlive req, like the body); body may be
 * NULL when body_len is 0, and is modified in place. doc is the caller's
 * reusable scanner storage. On DQ_OK, req is filled and must be released
 * with request_free (body must outlive it). Otherwise err holds a sentence
 * that names the field and the rule, and req needs no freeing. */
dq_status request_parse(json_doc *doc, const char *method, const char *path, const char *query,
                        const dq_headers *headers, char *body, size_t body_len,
                        const dq_limits *lim, dq_request *req, char *err, size_t errlen);
void request_free(dq_request *req);

/* 1 if s[0..n) is a valid topic (1..128 bytes of [A-Za-z0-9_.:@/-]). */
int request_topic_valid(const char *s, size_t n);
/* 1 if s[0..n) is a valid id (1..256 bytes of the same characters). */
int request_id_valid(const char *s, size_t n);

/* Appends to out (of outlen bytes, always NUL-terminated) a quotable form
 * of client input: at most max bytes of it, cut at a character boundary,
 * control characters written as \u00XX and bytes that are not UTF-8 as
 * \xNN, so an error sentence quoting it stays valid UTF-8 and printable. */
void request_quote_input(char *out, size_t outlen, const char *s, size_t n, size_t max);

#endif
