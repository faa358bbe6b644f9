/* request: protocol parsing and validation (see request.h). */
#include "request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_strict.h"

static const char *const command_names[CMD_COUNT] = {
    [CMD_ADD] = "add",       [CMD_POP] = "pop",         [CMD_FINISH] = "finish",
    [CMD_DELETE] = "delete", [CMD_GET] = "get",         [CMD_TOUCH] = "touch",
    [CMD_RELEASE] = "release", [CMD_BURY] = "bury",     [CMD_KICK] = "kick",
    [CMD_STATS] = "stats",   [CMD_HEALTH] = "health",   [CMD_METRICS] = "metrics",
};

const char *command_name(dq_command c)
{
    return c < CMD_COUNT ? command_names[c] : "unknown";
}

dq_command command_from_name(const char *name, size_t len)
{
    for (int c = 0; c < CMD_COUNT; c++) {
        if (strlen(command_names[c]) == len && memcmp(command_names[c], name, len) == 0)
            return (dq_command)c;
    }
    return CMD_COUNT;
}

int command_is_read_only(dq_command c)
{
    return c == CMD_GET || c == CMD_STATS || c == CMD_HEALTH || c == CMD_METRICS;
}

/* ------------------------------------------------------------------------ */
/* Field rules                                                               */
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

/* Validation context: where we are (for "jobs[3].ttr") and the error. */
typedef struct {
    const char *where; /* "" or "jobs[3]" */
    char *err;
    size_t errlen;
    dq_status status;
} vctx;

static int fail(vctx *v, dq_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(vctx *v, dq_status st, const char *fmt, ...)
{
    char msg[256];
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

static json_object *field(json_object *obj, const char *name, int *present)
{
    json_object *val = NULL;
    *present = json_object_object_get_ex(obj, name, &val);
    return val;
}

static int is_number(json_object *val)
{
    return json_object_is_type(val, json_type_int) || json_object_is_type(val, json_type_double);
}

/* Optional number of seconds in [min_s, max_s], returned in whole ms
 * (rounded to nearest). Returns 1 if present, 0 if absent, -1 on error. */
static int seconds_field(vctx *v, json_object *obj, const char *name, double min_s, double max_s,
                         int64_t *ms)
{
    int present;
    json_object *val = field(obj, name, &present);
    if (!present)
        return 0;
    if (!is_number(val))
        return fail(v, DQ_BAD_REQUEST, "field '%s' must be a number of seconds", name);
    double d = json_object_get_double(val);
    if (!isfinite(d) || d < min_s || d > max_s)
        return fail(v, DQ_BAD_REQUEST, "field '%s' must be between %.15g and %.15g seconds", name, min_s,
                    max_s);
    *ms = llround(d * 1000.0);
    return 1;
}

/* Optional integer in [min, max]. Returns 1 if present, 0 if absent, -1. */
static int int_field(vctx *v, json_object *obj, const char *name, int64_t min, int64_t max,
                     int64_t *out)
{
    int present;
    json_object *val = field(obj, name, &present);
    if (!present)
        return 0;
    if (!json_object_is_type(val, json_type_int))
        return fail(v, DQ_BAD_REQUEST, "field '%s' must be an integer", name);
    /* json-c saturates out-of-range integers, so the bounds still hold. */
    int64_t i = json_object_get_int64(val);
    if (i < min || i > max)
        return fail(v, DQ_BAD_REQUEST, "field '%s' must be an integer from %lld to %lld", name,
                    (long long)min, (long long)max);
    *out = i;
    return 1;
}

/* Optional string; with required set, absence is an error. */
static int string_field(vctx *v, json_object *obj, const char *name, int required,
                        const char **s, size_t *len)
{
    int present;
    json_object *val = field(obj, name, &present);
    if (!present) {
        if (required)
            return fail(v, DQ_BAD_REQUEST, "field '%s' is required", name);
        return 0;
    }
    if (!json_object_is_type(val, json_type_string))
        return fail(v, DQ_BAD_REQUEST, "field '%s' must be a string", name);
    *s = json_object_get_string(val);
    *len = (size_t)json_object_get_string_len(val);
    return 1;
}

static int check_name(vctx *v, const char *what, const char *s, size_t n, size_t max)
{
    if (name_valid(s, n, max))
        return 0;
    return fail(v, DQ_BAD_REQUEST,
                "field '%s' must be 1 to %zu characters of A-Z a-z 0-9 _ . : @ / -", what, max);
}

static int topic_field(vctx *v, json_object *obj, int required, const char **topic)
{
    size_t n = 0;
    int r = string_field(v, obj, "topic", required, topic, &n);
    if (r <= 0)
        return r;
    if (check_name(v, "topic", *topic, n, DQ_TOPIC_MAX) < 0)
        return -1;
    return 1;
}

static int id_value(vctx *v, const char *what, json_object *val, const char **id)
{
    if (!json_object_is_type(val, json_type_string))
        return fail(v, DQ_BAD_REQUEST, "field '%s' must be a string", what);
    *id = json_object_get_string(val);
    return check_name(v, what, *id, (size_t)json_object_get_string_len(val), DQ_ID_MAX);
}

/* ------------------------------------------------------------------------ */
/* Commands                                                                  */
/* ------------------------------------------------------------------------ */

static int parse_job(vctx *v, json_object *obj, const dq_limits *lim, dq_job_spec *job)
{
    int present;
    size_t n;
    if (!json_object_is_type(obj, json_type_object))
        return fail(v, DQ_BAD_REQUEST, "a job must be a JSON object");
    if (topic_field(v, obj, 1, &job->topic) < 0)
        return -1;
    job->id = NULL;
    json_object *idv = field(obj, "id", &present);
    if (present && id_value(v, "id", idv, &job->id) < 0)
        return -1;

    job->delay_ms = 0;
    job->at_ms = -1;
    int has_delay = seconds_field(v, obj, "delay", 0, DQ_DELAY_MAX_MS / 1000.0, &job->delay_ms);
    if (has_delay < 0)
        return -1;
    int has_at = seconds_field(v, obj, "at", 0, 1e11, &job->at_ms);
    if (has_at < 0)
        return -1;
    if (has_delay && has_at)
        return fail(v, DQ_BAD_REQUEST, "fields 'delay' and 'at' cannot both be given");

    job->ttr_ms = lim->default_ttr_ms;
    int has_ttr = seconds_field(v, obj, "ttr", 0.001, DQ_TTR_MAX_MS / 1000.0, &job->ttr_ms);
    if (has_ttr < 0)
        return -1;
    int64_t ttr_upper = 0;
    int has_upper = seconds_field(v, obj, "TTR", 0.001, DQ_TTR_MAX_MS / 1000.0, &ttr_upper);
    if (has_upper < 0)
        return -1;
    if (has_ttr && has_upper)
        return fail(v, DQ_BAD_REQUEST, "fields 'ttr' and 'TTR' cannot both be given");
    if (has_upper)
        job->ttr_ms = ttr_upper;
    if (job->ttr_ms < 1)
        return fail(v, DQ_BAD_REQUEST, "field 'ttr' must be at least 0.001 seconds");

    job->retries = -1;
    if (int_field(v, obj, "retries", 0, DQ_RETRIES_MAX, &job->retries) < 0)
        return -1;

    json_object *body = field(obj, "body", &present);
    if (!present)
        return fail(v, DQ_BAD_REQUEST, "field 'body' is required");
    /* Compact JSON text, so a string stays a string and an object an object. */
    job->body = json_object_to_json_string_length(
        body, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &n);
    job->body_len = n;
    if (n > lim->max_body)
        return fail(v, DQ_TOO_LARGE, "field 'body' is %zu bytes of JSON, more than the limit of %zu",
                    n, lim->max_body);
    return 0;
}

static int parse_add(vctx *v, json_object *root, const dq_limits *lim, dq_request *req)
{
    int present;
    json_object *jobs = field(root, "jobs", &present);
    if (!present) {
        req->jobs = calloc(1, sizeof *req->jobs);
        if (!req->jobs)
            abort();
        req->njobs = 1;
        return parse_job(v, root, lim, &req->jobs[0]);
    }
    if (!json_object_is_type(jobs, json_type_array))
        return fail(v, DQ_BAD_REQUEST, "field 'jobs' must be an array of job objects");
    size_t n = json_object_array_length(jobs);
    if (n < 1 || n > DQ_BATCH_MAX)
        return fail(v, DQ_BAD_REQUEST, "field 'jobs' must hold 1 to %d jobs", DQ_BATCH_MAX);
    req->batch = 1;
    req->jobs = calloc(n, sizeof *req->jobs);
    if (!req->jobs)
        abort();
    req->njobs = n;
    char where[32];
    for (size_t i = 0; i < n; i++) {
        snprintf(where, sizeof where, "jobs[%zu]", i);
        v->where = where;
        if (parse_job(v, json_object_array_get_idx(jobs, i), lim, &req->jobs[i]) < 0)
            return -1;
    }
    v->where = "";
    return 0;
}

/* Splits "a,b" into req->topics, copying into req->scratch. */
static int split_topics(vctx *v, const char *list, size_t len, dq_request *req)
{
    req->scratch = malloc(len + 1);
    req->topics = calloc(DQ_POP_TOPICS_MAX, sizeof *req->topics);
    if (!req->scratch || !req->topics)
        abort();
    memcpy(req->scratch, list, len);
    req->scratch[len] = '\0';
    char *p = req->scratch;
    for (;;) {
        char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (req->ntopics == DQ_POP_TOPICS_MAX)
            return fail(v, DQ_BAD_REQUEST, "field 'topic' may list at most %d topics",
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

static int parse_pop(vctx *v, json_object *root, dq_request *req)
{
    int has_topic, has_topics;
    json_object *topic = field(root, "topic", &has_topic);
    json_object *topics = field(root, "topics", &has_topics);
    if (has_topic && has_topics)
        return fail(v, DQ_BAD_REQUEST, "fields 'topic' and 'topics' cannot both be given");
    if (has_topic) {
        if (!json_object_is_type(topic, json_type_string))
            return fail(v, DQ_BAD_REQUEST, "field 'topic' must be a string");
        if (split_topics(v, json_object_get_string(topic), (size_t)json_object_get_string_len(topic),
                         req) < 0)
            return -1;
    } else if (has_topics) {
        if (!json_object_is_type(topics, json_type_array))
            return fail(v, DQ_BAD_REQUEST, "field 'topics' must be an array of strings");
        size_t n = json_object_array_length(topics);
        if (n < 1 || n > DQ_POP_TOPICS_MAX)
            return fail(v, DQ_BAD_REQUEST, "field 'topics' must hold 1 to %d topics",
                        DQ_POP_TOPICS_MAX);
        req->topics = calloc(n, sizeof *req->topics);
        if (!req->topics)
            abort();
        for (size_t i = 0; i < n; i++) {
            json_object *t = json_object_array_get_idx(topics, i);
            if (!json_object_is_type(t, json_type_string))
                return fail(v, DQ_BAD_REQUEST, "field 'topics' must be an array of strings");
            if (check_name(v, "topics", json_object_get_string(t),
                           (size_t)json_object_get_string_len(t), DQ_TOPIC_MAX) < 0)
                return -1;
            req->topics[req->ntopics++] = json_object_get_string(t);
        }
    } else {
        return fail(v, DQ_BAD_REQUEST, "field 'topic' is required");
    }
    req->timeout_ms = 0;
    if (seconds_field(v, root, "timeout", 0, DQ_POP_TIMEOUT_MAX_MS / 1000, &req->timeout_ms) < 0)
        return -1;
    int64_t count = 0;
    if (int_field(v, root, "count", 1, DQ_POP_COUNT_MAX, &count) < 0)
        return -1;
    req->count = (int)count;
    return 0;
}

static int parse_one_id(vctx *v, json_object *root, dq_request *req)
{
    int present;
    json_object *id = field(root, "id", &present);
    if (!present)
        return fail(v, DQ_BAD_REQUEST, "field 'id' is required");
    req->ids = calloc(1, sizeof *req->ids);
    if (!req->ids)
        abort();
    req->nids = 1;
    return id_value(v, "id", id, &req->ids[0]);
}

/* finish/delete: "id" or a batch "ids". */
static int parse_ids(vctx *v, json_object *root, dq_request *req)
{
    int has_id, has_ids;
    field(root, "id", &has_id);
    json_object *ids = field(root, "ids", &has_ids);
    if (has_id && has_ids)
        return fail(v, DQ_BAD_REQUEST, "fields 'id' and 'ids' cannot both be given");
    if (!has_ids)
        return parse_one_id(v, root, req);
    if (!json_object_is_type(ids, json_type_array))
        return fail(v, DQ_BAD_REQUEST, "field 'ids' must be an array of strings");
    size_t n = json_object_array_length(ids);
    if (n < 1 || n > DQ_BATCH_MAX)
        return fail(v, DQ_BAD_REQUEST, "field 'ids' must hold 1 to %d ids", DQ_BATCH_MAX);
    req->batch = 1;
    req->ids = calloc(n, sizeof *req->ids);
    if (!req->ids)
        abort();
    req->nids = n;
    char what[32];
    for (size_t i = 0; i < n; i++) {
        snprintf(what, sizeof what, "ids[%zu]", i);
        if (id_value(v, what, json_object_array_get_idx(ids, i), &req->ids[i]) < 0)
            return -1;
    }
    return 0;
}

static int parse_optional_topic(vctx *v, json_object *root, int required, dq_request *req)
{
    const char *topic = NULL;
    int r = topic_field(v, root, required, &topic);
    if (r < 0)
        return -1;
    if (r == 1) {
        req->topics = calloc(1, sizeof *req->topics);
        if (!req->topics)
            abort();
        req->topics[0] = topic;
        req->ntopics = 1;
    }
    return 0;
}

static int parse_fields(vctx *v, json_object *root, const dq_limits *lim, dq_request *req)
{
    int64_t n = 1;
    switch (req->cmd) {
    case CMD_ADD:
        return parse_add(v, root, lim, req);
    case CMD_POP:
        return parse_pop(v, root, req);
    case CMD_FINISH:
    case CMD_DELETE:
        return parse_ids(v, root, req);
    case CMD_GET:
    case CMD_TOUCH:
    case CMD_BURY:
        return parse_one_id(v, root, req);
    case CMD_RELEASE:
        req->delay_ms = 0;
        if (parse_one_id(v, root, req) < 0)
            return -1;
        return seconds_field(v, root, "delay", 0, DQ_DELAY_MAX_MS / 1000.0, &req->delay_ms) < 0 ? -1 : 0;
    case CMD_KICK:
        if (parse_optional_topic(v, root, 1, req) < 0)
            return -1;
        if (int_field(v, root, "count", 1, DQ_KICK_MAX, &n) < 0)
            return -1;
        req->count = (int)n;
        return 0;
    case CMD_STATS:
        return parse_optional_topic(v, root, 0, req);
    case CMD_HEALTH:
    case CMD_METRICS:
    case CMD_COUNT:
        return 0;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Query strings (GET /get?id=X, GET /stats?topic=T)                         */
/* ------------------------------------------------------------------------ */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes %XX and '+' in s[0..n) into out (at least n+1 bytes). Returns the
 * decoded length, or -1 on a malformed escape. */
static long url_decode(const char *s, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%') {
            if (i + 2 >= n)
                return -1;
            int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            out[o++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            out[o++] = s[i] == '+' ? ' ' : s[i];
        }
    }
    out[o] = '\0';
    return (long)o;
}

/* Builds a JSON object of string fields from a query string, so GET requests
 * pass through the same validation as POST bodies. A repeated parameter is a
 * duplicate key: 400. */
static json_object *query_to_object(vctx *v, const char *query)
{
    json_object *obj = json_object_new_object();
    if (!obj)
        abort();
    if (!query)
        return obj;
    size_t qlen = strlen(query);
    char *key = malloc(qlen + 1), *val = malloc(qlen + 1);
    if (!key || !val)
        abort();
    const char *p = query;
    while (*p) {
        const char *amp = strchr(p, '&');
        size_t n = amp ? (size_t)(amp - p) : strlen(p);
        if (n > 0) {
            const char *eq = memchr(p, '=', n);
            size_t kn = eq ? (size_t)(eq - p) : n;
            long kl = url_decode(p, kn, key);
            long vl = eq ? url_decode(eq + 1, n - kn - 1, val) : 0;
            if (!eq)
                val[0] = '\0';
            if (kl < 0 || vl < 0) {
                fail(v, DQ_BAD_REQUEST, "query string has a malformed %%-escape");
                goto bad;
            }
            if (!json_utf8_valid(val, (size_t)vl) || !json_utf8_valid(key, (size_t)kl)) {
                fail(v, DQ_BAD_REQUEST, "query string is not valid UTF-8");
                goto bad;
            }
            if (json_object_object_get_ex(obj, key, NULL)) {
                fail(v, DQ_BAD_REQUEST, "query parameter '%.64s' is repeated", key);
                goto bad;
            }
            json_object_object_add(obj, key, json_object_new_string_len(val, (int)vl));
        }
        if (!amp)
            break;
        p = amp + 1;
    }
    free(key);
    free(val);
    return obj;
bad:
    free(key);
    free(val);
    json_object_put(obj);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Entry point                                                               */
/* ------------------------------------------------------------------------ */

static int resolve_command(vctx *v, const char *method, const char *path, json_object *root,
                           dq_command *cmd)
{
    int present;
    json_object *cv = field(root, "command", &present);
    if (present && !json_object_is_type(cv, json_type_string))
        return fail(v, DQ_BAD_REQUEST, "field 'command' must be a string");
    const char *cname = present ? json_object_get_string(cv) : NULL;
    size_t clen = present ? (size_t)json_object_get_string_len(cv) : 0;

    int command_form = path[0] == '\0' || strcmp(path, "/") == 0;
    if (command_form) {
        if (!cname)
            return fail(v, DQ_BAD_REQUEST, "field 'command' is required on POST /");
        *cmd = command_from_name(cname, clen);
        if (*cmd == CMD_COUNT)
            return fail(v, DQ_BAD_REQUEST, "unknown command '%.32s'", cname);
    } else {
        const char *name = path + 1;
        *cmd = command_from_name(name, strlen(name));
        if (*cmd == CMD_COUNT)
            return fail(v, DQ_BAD_REQUEST, "unknown command: no endpoint %.64s", path);
        if (cname && (clen != strlen(name) || memcmp(cname, name, clen) != 0))
            return fail(v, DQ_BAD_REQUEST, "field 'command' ('%.32s') does not match the path %s",
                        cname, path);
    }
    if (strcmp(method, "GET") == 0 && !command_is_read_only(*cmd))
        return fail(v, DQ_BAD_REQUEST, "command '%s' needs POST; GET serves only get, stats, "
                    "health and metrics", command_name(*cmd));
    return 0;
}

dq_status request_parse(const char *method, const char *path, const char *query, const char *body,
                        size_t body_len, const dq_limits *lim, dq_request *req, char *err,
                        size_t errlen)
{
    vctx v = {"", err, errlen, DQ_OK};
    memset(req, 0, sizeof *req);
    err[0] = '\0';
    if (!path)
        path = "/";

    json_object *root = NULL;
    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0) {
        method = "GET";
        if (path[0] == '\0' || strcmp(path, "/") == 0) {
            fail(&v, DQ_BAD_REQUEST, "GET / is not a command; use POST / with a 'command' field");
            return v.status;
        }
        root = query_to_object(&v, query);
        if (!root)
            return v.status;
    } else if (strcmp(method, "POST") == 0) {
        int command_form = path[0] == '\0' || strcmp(path, "/") == 0;
        if (body_len == 0 && !command_form) {
            root = json_object_new_object(); /* POST /stats with no body */
        } else if (json_parse_strict(body ? body : "", body_len, &root, err, errlen) < 0) {
            return DQ_BAD_REQUEST;
        }
        if (!json_object_is_type(root, json_type_object)) {
            json_object_put(root);
            fail(&v, DQ_BAD_REQUEST, "body must be a JSON object");
            return v.status;
        }
    } else {
        fail(&v, DQ_BAD_REQUEST, "method %.16s is not allowed; use POST (or GET for get, stats, "
             "health and metrics)", method);
        return v.status;
    }
    req->root = root;
    if (resolve_command(&v, method, path, root, &req->cmd) < 0 ||
        parse_fields(&v, root, lim, req) < 0) {
        request_free(req);
        return v.status;
    }
    return DQ_OK;
}

void request_free(dq_request *req)
{
    free(req->jobs);
    free(req->ids);
    free(req->topics);
    free(req->scratch);
    json_object_put(req->root);
    memset(req, 0, sizeof *req);
}
