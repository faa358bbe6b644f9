/* cli_output: answers -> text for people. Scripts use --json, which prints
 * the server's answer as it came; this output may change between releases. */
#include "cli_output.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"
#include "job/job.h"

/* ---------------------------------------------------------------- helpers */

static json_object *field(json_object *o, const char *key)
{
    json_object *v = NULL;
    if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, key, &v))
        return NULL;
    return v;
}

static const char *field_str(json_object *o, const char *key, const char *def)
{
    json_object *v = field(o, key);
    return json_object_is_type(v, json_type_string) ? json_object_get_string(v) : def;
}

/* A JSON value as compact JSON text; strings keep their quotes so a body
 * "42" and a body 42 read differently. The text is owned by v. */
static const char *json_text(json_object *v)
{
    if (!v)
        return "null";
    return json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
}

/* Unix milliseconds -> "2026-01-01T00:00:00.000Z" into out (>= 32 bytes);
 * "-" for null. */
static const char *iso_time(json_object *v, char *out, size_t len)
{
    if (!json_object_is_type(v, json_type_int)) {
        snprintf(out, len, "-");
        return out;
    }
    int64_t ms = json_object_get_int64(v);
    if (ms < 0)
        snprintf(out, len, "%" PRId64, ms);
    else
        util_format_utc_ms(ms, out, len);
    return out;
}

/* One "name   value" line of a key/value block. */
static void kv(FILE *out, const char *name, const char *value)
{
    fprintf(out, "%-9s %s\n", name, value);
}

/* ---------------------------------------------------------------- printers */

void cli_out_id(FILE *out, json_object *ans, const char *verb)
{
    const char *id = field_str(ans, "id", "?");
    if (verb)
        fprintf(out, "%s %s\n", verb, id);
    else
        fprintf(out, "%s\n", id);
}

void cli_out_added(FILE *out, json_object *ans)
{
    json_object *replaced = NULL;
    if (!json_object_object_get_ex(ans, "replaced", &replaced)) {
        cli_out_id(out, ans, NULL);
        return;
    }
    cli_out_id(out, ans, json_object_get_boolean(replaced) ? "replaced" : "added");
}

/* A job's body as the server sent it (a json-c tree would round numbers). */
static void print_value(FILE *out, const cli_json *answer, long index)
{
    size_t n = 0;
    const char *v = cli_json_raw(answer, "jobs", index, "value", &n);
    fprintf(out, "%-9s %.*s\n", "value", (int)(v ? n : 4), v ? v : "null");
}

/* A job's grouping key and trace context, for the jobs that have them. */
static void print_key_and_trace(FILE *out, json_object *job)
{
    static const char *const optional[] = {"key", "traceparent", "tracestate"};
    for (size_t i = 0; i < sizeof optional / sizeof optional[0]; i++) {
        const char *v = field_str(job, optional[i], NULL);
        if (v)
            kv(out, optional[i], v);
    }
}

static void print_job(FILE *out, json_object *job, const cli_json *answer, long index)
{
    kv(out, "id", field_str(job, "id", "?"));
    kv(out, "topic", field_str(job, "topic", "?"));
    print_key_and_trace(out, job);
    kv(out, "attempts", json_text(field(job, "attempts")));
    kv(out, "ttr", json_text(field(job, "ttr")));
    print_value(out, answer, index);
}

void cli_out_pop(FILE *out, const cli_json *answer)
{
    json_object *ans = answer->tree;
    json_object *jobs = field(ans, "jobs");
    if (json_object_is_type(jobs, json_type_array)) {
        size_t n = json_object_array_length(jobs);
        if (n == 0)
            fprintf(out, "no job\n");
        for (size_t i = 0; i < n; i++) {
            if (i > 0)
                fprintf(out, "\n");
            print_job(out, json_object_array_get_idx(jobs, i), answer, (long)i);
        }
        return;
    }
    if (!json_object_is_type(field(ans, "id"), json_type_string)) {
        fprintf(out, "no job\n");
        return;
    }
    print_job(out, ans, answer, -1);
}

/* A callback job's attempts, one line each: when, status or error, how
 * long, the decision. */
static void print_deliveries(FILE *out, json_object *job)
{
    json_object *log = field(job, "deliveries");
    size_t n = json_object_is_type(log, json_type_array) ? json_object_array_length(log) : 0;
    for (size_t i = 0; i < n; i++) {
        json_object *d = json_object_array_get_idx(log, i);
        char t[48], line[600];
        const char *error = field_str(d, "error", NULL);
        snprintf(line, sizeof line, "%s  %s%s  %s ms  %s", iso_time(field(d, "at"), t, sizeof t),
                 error ? error : "HTTP ", error ? "" : json_text(field(d, "status")),
                 json_text(field(d, "ms")), field_str(d, "decision", "?"));
        kv(out, "delivery", line);
    }
}

/* A kept record of a finished or deleted job (it has `ended`): its times
 * and attempts; no body, ttr or retries. */
static int is_record(json_object *job)
{
    return field(job, "ended") != NULL;
}

void cli_out_get(FILE *out, const cli_json *answer)
{
    json_object *ans = answer->tree;
    char t[48];
    json_object *retries = field(ans, "retries");
    kv(out, "id", field_str(ans, "id", "?"));
    kv(out, "topic", field_str(ans, "topic", "?"));
    kv(out, "state", field_str(ans, "state", "?"));
    print_key_and_trace(out, ans);
    kv(out, "attempts", json_text(field(ans, "attempts")));
    if (is_record(ans)) {
        kv(out, "due", iso_time(field(ans, "due"), t, sizeof t));
        kv(out, "created", iso_time(field(ans, "created"), t, sizeof t));
        kv(out, "delivered", iso_time(field(ans, "first_delivered"), t, sizeof t));
        kv(out, "ended", iso_time(field(ans, "ended"), t, sizeof t));
        print_deliveries(out, ans);
        return;
    }
    kv(out, "retries", retries ? json_text(retries) : "unlimited");
    kv(out, "ttr", json_text(field(ans, "ttr")));
    kv(out, "due", iso_time(field(ans, "due"), t, sizeof t));
    kv(out, "created", iso_time(field(ans, "created"), t, sizeof t));
    if (field(ans, "first_delivered"))
        kv(out, "delivered", iso_time(field(ans, "first_delivered"), t, sizeof t));
    print_deliveries(out, ans);
    print_value(out, answer, -1);
}

/* One line per item of a batch-shaped list (the answer's member `key`). */
static const char *print_results(FILE *out, json_object *ans, const char *key, const char *verb)
{
    const char *first_failure = NULL;
    json_object *results = field(ans, key);
    size_t n = json_object_is_type(results, json_type_array) ? json_object_array_length(results) : 0;
    for (size_t i = 0; i < n; i++) {
        json_object *r = json_object_array_get_idx(results, i);
        const char *id = field_str(r, "id", "?");
        if (json_object_get_boolean(field(r, "success"))) {
            fprintf(out, "%s %s\n", verb, id);
            continue;
        }
        const char *code = field_str(r, "code", "error");
        fprintf(out, "failed %s: %s (%s)\n", id, field_str(r, "error", "?"), code);
        if (!first_failure)
            first_failure = code;
    }
    return first_failure;
}

const char *cli_out_results(FILE *out, json_object *ans, const char *verb)
{
    return print_results(out, ans, "results", verb);
}

const char *cli_out_finished(FILE *out, json_object *ans, const char *verb)
{
    return print_results(out, ans, "finished", verb);
}

void cli_out_touch(FILE *out, json_object *ans)
{
    char t[48];
    fprintf(out, "touched %s, deadline %s\n", field_str(ans, "id", "?"),
            iso_time(field(ans, "due"), t, sizeof t));
}

void cli_out_release(FILE *out, json_object *ans)
{
    fprintf(out, "released %s, now %s\n", field_str(ans, "id", "?"), field_str(ans, "state", "?"));
}

void cli_out_pause(FILE *out, json_object *ans)
{
    json_object *paused = field(ans, "paused");
    fprintf(out, "%s %s\n", json_object_get_boolean(paused) ? "paused" : "resumed",
            json_object_get_string(field(ans, "topic")));
}

void cli_out_purge(FILE *out, json_object *ans)
{
    fprintf(out, "purged %s jobs of %s\n", json_text(field(ans, "purged")),
            json_object_get_string(field(ans, "topic")));
}

void cli_out_kick(FILE *out, json_object *ans)
{
    fprintf(out, "kicked %s\n", json_text(field(ans, "kicked")));
}

void cli_out_reschedule(FILE *out, json_object *ans)
{
    char t[48];
    const char *state = field_str(ans, "state", "?");
    fprintf(out, "rescheduled %s, now %s", field_str(ans, "id", "?"), state);
    if (json_object_is_type(field(ans, "due"), json_type_int))
        fprintf(out, ", due %s", iso_time(field(ans, "due"), t, sizeof t));
    fputc('\n', out);
}

void cli_out_jobs(FILE *out, const cli_json *answer)
{
    json_object *jobs = field(answer->tree, "jobs");
    size_t n = json_object_is_type(jobs, json_type_array) ? json_object_array_length(jobs) : 0;
    if (n == 0)
        fprintf(out, "no job\n");
    for (size_t i = 0; i < n; i++) {
        json_object *job = json_object_array_get_idx(jobs, i);
        char t[48];
        if (is_record(job)) {
            fprintf(out, "%s  %s  ended %s  attempts %s\n", field_str(job, "id", "?"),
                    field_str(job, "state", "?"), iso_time(field(job, "ended"), t, sizeof t),
                    json_text(field(job, "attempts")));
            continue;
        }
        size_t vn = 0;
        const char *v = cli_json_raw(answer, "jobs", (long)i, "value", &vn);
        fprintf(out, "%s  %s  due %s  attempts %s  value %.*s\n", field_str(job, "id", "?"),
                field_str(job, "state", "?"), iso_time(field(job, "due"), t, sizeof t),
                json_text(field(job, "attempts")), (int)(v ? vn : 4), v ? v : "null");
    }
    const char *cursor = field_str(answer->tree, "cursor", NULL);
    if (cursor)
        fprintf(out, "cursor %s\n", cursor);
}

static const char *const policy_names[] = {
#define POLICY_NAME(e, name, stored, min, max, unit) name,
    DQ_POLICY_FIELDS(POLICY_NAME)
#undef POLICY_NAME
};

void cli_out_policy(FILE *out, json_object *ans)
{
    json_object *pol = field(ans, "policy");
    kv(out, "topic", field_str(ans, "topic", "?"));
    for (size_t i = 0; i < sizeof policy_names / sizeof policy_names[0]; i++) {
        json_object *v = field(pol, policy_names[i]);
        kv(out, policy_names[i], v ? json_text(v) : "-");
    }
}

void cli_out_policies(FILE *out, json_object *ans)
{
    json_object *all = field(ans, "policies");
    if (!json_object_is_type(all, json_type_object) || json_object_object_length(all) == 0)
        fprintf(out, "no policy\n");
    else {
        json_object_object_foreach(all, topic, pol)
        {
            fprintf(out, "%s", topic);
            for (size_t i = 0; i < sizeof policy_names / sizeof policy_names[0]; i++) {
                json_object *v = field(pol, policy_names[i]);
                if (v)
                    fprintf(out, "  %s %s", policy_names[i], json_text(v));
            }
            fprintf(out, "  reserved %s  throttled %s  keys_waiting %s",
                    json_text(field(pol, "reserved")), json_text(field(pol, "throttled")),
                    json_text(field(pol, "keys_waiting")));
            json_object *tokens = field(pol, "tokens");
            if (tokens) /* only with a rate */
                fprintf(out, "  tokens %s", json_text(tokens));
            fputc('\n', out);
        }
    }
    const char *cursor = field_str(ans, "cursor", NULL);
    if (cursor)
        fprintf(out, "cursor %s\n", cursor);
}

void cli_out_health(FILE *out, json_object *ans)
{
    fprintf(out, "ok (redis %s)\n", field_str(ans, "redis", "?"));
}

/* Unix ms as "2026-11-23T03:00:00Z", or "-". */
static void put_time(FILE *out, json_object *ms)
{
    if (!ms || !json_object_is_type(ms, json_type_int)) {
        fputs("-", out);
        return;
    }
    time_t t = (time_t)(json_object_get_int64(ms) / 1000);
    struct tm tm;
    char text[32];
    if (!gmtime_r(&t, &tm) || !strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm)) {
        fputs(json_text(ms), out);
        return;
    }
    fputs(text, out);
}

void cli_out_schedules(FILE *out, json_object *ans)
{
    json_object *list = field(ans, "schedules");
    if (!json_object_is_type(list, json_type_array))
        return;
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        json_object *s = json_object_array_get_idx(list, i);
        json_object *cron = field(s, "cron");
        fprintf(out, "%s  %s  ", field_str(s, "id", "?"), field_str(s, "topic", "?"));
        if (cron)
            fprintf(out, "cron %s", json_object_get_string(cron));
        else
            fprintf(out, "every %ss", json_text(field(s, "every")));
        fprintf(out, "  %s  next ", field_str(s, "tz", "UTC"));
        put_time(out, field(s, "next"));
        fprintf(out, "  missed %s\n", json_text(field(s, "missed")));
        json_object *up = field(s, "upcoming");
        for (size_t k = 0; json_object_is_type(up, json_type_array) &&
                           k < json_object_array_length(up); k++) {
            fputs("  ", out);
            put_time(out, json_object_array_get_idx(up, k));
            fputc('\n', out);
        }
    }
}

void cli_out_error(FILE *out, json_object *ans)
{
    fprintf(out, "delayq: %s (%s)\n", field_str(ans, "error", "request failed"),
            field_str(ans, "code", "unknown"));
}

/* ---------------------------------------------------------------- stats */

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Writes one row: label left-aligned, each column of total's keys right-aligned. */
static void stats_row(FILE *out, const char *label, json_object *counts, json_object *columns,
                      const int *width, int label_width)
{
    fprintf(out, "%-*s", label_width, label);
    int i = 0;
    json_object_object_foreach(columns, name, unused) {
        (void)unused;
        json_object *v = field(counts, name);
        fprintf(out, "  %*s", width[i++], v ? json_text(v) : "0");
    }
    fprintf(out, "\n");
}

void cli_out_stats(FILE *out, json_object *ans)
{
    json_object *topics = field(ans, "topics");
    json_object *total = field(ans, "total");
    const char **names = NULL;
    int *width = NULL;
    if (!json_object_is_type(total, json_type_object))
        return;
    size_t ntopics = json_object_is_type(topics, json_type_object) ? (size_t)json_object_object_length(topics) : 0;
    size_t ncols = (size_t)json_object_object_length(total);
    names = calloc(ntopics + 1, sizeof *names);
    width = calloc(ncols + 1, sizeof *width);
    if (!names || !width)
        goto out;

    /* Columns are total's keys in the server's order, so a counter added
     * to the protocol shows up without a change here. */
    int label_width = (int)strlen("total");
    size_t n = 0;
    if (ntopics) {
        json_object_object_foreach(topics, topic, counts) {
            (void)counts;
            names[n++] = topic;
            if ((int)strlen(topic) > label_width)
                label_width = (int)strlen(topic);
        }
    }
    qsort(names, n, sizeof *names, by_name);
    int col = 0;
    json_object_object_foreach(total, name, tv) {
        width[col] = (int)strlen(name);
        if ((int)strlen(json_text(tv)) > width[col])
            width[col] = (int)strlen(json_text(tv));
        for (size_t i = 0; i < n; i++) {
            json_object *v = field(field(topics, names[i]), name);
            if (v && (int)strlen(json_text(v)) > width[col])
                width[col] = (int)strlen(json_text(v));
        }
        col++;
    }

    fprintf(out, "%-*s", label_width, "topic");
    col = 0;
    json_object_object_foreach(total, hname, hv) {
        (void)hv;
        fprintf(out, "  %*s", width[col++], hname);
    }
    fprintf(out, "\n");
    for (size_t i = 0; i < n; i++)
        stats_row(out, names[i], field(topics, names[i]), total, width, label_width);
    stats_row(out, "total", total, total, width, label_width);

out:
    free(names);
    free(width);
}
