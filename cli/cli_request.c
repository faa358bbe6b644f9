/* cli_request: flags -> request JSON. Every value is written as the user
 * gave it once it is known to be the right kind of JSON, so a number keeps
 * its digits and a body its exact text. */
#include "cli_request.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "cli_json.h"

/* Bodies are at most 64 KiB by default (max_body) and a request at most
 * 1 MiB; reading a little past that lets the server answer 413 itself. */
#define CLI_BODY_FILE_MAX (16u * 1024 * 1024)


static void put_key(dq_buf *out, const char *key, int *first)
{
    if (!*first)
        buf_puts(out, ",");
    *first = 0;
    buf_put_json_string(out, key, strlen(key));
    buf_puts(out, ":");
}

static int put_string(dq_buf *out, cli_field f, const char *s, size_t n, char *err, size_t errlen)
{
    /* The server rejects invalid UTF-8 too, but as "body is not valid
     * JSON", which would not name the flag. */
    if (!json_utf8_valid(s, n)) {
        snprintf(err, errlen, "--%s is not valid UTF-8", cli_field_flag(f));
        return -1;
    }
    buf_put_json_string(out, s, n);
    return 0;
}

/* A JSON number as typed ("30", "1.5", "1e3"); its range is the server's
 * business. */
static int put_number(dq_buf *out, cli_field f, const char *s, char *err, size_t errlen)
{
    /* Leading/trailing blanks are valid JSON around a number; drop them. */
    size_t start = strspn(s, " \t\r\n");
    size_t end = strlen(s);
    while (end > start && strchr(" \t\r\n", s[end - 1]))
        end--;
    double d;
    if (!json_number_syntax(s + start, end - start) ||
        json_number_double(s + start, end - start, &d) < 0) {
        snprintf(err, errlen, "--%s needs a number of %s, not '%s'", cli_field_flag(f),
                 f == CLI_F_RETRIES || f == CLI_F_COUNT || f == CLI_F_PREVIEW ? "times"
                 : f == CLI_F_CONCURRENCY || f == CLI_F_KEY_CONCURRENCY    ? "jobs (or none)"
                 : f == CLI_F_RATE || f == CLI_F_KEY_RATE                  ? "deliveries (or none)"
                 : f == CLI_F_PERIOD || f == CLI_F_KEY_PERIOD || f == CLI_F_KEEP
                     ? "seconds (or none)"
                 : f == CLI_F_LIMIT                                      ? "jobs"
                                                                         : "seconds", s);
        return -1;
    }
    buf_append(out, s + start, end - start);
    return 0;
}

typedef int (*put_item_fn)(dq_buf *out, cli_field f, const char *s, size_t n, char *err,
                           size_t errlen);

/* "a,b,c" -> [a,b,c], each item written by put_item; empty items are kept
 * so the server names them. */
static int put_list_of(dq_buf *out, cli_field f, const char *s, put_item_fn put_item, char *err,
                       size_t errlen)
{
    buf_puts(out, "[");
    for (const char *p = s;; p++) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (p != s)
            buf_puts(out, ",");
        if (put_item(out, f, p, n, err, errlen) < 0)
            return -1;
        if (!comma)
            break;
        p = comma;
    }
    buf_puts(out, "]");
    return 0;
}

/* One backoff step: a number of seconds. */
static int put_step(dq_buf *out, cli_field f, const char *s, size_t n, char *err, size_t errlen)
{
    char item[64];
    if (n >= sizeof item) {
        snprintf(err, errlen, "--%s: a step is too long", cli_field_flag(f));
        return -1;
    }
    memcpy(item, s, n);
    item[n] = '\0';
    return put_number(out, f, item, err, errlen);
}

/* "stepped", or "15,180,600" -> [15,180,600]. */
static int put_backoff(dq_buf *out, const char *s, char *err, size_t errlen)
{
    if (strcmp(s, "stepped") == 0)
        return put_string(out, CLI_F_BACKOFF, s, strlen(s), err, errlen);
    return put_list_of(out, CLI_F_BACKOFF, s, put_step, err, errlen);
}

/* Reads all of path ("-": stdin) into text. */
static int read_file(const char *path, cli_field f, dq_buf *text, char *err, size_t errlen)
{
    int rc = -1;
    int is_stdin = strcmp(path, "-") == 0;
    FILE *in = is_stdin ? stdin : fopen(path, "rb");
    if (!in) {
        snprintf(err, errlen, "--%s: cannot open %s: %s", cli_field_flag(f), path, strerror(errno));
        return -1;
    }
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, in)) > 0) {
        if (text->len + n > CLI_BODY_FILE_MAX) {
            snprintf(err, errlen, "--%s: %s is larger than %u bytes", cli_field_flag(f), path,
                     CLI_BODY_FILE_MAX);
            goto out;
        }
        buf_append(text, chunk, n);
    }
    if (ferror(in)) {
        snprintf(err, errlen, "--%s: cannot read %s: %s", cli_field_flag(f), path, strerror(errno));
        goto out;
    }
    if (!text->data)
        buf_append(text, "", 0); /* an empty file: data must not stay NULL */
    rc = 0;
out:
    if (!is_stdin)
        fclose(in);
    return rc;
}

/* A JSON value as typed; must parse as strict JSON, since it is copied into
 * the request as it is. */
static int put_json(dq_buf *out, cli_field f, const char *s, size_t n, char *err, size_t errlen)
{
    char why[256];
    if (cli_json_valid(s, n, why, sizeof why) < 0) {
        /* why starts "body is not valid JSON: ..." */
        snprintf(err, errlen, "--%s: %s (use --body-string for a plain string)", cli_field_flag(f),
                 why);
        return -1;
    }
    buf_append(out, s, n);
    return 0;
}

static int put_body(dq_buf *out, const cli_args *a, cli_field f, char *err, size_t errlen)
{
    const char *v = a->value[f];
    dq_buf text;
    int rc = -1;
    buf_init(&text);
    switch (f) {
    case CLI_F_BODY:
        rc = put_json(out, f, v, strlen(v), err, errlen);
        break;
    case CLI_F_BODY_STRING:
        rc = put_string(out, f, v, strlen(v), err, errlen);
        break;
    case CLI_F_BODY_FILE:
        if (read_file(v, f, &text, err, errlen) == 0)
            rc = put_json(out, f, text.data, text.len, err, errlen);
        break;
    case CLI_F_BODY_STRING_FILE:
        if (read_file(v, f, &text, err, errlen) == 0)
            rc = put_string(out, f, text.data, text.len, err, errlen);
        break;
    default:
        snprintf(err, errlen, "internal error: --%s is not a body flag", cli_field_flag(f));
        break;
    }
    buf_free(&text);
    return rc;
}

int cli_request_build(const cli_args *a, dq_buf *out, char *err, size_t errlen)
{
    int first = 1;
    buf_puts(out, "{");
    for (int i = 0; i < CLI_F_COUNT_OF; i++) {
        cli_field f = (cli_field)i;
        if (!(a->given & CLI_BIT(f)))
            continue;
        put_key(out, cli_field_name(f), &first);
        int rc;
        switch (f) {
        case CLI_F_TOPIC:
        case CLI_F_ID:
        case CLI_F_URL:
        case CLI_F_CRON:
        case CLI_F_TZ:
        case CLI_F_STATE:
        case CLI_F_CURSOR:
        case CLI_F_KEY:
        case CLI_F_TRACEPARENT:
        case CLI_F_TRACESTATE:
            rc = put_string(out, f, a->value[f], strlen(a->value[f]), err, errlen);
            break;
        case CLI_F_BACKOFF:
            rc = put_backoff(out, a->value[f], err, errlen);
            break;
        case CLI_F_REPLACE: /* a switch */
            buf_puts(out, "true");
            rc = 0;
            break;
        case CLI_F_IDS:
            rc = put_list_of(out, f, a->value[f], put_string, err, errlen);
            break;
        case CLI_F_FINISH:
            /* One id as a string, a comma list as an array: the two forms
             * of pop's finish. */
            if (strchr(a->value[f], ','))
                rc = put_list_of(out, f, a->value[f], put_string, err, errlen);
            else
                rc = put_string(out, f, a->value[f], strlen(a->value[f]), err, errlen);
            break;
        case CLI_F_DELAY:
        case CLI_F_AT:
        case CLI_F_TTR:
        case CLI_F_RETRIES:
        case CLI_F_TIMEOUT:
        case CLI_F_COUNT:
        case CLI_F_EVERY:
        case CLI_F_START:
        case CLI_F_END:
        case CLI_F_PREVIEW:
        case CLI_F_LIMIT:
            rc = put_number(out, f, a->value[f], err, errlen);
            break;
        case CLI_F_CONCURRENCY:
        case CLI_F_RATE:
        case CLI_F_PERIOD:
        case CLI_F_KEY_CONCURRENCY:
        case CLI_F_KEY_RATE:
        case CLI_F_KEY_PERIOD:
        case CLI_F_KEEP:
            /* "none" removes the limit (null); else a number. */
            if (strcmp(a->value[f], "none") == 0) {
                buf_puts(out, "null");
                rc = 0;
            } else {
                rc = put_number(out, f, a->value[f], err, errlen);
            }
            break;
        default:
            rc = put_body(out, a, f, err, errlen);
            break;
        }
        if (rc < 0)
            return -1;
    }
    buf_puts(out, "}");
    return 0;
}
