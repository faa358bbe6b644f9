/* request: protocol parsing and validation (see request.h). */
#include "protocol/request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/push_guard.h"
#include "common/util.h"
#include "sched/sched_time.h"

/* ------------------------------------------------------------------------ */
/* The command table                                                         */
/* ------------------------------------------------------------------------ */

typedef dq_field field_id;

/* No field name is longer (key_concurrency); the build checks each. */
#define FIELD_NAME_MAX 15
#define DQ_FIELD(e, name) \
    _Static_assert(sizeof name - 1 <= FIELD_NAME_MAX, "field " name " is over FIELD_NAME_MAX");
#include "protocol/fields.def"
#undef DQ_FIELD

static const char *const field_names[NFIELDS] = {
#define DQ_FIELD(e, name) [F_##e] = name,
#include "protocol/fields.def"
#undef DQ_FIELD
};

/* A command's fields as a set of bits (commands.def's FB). */
#define FB(f) FIELD_BIT(F_##f)

static const struct {
    const char *name;
    int flags;
    field_bits fields;
} commands[CMD_COUNT] = {
#define DQ_COMMAND(e, name, flags, fields, parser, handler) [CMD_##e] = {name, flags, fields},
#include "protocol/commands.def"
#undef DQ_COMMAND
};

const char *command_name(dq_command c)
{
    return c < CMD_COUNT ? commands[c].name : "unknown";
}

dq_command command_from_name(const char *name, size_t len)
{
    for (int c = 0; c < CMD_COUNT; c++) {
        if (strlen(commands[c].name) == len && memcmp(commands[c].name, name, len) == 0)
            return (dq_command)c;
    }
    return CMD_COUNT;
}

int command_flags(dq_command c)
{
    return c < CMD_COUNT ? commands[c].flags : 0;
}

const char *field_name(dq_field f)
{
    return f < NFIELDS ? field_names[f] : "unknown";
}

/* The read-only commands, the ones GET serves, in table order:
 * "get, stats, ..." with `last` (", " or " and ") before the last one. */
static void read_only_names(char *out, size_t outlen, const char *last)
{
    size_t o = 0;
    int left = 0;
    for (int c = 0; c < CMD_COUNT; c++)
        left += (commands[c].flags & CMDF_READ_ONLY) != 0;
    out[0] = '\0';
    for (int c = 0; c < CMD_COUNT && o < outlen; c++) {
        if (!(commands[c].flags & CMDF_READ_ONLY))
            continue;
        left--;
        int n = snprintf(out + o, outlen - o, "%s%s", commands[c].name,
                         left > 1 ? ", " : left == 1 ? last : "");
        o += n > 0 ? (size_t)n : 0;
    }
}

/* ------------------------------------------------------------------------ */
/* Names and quoting                                                         */
/* ------------------------------------------------------------------------ */

static int name_char_ok(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == ':' || c == '@' || c == '/' || c == '-';
}

static int name_valid(const char *s, size_t n, size_t max)
{
    if (n < 1 || n > max)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (!name_char_ok((unsigned char)s[i]))
            return 0;
    }
    return 1;
}

int request_topic_valid(const char *s, size_t n)
{
    return name_valid(s, n, DQ_TOPIC_MAX);
}

int request_id_valid(const char *s, size_t n)
{
    return name_valid(s, n, DQ_ID_MAX);
}

void request_quote_input(char *out, size_t outlen, const char *s, size_t n, size_t max)
{
    size_t o = strlen(out);
    size_t i = 0;
    while (i < n && i < max) {
        unsigned char c = (unsigned char)s[i];
        char piece[8];
        size_t plen, used = 1;
        if (c < 0x20 || c == 0x7f) {
            plen = (size_t)snprintf(piece, sizeof piece, "\\u%04x", c);
        } else if (c < 0x80) {
            piece[0] = (char)c;
            plen = 1;
        } else if ((used = json_utf8_char(s + i, n - i)) > 0) {
            if (i + used > max)
                break; /* cut before a character that does not fit */
            memcpy(piece, s + i, used);
            plen = used;
        } else {
            plen = (size_t)snprintf(piece, sizeof piece, "\\x%02x", c);
            used = 1;
        }
        if (o + plen + 4 > outlen)
            break;
        memcpy(out + o, piece, plen);
        o += plen;
        i += used;
    }
    if (i < n && o + 4 <= outlen) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
}

/* ------------------------------------------------------------------------ */
/* Fields                                                                    */
/* ------------------------------------------------------------------------ */

static field_id field_from_name(const char *s, size_t n)
{
    for (int f = 0; f < NFIELDS; f++) {
        if (strlen(field_names[f]) == n && memcmp(field_names[f], s, n) == 0)
            return (field_id)f;
    }
    return NFIELDS;
}

/* The fields of one JSON object (the request, or one job of a batch), or of
 * a query string. Values are read through the accessors below, which mark
 * them taken; a present field no parser took is refused. */
typedef struct {
    char *text;          /* the mutable text the tokens point into */
    const json_doc *doc; /* NULL: the fields came from a query string */
    uint32_t tok[NFIELDS];
    char *qval[NFIELDS]; /* query form: decoded, NUL-terminated values */
    size_t qlen[NFIELDS];
    field_bits present, taken;
    field_bits allowed; /* the command's fields (commands.def); others are never taken */
} fieldset;

/* Validation context: where we are (for "jobs[3].ttr") and the error. */
typedef struct {
    const char *where; /* "" or "jobs[3]" */
    const char *cmd;   /* command name, for "not a field of" */
    char *err;
    size_t errlen;
    dq_status status;
} vctx;

static int invalid(vctx *v, dq_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int invalid(vctx *v, dq_status st, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* In a batch, "field 'ttr' ..." becomes "field 'jobs[3].ttr' ...". */
    if (!v->where[0])
        snprintf(v->err, v->errlen, "%s", msg);
    else if (strncmp(msg, "field '", 7) == 0)
        snprintf(v->err, v->errlen, "field '%s.%s", v->where, msg + 7);
    else
        snprintf(v->err, v->errlen, "%s: %s", v->where, msg);
    v->status = st;
    return -1;
}

/* "unknown field '<name>'", quoting the client's name safely. */
static int invalid_field_name(vctx *v, const char *what, const char *name, size_t n, const char *tail)
{
    char quoted[200] = "";
    request_quote_input(quoted, sizeof quoted, name, n, 64);
    return invalid(v, DQ_BAD_REQUEST, "%s '%s%s%s'%s", what, v->where, v->where[0] ? "." : "",
                quoted, tail);
}

/* Loads the members of the object at token `obj`. A member whose decoded
 * name is no protocol field is refused at once. */
static int fields_from_object(vctx *v, fieldset *f, char *text, const json_doc *doc, size_t obj)
{
    memset(f, 0, sizeof *f);
    f->allowed = ~(field_bits)0; /* narrowed once the command is known */
    f->text = text;
    f->doc = doc;
    const json_tok *t = doc->toks;
    size_t key = obj + 1;
    for (uint32_t m = 0; m < t[obj].count; m++, key = json_next_member(doc, key)) {
        /* Room for the longest field name with every byte escaped (\uXXXX,
         * 6 bytes for 1), so each spelling of a name means the same field;
         * a longer raw name decodes to more than any field name has. */
        char name[FIELD_NAME_MAX * 6 + 1];
        const json_tok *k = &t[key];
        size_t raw = k->end - k->start;
        field_id id = NFIELDS;
        size_t n = raw;
        if (raw < sizeof name) {
            n = json_string_decode(text, k, name);
            id = field_from_name(name, n);
        }
        if (id == NFIELDS) {
            /* Quote the decoded name; a long one is quoted from its raw text. */
            if (raw < sizeof name)
                return invalid_field_name(v, "unknown field", name, n, "");
            return invalid_field_name(v, "unknown field", text + k->start, raw, "");
        }
        f->present |= FIELD_BIT(id);
        f->tok[id] = (uint32_t)key + 1;
    }
    return 0;
}

/* Refuses a field that is present but was not read by the command. */
static int fields_all_taken(vctx *v, const fieldset *f)
{
    field_bits left = f->present & ~f->taken;
    if (!left)
        return 0;
    for (int id = 0; id < NFIELDS; id++) {
        if (left & (FIELD_BIT(id))) {
            char tail[64];
            snprintf(tail, sizeof tail, " is not a field of %s", v->cmd);
            return invalid_field_name(v, "field", field_names[id], strlen(field_names[id]), tail);
        }
    }
    return 0;
}

/* Marks a field taken; 1 if present. A field outside the command's row is
 * never taken: fields_all_taken refuses it. */
static int take(fieldset *f, field_id id)
{
    if (!((f->allowed >> id) & 1))
        return 0;
    f->taken |= FIELD_BIT(id);
    return (f->present >> id) & 1;
}

static const json_tok *tok_of(const fieldset *f, field_id id)
{
    return &f->doc->toks[f->tok[id]];
}

/* Decodes a string token in place and NUL-terminates it (where its closing
 * quote was). Each token is decoded once. */
static char *string_in_place(char *text, const json_tok *t, size_t *n)
{
    char *s = text + t->start;
    size_t len = t->escaped ? json_string_decode(text, t, s) : (size_t)(t->end - t->start);
    s[len] = '\0';
    *n = len;
    return s;
}

/* Optional string; with required set, absence is an error. Returns 1 if
 * present, 0 if absent, -1 on error. */
static int string_field(vctx *v, fieldset *f, field_id id, int required, const char **s, size_t *n)
{
    const char *name = field_names[id];
    if (!take(f, id)) {
        if (required)
            return invalid(v, DQ_BAD_REQUEST, "field '%s' is required", name);
        return 0;
    }
    if (!f->doc) {
        *s = f->qval[id];
        *n = f->qlen[id];
        return 1;
    }
    const json_tok *t = tok_of(f, id);
    if (t->type != JSON_STRING)
        return invalid(v, DQ_BAD_REQUEST, "field '%s' must be a string", name);
    *s = string_in_place(f->text, t, n);
    return 1;
}

/* The text of a number field (query values must be JSON numbers too). */
static int number_text(vctx *v, fieldset *f, field_id id, const char *rule, const char **s,
                       size_t *n)
{
    if (!f->doc) {
        *s = f->qval[id];
        *n = f->qlen[id];
        if (!json_number_syntax(*s, *n))
            return invalid(v, DQ_BAD_REQUEST, "field '%s' must be %s", field_names[id], rule);
        return 0;
    }
    const json_tok *t = tok_of(f, id);
    if (t->type != JSON_NUMBER)
        return invalid(v, DQ_BAD_REQUEST, "field '%s' must be %s", field_names[id], rule);
    *s = f->text + t->start;
    *n = t->end - t->start;
    return 0;
}

/* Optional number of seconds in [min_s, max_s], returned in whole ms
 * (rounded to nearest). Returns 1 if present, 0 if absent, -1 on error. */
static int seconds_field(vctx *v, fieldset *f, field_id id, double min_s, double max_s, int64_t *ms)
{
    if (!take(f, id))
        return 0;
    const char *s;
    size_t n;
    double d;
    if (number_text(v, f, id, "a number of seconds", &s, &n) < 0)
        return -1;
    if (json_number_double(s, n, &d) < 0 || !isfinite(d) || d < min_s || d > max_s)
        return invalid(v, DQ_BAD_REQUEST, "field '%s' must be between %.15g and %.15g seconds",
                    field_names[id], min_s, max_s);
    *ms = llround(d * 1000.0);
    return 1;
}

/* Optional integer in [min, max]. Returns 1 if present, 0 if absent, -1. */
static int int_field(vctx *v, fieldset *f, field_id id, int64_t min, int64_t max, int64_t *out)
{
    if (!take(f, id))
        return 0;
    const char *s;
    size_t n;
    int64_t i = 0;
    if (number_text(v, f, id, "an integer", &s, &n) < 0)
        return -1;
    int r = json_number_int64(s, n, &i);
    if (r > 0)
        return invalid(v, DQ_BAD_REQUEST, "field '%s' must be an integer", field_names[id]);
    if (r < 0 || i < min || i > max)
        return invalid(v, DQ_BAD_REQUEST, "field '%s' must be an integer from %lld to %lld",
                    field_names[id], (long long)min, (long long)max);
    *out = i;
    return 1;
}

/* Optional JSON boolean (a query value: "true" or "false"). Returns 1 if
 * present, 0 if absent, -1 on error. */
static int bool_field(vctx *v, fieldset *f, field_id id, int *out)
{
    if (!take(f, id))
        return 0;
    if (!f->doc) {
        if (strcmp(f->qval[id], "true") != 0 && strcmp(f->qval[id], "false") != 0)
            return invalid(v, DQ_BAD_REQUEST, "field '%s' must be true or false", field_names[id]);
        *out = f->qval[id][0] == 't';
        return 1;
    }
    const json_tok *t = tok_of(f, id);
    if (t->type != JSON_TRUE && t->type != JSON_FALSE)
        return invalid(v, DQ_BAD_REQUEST, "field '%s' must be true or false (a JSON boolean)",
                       field_names[id]);
    *out = t->type == JSON_TRUE;
    return 1;
}

static int check_name(vctx *v, const char *what, const char *s, size_t n, size_t max)
{
    if (name_valid(s, n, max))
        return 0;
    return invalid(v, DQ_BAD_REQUEST,
                "field '%s' must be 1 to %zu characters of A-Z a-z 0-9 _ . : @ / -", what, max);
}

static int topic_field(vctx *v, fieldset *f, int required, const char **topic)
{
    size_t n = 0;
    int r = string_field(v, f, F_TOPIC, required, topic, &n);
    if (r <= 0)
        return r;
    if (check_name(v, "topic", *topic, n, DQ_TOPIC_MAX) < 0)
        return -1;
    return 1;
}

/* An id from a string token (ids arrays) in place. */
static int id_value(vctx *v, const char *what, char *text, const json_tok *t, const char **id)
{
    size_t n;
    if (t->type != JSON_STRING)
        return invalid(v, DQ_BAD_REQUEST, "field '%s' must be a string", what);
    *id = string_in_place(text, t, &n);
    return check_name(v, what, *id, n, DQ_ID_MAX);
}

static int id_field(vctx *v, fieldset *f, int required, const char **id)
{
    size_t n = 0;
    int r = string_field(v, f, F_ID, required, id, &n);
    if (r <= 0)
        return r;
    return check_name(v, "id", *id, n, DQ_ID_MAX) < 0 ? -1 : 1;
}

/* The optional grouping key: the name rules of ids, at most DQ_KEY_MAX. */
static int key_field(vctx *v, fieldset *f, const char **key)
{
    size_t n = 0;
    int r = string_field(v, f, F_KEY, 0, key, &n);
    if (r <= 0)
        return r;
    return check_name(v, "key", *key, n, DQ_KEY_MAX) < 0 ? -1 : 1;
}

/* ------------------------------------------------------------------------ */
/* Trace context (W3C Trace Context)                                         */
/* ------------------------------------------------------------------------ */

/* 1 if s[0..n) is all lowercase hex digits and not all zeros; 0 if they are
 * lowercase hex and all zeros; -1 otherwise. */
static int lower_hex_id(const char *s, size_t n)
{
    int nonzero = 0;
    for (size_t i = 0; i < n; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return -1;
        nonzero |= s[i] != '0';
    }
    return nonzero;
}

/* What is wrong with a traceparent, as the end of a sentence that names
 * it, or NULL when it is one this server takes: version 00 only, lowercase
 * hex (W3C Trace Context, level 1), neither id all zeros. */
static const char *traceparent_problem(const char *s, size_t n)
{
    static const char shape[] = "must be a W3C traceparent of version 00: "
                                "00-<32 hex>-<16 hex>-<2 hex>, in lowercase hex";
    if (n != DQ_TRACEPARENT_LEN || memcmp(s, "00-", 3) != 0 || s[35] != '-' || s[52] != '-' ||
        lower_hex_id(s + 53, 2) < 0)
        return shape;
    int trace_id = lower_hex_id(s + 3, 32), parent_id = lower_hex_id(s + 36, 16);
    if (trace_id < 0 || parent_id < 0)
        return shape;
    if (!trace_id)
        return "must not have a trace id of all zeros (W3C Trace Context)";
    if (!parent_id)
        return "must not have a parent id of all zeros (W3C Trace Context)";
    return NULL;
}

/* What is wrong with a (non-empty) tracestate, or NULL: printable ASCII,
 * since delayq-push sends it on as a header line. */
static const char *tracestate_problem(const char *s, size_t n)
{
    if (n > DQ_TRACESTATE_MAX)
        return "must be at most 512 bytes";
    for (size_t i = 0; i < n; i++) {
        if (s[i] < 0x20 || s[i] > 0x7e)
            return "must be printable ASCII (no control characters)";
    }
    return NULL;
}

/* Checks a trace context from `what` ("field" or "header") into job. An
 * empty tracestate is none, as an empty header carries no state. */
static int check_trace(vctx *v, const char *what, const char *tp, size_t tplen, const char *ts,
                       size_t tslen, dq_job_spec *job)
{
    const char *problem;
    if (ts && tslen == 0)
        ts = NULL;
    if (ts && !tp)
        return invalid(v, DQ_BAD_REQUEST, "%s 'tracestate' needs '%s': a tracestate belongs to a "
                       "traceparent (W3C Trace Context)", what, "traceparent");
    if (tp && (problem = traceparent_problem(tp, tplen)) != NULL)
        return invalid(v, DQ_BAD_REQUEST, "%s 'traceparent' %s", what, problem);
    if (ts && (problem = tracestate_problem(ts, tslen)) != NULL)
        return invalid(v, DQ_BAD_REQUEST, "%s 'tracestate' %s", what, problem);
    job->traceparent = tp;
    job->tracestate = ts;
    return 0;
}

/* A job's optional traceparent and tracestate fields. */
static int trace_fields(vctx *v, fieldset *f, dq_job_spec *job)
{
    const char *tp = NULL, *ts = NULL;
    size_t tplen = 0, tslen = 0;
    if (string_field(v, f, F_TRACEPARENT, 0, &tp, &tplen) < 0 ||
        string_field(v, f, F_TRACESTATE, 0, &ts, &tslen) < 0)
        return -1;
    return check_trace(v, "field", tp, tplen, ts, tslen, job);
}

/* A single add whose job has no trace field takes the request's headers
 * (the fields win: a job with either field takes neither header). A batch
 * takes none: each of its jobs carries its own. Other commands ignore
 * them, as tracing libraries send them on every request. */
static int trace_headers(vctx *v, const dq_headers *h, dq_request *req)
{
    if (!h || req->cmd != CMD_ADD || req->batch)
        return 0;
    dq_job_spec *job = &req->jobs[0];
    if (job->traceparent || job->tracestate)
        return 0;
    const char *tp = h->traceparent && h->traceparent[0] ? h->traceparent : NULL;
    const char *ts = h->tracestate;
    return check_trace(v, "header", tp, tp ? strlen(tp) : 0, ts, ts ? strlen(ts) : 0, job);
}

static void *alloc_array(size_t n, size_t size)
{
    void *p = util_xcalloc(n, size);
    return p;
}

/* ------------------------------------------------------------------------ */
/* Commands                                                                  */
/* ------------------------------------------------------------------------ */

typedef int (*parse_fn)(vctx *v, fieldset *f, const dq_limits *lim, dq_request *req);

/* The required body, kept as the text that was sent: compacted where it
 * stands (a string token's span excludes its quotes). */
static int body_field(vctx *v, fieldset *f, const dq_limits *lim, const char **body, size_t *len)
{
    if (!take(f, F_BODY))
        return invalid(v, DQ_BAD_REQUEST, "field 'body' is required");
    const json_tok *b = tok_of(f, F_BODY);
    size_t start = b->type == JSON_STRING ? b->start - 1 : b->start;
    size_t end = b->type == JSON_STRING ? b->end + 1 : b->end;
    *body = f->text + start;
    *len = json_compact(f->text, start, end, f->text + start);
    if (*len > lim->max_body)
        return invalid(v, DQ_TOO_LARGE, "field 'body' is %zu bytes of JSON, more than the limit of %zu",
                       *len, lim->max_body);
    return 0;
}

static int64_t backoff_steps(const char *text, size_t n);
/* What a job (or each fire of a schedule) does after a failed delivery and
 * where it is delivered: backoff, callback/url, and the retries a callback
 * job defaults to. */
typedef struct {
    const char **backoff;
    size_t *backoff_len;
    const char **url;
    int64_t *cb_timeout_ms;
    int64_t *retries;
} delivery_fields;
static int delivery_field(vctx *v, fieldset *f, const dq_limits *lim, int has_retries,
                          delivery_fields d);

/* "delay" (seconds, default 0) or "at" (Unix seconds; -1 when absent), not
 * both. Returns 1 if one was given, 0 if neither, -1 on error. */
static int due_fields(vctx *v, fieldset *f, int64_t *delay_ms, int64_t *at_ms)
{
    *delay_ms = 0;
    *at_ms = -1;
    int has_delay = seconds_field(v, f, F_DELAY, 0, DQ_DELAY_MAX_MS / 1000.0, delay_ms);
    if (has_delay < 0)
        return -1;
    int has_at = seconds_field(v, f, F_AT, 0, DQ_UNIX_S_MAX, at_ms);
    if (has_at < 0)
        return -1;
    if (has_delay && has_at)
        return invalid(v, DQ_BAD_REQUEST, "fields 'delay' and 'at' cannot both be given");
    return has_delay || has_at;
}

static int parse_job(vctx *v, fieldset *f, const dq_limits *lim, dq_job_spec *job)
{
    if (topic_field(v, f, 1, &job->topic) < 0)
        return -1;
    job->id = NULL;
    if (id_field(v, f, 0, &job->id) < 0)
        return -1;
    job->key = NULL;
    if (key_field(v, f, &job->key) < 0 || trace_fields(v, f, job) < 0)
        return -1;
    /* An upsert names the job it replaces: a generated id is always new. */
    job->replace = 0;
    if (bool_field(v, f, F_REPLACE, &job->replace) < 0)
        return -1;
    if (job->replace && !job->id)
        return invalid(v, DQ_BAD_REQUEST, "field 'replace' needs field 'id': the job to replace");

    if (due_fields(v, f, &job->delay_ms, &job->at_ms) < 0)
        return -1;

    job->ttr_ms = lim->default_ttr_ms;
    int has_ttr = seconds_field(v, f, F_TTR, 0.001, DQ_TTR_MAX_MS / 1000.0, &job->ttr_ms);
    if (has_ttr < 0)
        return -1;
    int64_t ttr_upper = 0;
    int has_upper = seconds_field(v, f, F_TTR_UPPER, 0.001, DQ_TTR_MAX_MS / 1000.0, &ttr_upper);
    if (has_upper < 0)
        return -1;
    if (has_ttr && has_upper)
        return invalid(v, DQ_BAD_REQUEST, "fields 'ttr' and 'TTR' cannot both be given");
    if (has_upper)
        job->ttr_ms = ttr_upper;
    if (job->ttr_ms < 1)
        return invalid(v, DQ_BAD_REQUEST, "field 'ttr' must be at least 0.001 seconds");

    job->retries = -1;
    int has_retries = int_field(v, f, F_RETRIES, 0, DQ_RETRIES_MAX, &job->retries);
    if (has_retries < 0 ||
        delivery_field(v, f, lim, has_retries,
                       (delivery_fields){&job->backoff, &job->backoff_len, &job->url,
                                         &job->cb_timeout_ms, &job->retries}) < 0)
        return -1;

    if (body_field(v, f, lim, &job->body, &job->body_len) < 0)
        return -1;
    return fields_all_taken(v, f);
}

/* Steps in a compact backoff array (its commas plus one). */
static int64_t backoff_steps(const char *text, size_t n)
{
    int64_t steps = 1;
    for (size_t i = 0; i < n; i++)
        steps += text[i] == ',';
    return steps;
}

/* backoff: "stepped", or 1..DQ_BACKOFF_STEPS_MAX numbers of seconds, each
 * 0..DQ_BACKOFF_STEP_MAX_S; kept as its compact JSON text. */
static int backoff_field(vctx *v, fieldset *f, const char **text, size_t *len)
{
    *text = NULL;
    if (!take(f, F_BACKOFF))
        return 0;
    const json_tok *b = tok_of(f, F_BACKOFF);
    if (b->type == JSON_STRING) {
        size_t n;
        const char *name = string_in_place(f->text, b, &n);
        if (n != 7 || memcmp(name, "stepped", 7) != 0)
            return invalid(v, DQ_BAD_REQUEST,
                           "field 'backoff' must be \"stepped\" or an array of seconds");
        *text = DQ_BACKOFF_STEPPED;
        *len = strlen(DQ_BACKOFF_STEPPED);
        return 1;
    }
    if (b->type != JSON_ARRAY || b->count < 1 || b->count > DQ_BACKOFF_STEPS_MAX)
        return invalid(v, DQ_BAD_REQUEST,
                       "field 'backoff' must be \"stepped\" or an array of 1 to %d numbers of seconds",
                       DQ_BACKOFF_STEPS_MAX);
    size_t t = f->tok[F_BACKOFF] + 1;
    for (uint32_t i = 0; i < b->count; i++, t = f->doc->toks[t].skip) {
        const json_tok *e = &f->doc->toks[t];
        double d;
        if (e->type != JSON_NUMBER ||
            json_number_double(f->text + e->start, e->end - e->start, &d) < 0 || !isfinite(d) ||
            d < 0 || d > DQ_BACKOFF_STEP_MAX_S)
            return invalid(v, DQ_BAD_REQUEST,
                           "field 'backoff' must hold numbers of seconds from 0 to %d (item %u)",
                           DQ_BACKOFF_STEP_MAX_S, i);
    }
    *text = f->text + b->start;
    *len = json_compact(f->text, b->start, b->end, f->text + b->start);
    return 1;
}

/* A callback URL: http(s), well formed, and a host push_allow admits. */
static int check_url(vctx *v, const dq_limits *lim, const char *url, size_t n)
{
    dq_url parsed;
    char why[256];
    if (guard_parse_url(url, n, &parsed, why, sizeof why) < 0)
        return invalid(v, DQ_BAD_REQUEST, "%s", why);
    if (!lim->push_allow || !guard_host_allowed(lim->push_allow, parsed.host))
        return invalid(v, DQ_BAD_REQUEST,
                       "field 'callback.url': host '%s' is not allowed by push_allow (loopback, "
                       "private and link-local hosts must be listed explicitly)",
                       parsed.host);
    return 0;
}

/* callback: {"url": ..., "timeout": seconds}, or url alone at the top. */
static int callback_field(vctx *v, fieldset *f, const dq_limits *lim, const char **url,
                          int64_t *timeout_ms)
{
    *url = NULL;
    *timeout_ms = DQ_CALLBACK_TIMEOUT_MS;
    int has_cb = take(f, F_CALLBACK);
    size_t n = 0;
    int has_url = string_field(v, f, F_URL, 0, url, &n);
    if (has_url < 0)
        return -1;
    if (has_cb && has_url)
        return invalid(v, DQ_BAD_REQUEST, "fields 'callback' and 'url' cannot both be given");
    if (has_cb) {
        const json_tok *c = tok_of(f, F_CALLBACK);
        if (c->type != JSON_OBJECT)
            return invalid(v, DQ_BAD_REQUEST,
                           "field 'callback' must be an object {\"url\": ..., \"timeout\": seconds}");
        const char *outer = v->where;
        char where[48];
        snprintf(where, sizeof where, "%s%scallback", outer, outer[0] ? "." : "");
        v->where = where;
        fieldset cf;
        if (fields_from_object(v, &cf, f->text, f->doc, f->tok[F_CALLBACK]) < 0 ||
            string_field(v, &cf, F_URL, 1, url, &n) < 0 ||
            seconds_field(v, &cf, F_TIMEOUT, 0.001, DQ_CALLBACK_TIMEOUT_MAX_MS / 1000.0,
                          timeout_ms) < 0 ||
            fields_all_taken(v, &cf) < 0)
            return -1;
        v->where = outer;
        has_url = 1;
    }
    if (!has_url)
        return 0;
    return check_url(v, lim, *url, n) < 0 ? -1 : 1;
}

static int delivery_field(vctx *v, fieldset *f, const dq_limits *lim, int has_retries,
                          delivery_fields d)
{
    if (backoff_field(v, f, d.backoff, d.backoff_len) < 0)
        return -1;
    int has_callback = callback_field(v, f, lim, d.url, d.cb_timeout_ms);
    if (has_callback <= 0)
        return has_callback;
    if (!*d.backoff) {
        *d.backoff = DQ_BACKOFF_STEPPED;
        *d.backoff_len = strlen(DQ_BACKOFF_STEPPED);
    }
    if (!has_retries) /* one retry per step, then buried */
        *d.retries = backoff_steps(*d.backoff, *d.backoff_len);
    return 1;
}

static int parse_add(vctx *v, fieldset *f, const dq_limits *lim, dq_request *req)
{
    if (!take(f, F_JOBS)) {
        req->jobs = alloc_array(1, sizeof *req->jobs);
        req->njobs = 1;
        return parse_job(v, f, lim, &req->jobs[0]);
    }
    const json_tok *jobs = tok_of(f, F_JOBS);
    if (jobs->type != JSON_ARRAY)
        return invalid(v, DQ_BAD_REQUEST, "field 'jobs' must be an array of job objects");
    if (jobs->count < 1 || jobs->count > DQ_BATCH_MAX)
        return invalid(v, DQ_BAD_REQUEST, "field 'jobs' must hold 1 to %d jobs", DQ_BATCH_MAX);
    /* The batch form takes its fields from each job, none from the top. */
    if (fields_all_taken(v, f) < 0)
        return -1;
    req->batch = 1;
    req->njobs = jobs->count;
    req->jobs = alloc_array(req->njobs, sizeof *req->jobs);
    char where[32];
    size_t t = f->tok[F_JOBS] + 1;
    for (size_t i = 0; i < req->njobs; i++, t = f->doc->toks[t].skip) {
        snprintf(where, sizeof where, "jobs[%zu]", i);
        v->where = where;
        if (f->doc->toks[t].type != JSON_OBJECT)
            return invalid(v, DQ_BAD_REQUEST, "a job must be a JSON object");
        fieldset jf;
        if (fields_from_object(v, &jf, f->text, f->doc, t) < 0)
            return -1;
        jf.allowed = f->allowed;
        if (parse_job(v, &jf, lim, &req->jobs[i]) < 0)
            return -1;
        req->fields |= jf.present;
    }
    v->where = "";
    return 0;
}

/* Splits "a,b" in place into req->topics. */
static int split_topics(vctx *v, char *list, dq_request *req)
{
    req->topics = alloc_array(DQ_POP_TOPICS_MAX, sizeof *req->topics);
    char *p = list;
    for (;;) {
        char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (req->ntopics == DQ_POP_TOPICS_MAX)
            return invalid(v, DQ_BAD_REQUEST, "field 'topic' may list at most %d topics",
                        DQ_POP_TOPICS_MAX);
        if (check_name(v, "topic", p, n, DQ_TOPIC_MAX) < 0)
            return -1;
        req->topics[req->ntopics++] = p;
        if (!comma)
            return 0;
        *comma = '\0';
        p = comma + 1;
    }
}

/* An array of 1..DQ_BATCH_MAX ids in field `id` into req->ids. */
static int id_array(vctx *v, fieldset *f, field_id id, dq_request *req)
{
    const char *name = field_names[id];
    if (!f->doc)
        return invalid(v, DQ_BAD_REQUEST, "field '%s' needs a JSON body (POST)", name);
    const json_tok *arr = tok_of(f, id);
    if (arr->type != JSON_ARRAY || arr->count < 1 || arr->count > DQ_BATCH_MAX)
        return invalid(v, DQ_BAD_REQUEST, "field '%s' must be an array of 1 to %d ids", name,
                       DQ_BATCH_MAX);
    req->nids = arr->count;
    req->ids = alloc_array(req->nids, sizeof *req->ids);
    char what[32];
    size_t t = f->tok[id] + 1;
    for (size_t i = 0; i < req->nids; i++, t = f->doc->toks[t].skip) {
        snprintf(what, sizeof what, "%s[%zu]", name, i);
        if (id_value(v, what, f->text, &f->doc->toks[t], &req->ids[i]) < 0)
            return -1;
    }
    return 0;
}

/* pop's "finish": one id, or an array of ids, into req->ids. */
static int pop_finish(vctx *v, fieldset *f, dq_request *req)
{
    if (!take(f, F_FINISH))
        return 0;
    if (f->doc && tok_of(f, F_FINISH)->type == JSON_ARRAY)
        return id_array(v, f, F_FINISH, req);
    if (f->doc && tok_of(f, F_FINISH)->type != JSON_STRING)
        return invalid(v, DQ_BAD_REQUEST, "field 'finish' must be an id or an array of 1 to %d ids",
                       DQ_BATCH_MAX);
    const char *id;
    size_t n;
    string_field(v, f, F_FINISH, 1, &id, &n);
    if (check_name(v, "finish", id, n, DQ_ID_MAX) < 0)
        return -1;
    req->ids = alloc_array(1, sizeof *req->ids);
    req->ids[0] = id;
    req->nids = 1;
    return 0;
}

static int parse_pop(vctx *v, fieldset *f, const dq_limits *lim, dq_request *req)
{
    (void)lim;
    int has_topic = take(f, F_TOPIC), has_topics = take(f, F_TOPICS);
    if (has_topic && has_topics)
        return invalid(v, DQ_BAD_REQUEST, "fields 'topic' and 'topics' cannot both be given");
    if (has_topic) {
        const char *list;
        size_t n;
        if (string_field(v, f, F_TOPIC, 1, &list, &n) < 0 || split_topics(v, (char *)list, req) < 0)
            return -1;
    } else if (has_topics) {
        const json_tok *arr = tok_of(f, F_TOPICS);
        if (arr->type != JSON_ARRAY)
            return invalid(v, DQ_BAD_REQUEST, "field 'topics' must be an array of strings");
        if (arr->count < 1 || arr->count > DQ_POP_TOPICS_MAX)
            return invalid(v, DQ_BAD_REQUEST, "field 'topics' must hold 1 to %d topics",
                        DQ_POP_TOPICS_MAX);
        req->topics = alloc_array(arr->count, sizeof *req->topics);
        size_t t = f->tok[F_TOPICS] + 1;
        for (uint32_t i = 0; i < arr->count; i++, t = f->doc->toks[t].skip) {
            const json_tok *e = &f->doc->toks[t];
            size_t n;
            if (e->type != JSON_STRING)
                return invalid(v, DQ_BAD_REQUEST, "field 'topics' must be an array of strings");
            const char *topic = string_in_place(f->text, e, &n);
            if (check_name(v, "topics", topic, n, DQ_TOPIC_MAX) < 0)
                return -1;
            req->topics[req->ntopics++] = topic;
        }
    } else {
        return invalid(v, DQ_BAD_REQUEST, "field 'topic' is required");
    }
    req->timeout_ms = 0;
    if (seconds_field(v, f, F_TIMEOUT, 0, DQ_POP_TIMEOUT_MAX_MS / 1000, &req->timeout_ms) < 0)
        return -1;
    int64_t count = 0;
    if (int_field(v, f, F_COUNT, 1, DQ_POP_COUNT_MAX, &count) < 0)
        return -1;
    req->count = (int)count;
    return pop_finish(v, f, req);
}

static int parse_one_id(vctx *v, fieldset *f, const dq_limits *lim, dq_request *req)
{
    (void)lim;
    req->ids = alloc_array(1, sizeof *req->ids);
    req->nids = 1;
    return id_field(v, f, 1, &req->ids[0]) < 0 ? -1 : 0;
}

/* finish/delete (and kick by id): "id" or a batch "ids". */
static int parse_remove(vctx *v, fieldset *f, const dq_limits *lim, dq_request *req)
{
    int has_id = take(f, F_ID), has_ids = take(f, F_IDS);
    if (has_id && has_ids)
        return invalid(v, DQ_BAD_REQUEST, "fields 'id' and 'ids' cannot both be given");
    if (!has_ids)
        return parse_one_id(v, f, lim, req);
    req->batch = 1;
    return id_array(v, f, F_IDS, req);
}

static int parse_release(vctx *v, fieldset *f, const dq_limits *lim, dq_request *req)
{
    req->delay_ms = 0;
    if (parse_one_id(v, f, lim, req) < 0)
        return -1;
    return seconds_field(v, f, F_DELAY, 0, DQ_DELAY_MAX_MS / 1000.0, &req->delay_ms) < 0 ? -1 : 0;
}

static int one_topic(vctx *v, fieldset *f, int required, dq_request *req)
{
    const char *topic = NULL;
    int r = topic_field(v, f, required, &topic);
    if (r < 0)
        return -1;
    if (r == 1) {
        req->topics = alloc_array(1, sizeof *req->topics);
        req->topics[0] = topic;
        req->ntopics = 1;
    }
    return 0;
}

/* kick: a topic's oldest buried jobs ("topic", "count"), or named ones
 * ("id" or "ids", as finish takes them). */
static int parse_kick(vctx *v, fieldset *f, const dq_limits *lim, dq_request *req)
{
    int by_id = (f->present & FIELD_BIT(F_ID)) || (f->present & FIELD_BIT(F_IDS));
    if (by_id) {
        if (f->present & (FIELD_BIT(F_TOPIC) | FIELD_BIT(F_COUNT)))
            return invalid(v, DQ_BAD_REQUEST, "fields 'id'/'ids' name the jobs to kick; they "
                                              "cannot be given with 'topic' or 'count'");
        return parse_remove(v, f, lim, req);
    }
    int64_t n = 1;
    if (one_topic(v, f, 1, req) < 0 || int_field(v, f, F_COUNT, 1, DQ_KICK_MAX, &n) < 0)
        return -1;
    req->count = (int)n;
    return 0;
}

/* reschedule: "id" and a new due time, "delay" (seconds from now) or "at"
 * (Unix seconds). */
static int parse_reschedule(vctx *v, fieldset *f, const dq_limits *lim, dq_request *req)
{
    if (parse_one_id(v, f, lim, req) < 0)
        return -1;
    int given = due_fields(v, f, &req->delay_ms, &req->at_ms);
    if (given < 0)
        return -1;
    if (!given)
        return invalid(v, DQ_BAD_REQUEST, "field 'delay' or 'at' is required");
    return 0;
}

/* "state": one of a job's four states (purge), or of those and the
 * outcomes a kept record has (jobs: history, when with_records). */
static int state_field(vctx *v, fieldset *f, int required, int with_records, dq_request *req)
{
    static const char *const states[] = {"delay", "ready", "reserved", "buried", "finished",
                                         "deleted"};
    size_t n = 0;
    if (string_field(v, f, F_STATE, required, &req->state, &n) < 0)
        return -1;
    if (!req->state)
        return 0;
    size_t known = with_records ? 6 : 4;
    for (size_t i = 0; i < known; i++) {
        if (strlen(states[i]) == n && memcmp(states[i], req->state, n) == 0)
            return 0;
    }
    return invalid(v, DQ_BAD_REQUEST, with_records
                   ? "field 'state' must be one of delay, ready, reserved, buried, finished, deleted"
                   : "field 'state' must be one of delay, ready, reserved, buried");
}

/* jobs: one page of a topic's jobs in one state. A cursor is the position
 * the previous page ended at, "<score>:<id>" (see src/store/lua/jobs.lua). */
static int parse_jobs(vctx *v, fieldset *f, const dq_limits *lim, dq_request *req)
{
    (void)lim;
    size_t n = 0;
    if (one_topic(v, f, 1, req) < 0 || state_field(v, f, 1, 1, req) < 0)
        return -1;
    int64_t limit = DQ_JOBS_LIMIT_DEFAULT;
    if (int_field(v, f, F_LIMIT, 1, DQ_STATS_LIMIT_MAX, &limit) < 0 ||
        string_field(v, f, F_CURSOR, 0, &req->cursor, &n) < 0)
        return -1;
    req->limit = (int)limit;
    if (!req->cursor)
        return 0;
    /* Up to 18 digits (after a '-': kept records are scored by minus
     * their ended time), ':', an id. */
    size_t sign = req->cursor[0] == '-', digits = sign;
    while (digits < n && req->cursor[digits] >= '0' && req->cursor[digits] <= '9')
        digits++;
    if (digits < sign + 1 || digits > sign + 18 || digits >= n || req->cursor[digits] != ':' ||
        !request_id_valid(req->cursor + digits + 1, n - digits - 1))
        return invalid(v, DQ_BAD_REQUEST,
                       "field 'cursor' must be the cursor a previous page of jobs answered");
    return 0;
}

/* pause / resume: one topic. */
static int parse_pause(vctx *v, fieldset *f, const dq_limits *lim, dq_request *req)
{
    (void)lim;
    return one_topic(v, f, 1, req);
}

/* purge: one topic, and "state" (none: every state). */
static int parse_purge(vctx *v, fieldset *f, const dq_limits *lim, dq_request *req)
{
    (void)lim;
    return one_topic(v, f, 1, req) < 0 || state_field(v, f, 0, 0, req) < 0 ? -1 : 0;
}

static int parse_stats(vctx *v, fieldset *f, const dq_limits *lim, dq_request *req)
{
    (void)lim;
    int64_t limit = DQ_STATS_LIMIT_MAX;
    size_t n;
    if (one_topic(v, f, 0, req) < 0 ||
        int_field(v, f, F_LIMIT, 1, DQ_STATS_LIMIT_MAX, &limit) < 0 ||
        string_field(v, f, F_CURSOR, 0, &req->cursor, &n) < 0)
        return -1;
    if (req->cursor && check_name(v, "cursor", req->cursor, n, DQ_TOPIC_MAX) < 0)
        return -1;
    if (req->ntopics && (req->cursor || (f->present & FIELD_BIT(F_LIMIT))))
        return invalid(v, DQ_BAD_REQUEST, "fields 'cursor' and 'limit' page the list of all topics; "
                                       "they cannot be given with 'topic'");
    req->limit = (int)limit;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Policies                                                                  */
/* ------------------------------------------------------------------------ */

/* Each policy field's protocol field and range (job.h's table). */
static const struct {
    field_id field;
    int64_t min, max, unit;
} policy_fields[DQ_POLICY_NFIELDS] = {
#define DQ_POLICY_ROW(e, name, stored, min, max, unit) [DQ_POLICY_##e] = {F_##e, min, max, unit},
    DQ_POLICY_FIELDS(DQ_POLICY_ROW)
#undef DQ_POLICY_ROW
};

/* policy: a topic, and per field nothing (keep it), null (remove it) or a
 * value in its range: counts are integers, periods and keep seconds. */
static int parse_policy(vctx *v, fieldset *f, const dq_limits *lim, dq_request *req)
{
    (void)lim;
    if (one_topic(v, f, 1, req) < 0)
        return -1;
    for (int i = 0; i < DQ_POLICY_NFIELDS; i++) {
        field_id id = policy_fields[i].field;
        int64_t min = policy_fields[i].min, max = policy_fields[i].max, unit = policy_fields[i].unit;
        req->policy.op[i] = DQ_POLICY_KEEP_VALUE;
        req->policy.value[i] = 0;
        if (!((f->present >> id) & 1))
            continue;
        if (f->doc && tok_of(f, id)->type == JSON_NULL) {
            take(f, id);
            req->policy.op[i] = DQ_POLICY_REMOVE;
            continue;
        }
        int r = unit == 1 ? int_field(v, f, id, min, max, &req->policy.value[i])
                          : seconds_field(v, f, id, (double)min / unit, (double)max / unit,
                                          &req->policy.value[i]);
        if (r < 0)
            return -1;
        if (req->policy.value[i] < min) /* a fraction of a ms rounded to 0 */
            return invalid(v, DQ_BAD_REQUEST, "field '%s' must be at least %.15g seconds",
                           field_names[id], (double)min / unit);
        req->policy.op[i] = DQ_POLICY_SET;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Schedules                                                                 */
/* ------------------------------------------------------------------------ */

/* A schedule id: an id without '@', short enough that "<id>@<seconds>"
 * is an id too. */
static int schedule_id_field(vctx *v, fieldset *f, int required, const char **id)
{
    size_t n = 0;
    int r = string_field(v, f, F_ID, required, id, &n);
    if (r <= 0)
        return r;
    if (check_name(v, "id", *id, n, DQ_SCHEDULE_ID_MAX) < 0)
        return -1;
    if (memchr(*id, DQ_FIRE_SEP, n))
        return invalid(v, DQ_BAD_REQUEST, "field 'id' of a schedule must not contain '@': its "
                                          "fires are the jobs '<id>@<Unix seconds>'");
    return 1;
}

static int parse_schedule(vctx *v, fieldset *f, const dq_limits *lim, dq_request *req)
{
    dq_schedule_spec *sc = &req->schedule;
    size_t n;
    if (schedule_id_field(v, f, 1, &sc->id) < 0 || topic_field(v, f, 1, &sc->topic) < 0)
        return -1;
    req->topics = alloc_array(1, sizeof *req->topics);
    req->topics[0] = sc->topic; /* auth_check: the token must be allowed the topic */
    req->ntopics = 1;

    int has_cron = string_field(v, f, F_CRON, 0, &sc->cron, &n);
    if (has_cron < 0)
        return -1;
    int has_every = int_field(v, f, F_EVERY, 1, SCHED_EVERY_MAX, &sc->every_s);
    if (has_every < 0)
        return -1;
    if (has_cron && has_every)
        return invalid(v, DQ_BAD_REQUEST, "fields 'cron' and 'every' cannot both be given");
    if (!has_cron && !has_every)
        return invalid(v, DQ_BAD_REQUEST, "field 'cron' or 'every' is required");
    if (has_cron) {
        char why[256];
        if (n > CRON_EXPR_MAX)
            return invalid(v, DQ_BAD_REQUEST, "field 'cron' must be at most %d bytes", CRON_EXPR_MAX);
        if (cron_parse(sc->cron, &sc->cron_parsed, why, sizeof why) < 0)
            return invalid(v, DQ_BAD_REQUEST, "field 'cron' is not a cron expression: %s", why);
    } else {
        sc->cron = NULL;
    }
    sc->tz = "UTC";
    int has_tz = string_field(v, f, F_TZ, 0, &sc->tz, &n);
    if (has_tz < 0)
        return -1;
    if (has_tz && (n < 1 || n > TZ_NAME_MAX))
        return invalid(v, DQ_BAD_REQUEST, "field 'tz' must be an IANA time zone name of 1 to %d "
                                          "bytes", TZ_NAME_MAX);

    sc->ttr_ms = lim->default_ttr_ms;
    if (seconds_field(v, f, F_TTR, 0.001, DQ_TTR_MAX_MS / 1000.0, &sc->ttr_ms) < 0)
        return -1;
    if (sc->ttr_ms < 1)
        return invalid(v, DQ_BAD_REQUEST, "field 'ttr' must be at least 0.001 seconds");
    sc->retries = -1;
    int has_retries = int_field(v, f, F_RETRIES, 0, DQ_RETRIES_MAX, &sc->retries);
    if (has_retries < 0 ||
        delivery_field(v, f, lim, has_retries,
                       (delivery_fields){&sc->backoff, &sc->backoff_len, &sc->url,
                                         &sc->cb_timeout_ms, &sc->retries}) < 0)
        return -1;
    sc->start_s = sc->end_s = -1;
    if (int_field(v, f, F_START, 0, DQ_UNIX_S_MAX, &sc->start_s) < 0 ||
        int_field(v, f, F_END, 0, DQ_UNIX_S_MAX, &sc->end_s) < 0)
        return -1;
    if (sc->start_s >= 0 && sc->end_s >= 0 && sc->end_s < sc->start_s)
        return invalid(v, DQ_BAD_REQUEST, "field 'end' must not be before 'start'");

    return body_field(v, f, lim, &sc->body, &sc->body_len);
}

static int parse_unschedule(vctx *v, fieldset *f, const dq_limits *lim, dq_request *req)
{
    (void)lim;
    req->ids = alloc_array(1, sizeof *req->ids);
    req->nids = 1;
    return schedule_id_field(v, f, 1, &req->ids[0]) < 0 ? -1 : 0;
}

/* schedules: all, or one by id, with an optional preview of its fires. */
static int parse_schedules(vctx *v, fieldset *f, const dq_limits *lim, dq_request *req)
{
    (void)lim;
    const char *id = NULL;
    int64_t preview = 0;
    if (schedule_id_field(v, f, 0, &id) < 0 ||
        int_field(v, f, F_PREVIEW, 1, DQ_PREVIEW_MAX, &preview) < 0)
        return -1;
    if (preview && !id)
        return invalid(v, DQ_BAD_REQUEST, "field 'preview' needs 'id': it previews one schedule");
    if (id) {
        req->ids = alloc_array(1, sizeof *req->ids);
        req->ids[0] = id;
        req->nids = 1;
    }
    req->preview = (int)preview;
    return 0;
}

static int parse_none(vctx *v, fieldset *f, const dq_limits *lim, dq_request *req)
{
    (void)v, (void)f, (void)lim, (void)req;
    return 0;
}

static const parse_fn parsers[CMD_COUNT] = {
#define DQ_COMMAND(e, name, flags, fields, parser, handler) [CMD_##e] = parser,
#include "protocol/commands.def"
#undef DQ_COMMAND
};

/* ------------------------------------------------------------------------ */
/* Query strings (GET /get?id=X, GET /stats?topic=T)                         */
/* ------------------------------------------------------------------------ */

/* Decodes %XX and '+' in s[0..n) in place and NUL-terminates. Returns the
 * decoded length, or -1 on a malformed escape. */
static long url_decode(char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%') {
            if (i + 2 >= n)
                return -1;
            int hi = util_hex_digit(s[i + 1]), lo = util_hex_digit(s[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            s[o++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            s[o++] = s[i] == '+' ? ' ' : s[i];
        }
    }
    s[o] = '\0';
    return (long)o;
}

/* Loads the fields of a query string, decoded in a copy the request owns,
 * so GET requests pass through the same validation as POST bodies. A
 * repeated parameter is a duplicate key: 400. */
static int fields_from_query(vctx *v, fieldset *f, const char *query, dq_request *req)
{
    memset(f, 0, sizeof *f);
    f->allowed = ~(field_bits)0; /* narrowed once the command is known */
    if (!query || !*query)
        return 0;
    size_t qlen = strlen(query);
    req->query = util_xmalloc(qlen + 1);
    memcpy(req->query, query, qlen + 1);
    char *p = req->query;
    while (*p) {
        char *amp = strchr(p, '&');
        if (amp)
            *amp = '\0';
        size_t n = strlen(p);
        if (n > 0) {
            char *eq = strchr(p, '=');
            char *val = eq ? eq + 1 : p + n;
            size_t kn = eq ? (size_t)(eq - p) : n;
            long kl = url_decode(p, kn);
            long vl = url_decode(val, strlen(val));
            if (kl < 0 || vl < 0)
                return invalid(v, DQ_BAD_REQUEST, "query string has a malformed %%-escape");
            if (!json_utf8_valid(p, (size_t)kl) || !json_utf8_valid(val, (size_t)vl))
                return invalid(v, DQ_BAD_REQUEST, "query string is not valid UTF-8");
            field_id id = field_from_name(p, (size_t)kl);
            if (id == NFIELDS)
                return invalid_field_name(v, "unknown query parameter", p, (size_t)kl, "");
            if (f->present & (FIELD_BIT(id)))
                return invalid(v, DQ_BAD_REQUEST, "query parameter '%s' is repeated", field_names[id]);
            f->present |= FIELD_BIT(id);
            f->qval[id] = val;
            f->qlen[id] = (size_t)vl;
        }
        if (!amp)
            break;
        p = amp + 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Entry point                                                               */
/* ------------------------------------------------------------------------ */

static int is_command_form(const char *path)
{
    return path[0] == '\0' || strcmp(path, "/") == 0;
}

int request_origin_allowed(const char *origin, const char *host)
{
    if (!origin)
        return 1;
    /* scheme://host[:port]: the scheme is left out, since TLS may end in
     * front of nginx; host and port must be the Host the browser sent. */
    const char *sep = strstr(origin, "://");
    return sep && host && *host && strcasecmp(sep + 3, host) == 0;
}

/* 1 for the path of a public command (health): it takes no fields, and load
 * balancers and probes that append a query string of their own must not
 * read a 400 as down. */
static int public_path(const char *path)
{
    dq_command c = command_from_name(path + 1, strlen(path + 1));
    return c != CMD_COUNT && (command_flags(c) & CMDF_PUBLIC);
}

static int resolve_command(vctx *v, int get, const char *path, fieldset *f, dq_command *cmd)
{
    const char *cname = NULL;
    size_t clen = 0;
    if (string_field(v, f, F_COMMAND, 0, &cname, &clen) < 0)
        return -1;
    char quoted[200] = "";
    if (is_command_form(path)) {
        if (!cname)
            return invalid(v, DQ_BAD_REQUEST, "field 'command' is required on POST /");
        *cmd = command_from_name(cname, clen);
        if (*cmd == CMD_COUNT) {
            request_quote_input(quoted, sizeof quoted, cname, clen, 32);
            return invalid(v, DQ_UNKNOWN_COMMAND, "unknown command '%s'", quoted);
        }
    } else {
        const char *name = path + 1;
        *cmd = command_from_name(name, strlen(name));
        if (*cmd == CMD_COUNT) {
            request_quote_input(quoted, sizeof quoted, path, strlen(path), 64);
            return invalid(v, DQ_UNKNOWN_COMMAND, "unknown command: no endpoint %s", quoted);
        }
        if (cname && (clen != strlen(name) || memcmp(cname, name, clen) != 0)) {
            request_quote_input(quoted, sizeof quoted, cname, clen, 32);
            return invalid(v, DQ_BAD_REQUEST, "field 'command' ('%s') does not match the path /%s",
                        quoted, name);
        }
    }
    if (get && !(command_flags(*cmd) & CMDF_READ_ONLY)) {
        char names[160];
        read_only_names(names, sizeof names, ", ");
        return invalid(v, DQ_BAD_REQUEST, "command '%s' needs POST; GET serves only the read-only "
                       "commands (%s)", command_name(*cmd), names);
    }
    return 0;
}

dq_status request_parse(json_doc *doc, const char *method, const char *path, const char *query,
                        const dq_headers *headers, char *body, size_t body_len,
                        const dq_limits *lim, dq_request *req, char *err, size_t errlen)
{
    vctx v = {"", "", err, errlen, DQ_OK};
    fieldset f;
    memset(req, 0, sizeof *req);
    err[0] = '\0';
    if (!path)
        path = "/";

    int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    if (get) {
        if (is_command_form(path)) {
            invalid(&v, DQ_BAD_REQUEST, "GET / is not a command; use POST / with a 'command' field");
            return v.status;
        }
        if (public_path(path))
            query = NULL; /* a probe's query string (a cache-buster) is not a field */
        if (fields_from_query(&v, &f, query, req) < 0)
            goto bad;
    } else if (strcmp(method, "POST") == 0) {
        if (body_len == 0 && !is_command_form(path)) {
            memset(&f, 0, sizeof f); /* POST /stats with no body */
        } else {
            if (json_scan(doc, body ? body : "", body_len, err, errlen) < 0)
                return DQ_BAD_REQUEST;
            if (doc->toks[0].type != JSON_OBJECT) {
                invalid(&v, DQ_BAD_REQUEST, "body must be a JSON object");
                return v.status;
            }
            if (fields_from_object(&v, &f, body, doc, 0) < 0)
                goto bad;
        }
    } else {
        char quoted[64] = "", names[160];
        request_quote_input(quoted, sizeof quoted, method, strlen(method), 16);
        read_only_names(names, sizeof names, " and ");
        invalid(&v, DQ_BAD_REQUEST, "method %s is not allowed; use POST (or GET for the read-only "
                "commands %s)", quoted, names);
        return v.status;
    }
    if (resolve_command(&v, get, path, &f, &req->cmd) < 0)
        goto bad;
    v.cmd = command_name(req->cmd);
    f.allowed = commands[req->cmd].fields;
    if (parsers[req->cmd](&v, &f, lim, req) < 0 || fields_all_taken(&v, &f) < 0 ||
        trace_headers(&v, headers, req) < 0)
        goto bad;
    req->fields |= f.present;
    return DQ_OK;
bad:
    request_free(req);
    return v.status;
}

void request_free(dq_request *req)
{
    free(req->jobs);
    free(req->ids);
    free(req->topics);
    free(req->query);
    memset(req, 0, sizeof *req);
}
