/* Unit tests for src/protocol/request.c: every protocol rule that needs no Redis
 * (shared/PROTOCOL.md and docs/PROTOCOL.md, "Choices where the contract is
 * silent"). Each rejection checks the status and that the error sentence
 * names the field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/buf.h"
#include "protocol/request.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

static dq_limits lim;
static char err[1024];
static dq_request req;
static json_doc doc;
static char *text; /* the body the parsed request points into */
static int live;   /* req holds a parsed request that must be freed */
/* The headers of the next parse only (WITH_HEADERS sets them), else none. */
static const dq_headers *next_headers;

static void drop(void)
{
    if (live)
        request_free(&req);
    live = 0;
    free(text);
    text = NULL;
}

static int setup(void **state)
{
    (void)state;
    lim.max_body = 65536;
    lim.default_ttr_ms = 60000;
    live = 0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    drop();
    json_doc_free(&doc);
    return 0;
}

/* Parses with the body copied into an exactly sized buffer (no NUL after
 * it, so the parser cannot rely on one), kept until the next parse: the
 * request points into it. */
static dq_status run_n(const char *method, const char *path, const char *query, const char *body,
                       size_t n)
{
    drop();
    if (body) {
        text = malloc(n ? n : 1);
        assert_non_null(text);
        memcpy(text, body, n);
    }
    memset(&req, 0xa5, sizeof req);
    snprintf(err, sizeof err, "untouched");
    const dq_headers *headers = next_headers;
    next_headers = NULL;
    dq_status st = request_parse(&doc, method, path, query, headers, text, n, &lim, &req, err,
                                 sizeof err);
    if (st == DQ_OK)
        live = 1;
    return st;
}

static dq_status run(const char *method, const char *path, const char *query, const char *body)
{
    return run_n(method, path, query, body, body ? strlen(body) : 0);
}

static void check_ok(const char *file, int line, dq_status st, const char *method,
                     const char *path, const char *query, const char *body)
{
    if (st != DQ_OK)
        fail_msg("%s:%d: %s %s%s%s %s: expected OK, got status %d: %s", file, line, method,
                 path ? path : "(null)", query ? "?" : "", query ? query : "", body ? body : "",
                 (int)st, err);
}

/* Checks status want and that err contains every string of the NULL-ended
 * list; also that a failed parse leaves nothing to free. */
static void check_bad(const char *file, int line, dq_status st, dq_status want, const char *what,
                      ...)
{
    if (st != want)
        fail_msg("%s:%d: %s: expected status %d, got %d (error: \"%s\")", file, line, what,
                 (int)want, (int)st, st == DQ_OK ? "" : err);
    if (err[0] == '\0' || strcmp(err, "untouched") == 0)
        fail_msg("%s:%d: %s: no error text", file, line, what);
    va_list ap;
    va_start(ap, what);
    for (const char *w = va_arg(ap, const char *); w; w = va_arg(ap, const char *)) {
        if (!strstr(err, w)) {
            va_end(ap);
            fail_msg("%s:%d: %s: error \"%s\" does not mention \"%s\"", file, line, what, err, w);
        }
    }
    va_end(ap);
    if (req.jobs || req.ids || req.topics || req.query)
        fail_msg("%s:%d: %s: a failed parse left storage in the request", file, line, what);
}

#define OK(method, path, query, body) \
    check_ok(__FILE__, __LINE__, run(method, path, query, body), method, path, query, body)
#define OK_POST(path, body) OK("POST", path, NULL, body)
#define OK_GET(path, query) OK("GET", path, query, NULL)

#define BAD(status, method, path, query, body, ...)                                  \
    check_bad(__FILE__, __LINE__, run(method, path, query, body), status,             \
              body ? body : (query ? query : path), __VA_ARGS__, (const char *)NULL)
#define BAD_POST(path, body, ...) BAD(DQ_BAD_REQUEST, "POST", path, NULL, body, __VA_ARGS__)
#define BAD_GET(path, query, ...) BAD(DQ_BAD_REQUEST, "GET", path, query, NULL, __VA_ARGS__)
#define UNKNOWN_POST(path, body, ...) BAD(DQ_UNKNOWN_COMMAND, "POST", path, NULL, body, __VA_ARGS__)
#define UNKNOWN_GET(path, query, ...) BAD(DQ_UNKNOWN_COMMAND, "GET", path, query, NULL, __VA_ARGS__)
#define LARGE_POST(path, body, ...) BAD(DQ_TOO_LARGE, "POST", path, NULL, body, __VA_ARGS__)

/* n copies of c. The returned string is owned by the caller. */
static char *rep(char c, size_t n)
{
    char *s = malloc(n + 1);
    assert_non_null(s);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

/* printf into a fresh string. The returned string is owned by the caller. */
static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(NULL, 0, f, ap);
    va_end(ap);
    assert_true(n >= 0);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    va_start(ap, f);
    vsnprintf(s, (size_t)n + 1, f, ap);
    va_end(ap);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Names                                                                     */
/* ------------------------------------------------------------------------ */

static void test_command_names(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        dq_command cmd;
        int read_only;
    } all[] = {
        {"add", CMD_ADD, 0},         {"pop", CMD_POP, 0},         {"finish", CMD_FINISH, 0},
        {"delete", CMD_DELETE, 0},   {"get", CMD_GET, 1},         {"touch", CMD_TOUCH, 0},
        {"release", CMD_RELEASE, 0}, {"bury", CMD_BURY, 0},       {"kick", CMD_KICK, 0},
        {"stats", CMD_STATS, 1},     {"health", CMD_HEALTH, 1},   {"metrics", CMD_METRICS, 1},
        {"schedule", CMD_SCHEDULE, 0}, {"unschedule", CMD_UNSCHEDULE, 0},
        {"schedules", CMD_SCHEDULES, 1}, {"jobs", CMD_JOBS, 1},
        {"reschedule", CMD_RESCHEDULE, 0},
        {"pause", CMD_PAUSE, 0}, {"resume", CMD_RESUME, 0},
        {"purge", CMD_PURGE, 0},
        {"policy", CMD_POLICY, 0}, {"policies", CMD_POLICIES, 1},
    };
    assert_int_equal(sizeof all / sizeof all[0], CMD_COUNT);
    for (size_t i = 0; i < CMD_COUNT; i++) {
        assert_int_equal(command_from_name(all[i].name, strlen(all[i].name)), all[i].cmd);
        assert_string_equal(command_name(all[i].cmd), all[i].name);
        assert_int_equal((command_flags(all[i].cmd) & CMDF_READ_ONLY) != 0, all[i].read_only);
    }
    assert_int_equal(command_from_name("ADD", 3), CMD_COUNT);
    assert_int_equal(command_from_name("Pop", 3), CMD_COUNT);
    assert_int_equal(command_from_name("ad", 2), CMD_COUNT);
    assert_int_equal(command_from_name("adds", 4), CMD_COUNT);
    assert_int_equal(command_from_name("", 0), CMD_COUNT);
    assert_int_equal(command_from_name("put", 3), CMD_COUNT);
    /* Only len bytes count. */
    assert_int_equal(command_from_name("addx", 3), CMD_ADD);
    assert_int_equal(command_from_name("stats\0x", 7), CMD_COUNT);
    assert_string_equal(command_name(CMD_COUNT), "unknown");
}

static void test_topic_valid(void **state)
{
    (void)state;
    const char *good = "AZaz09_.:@/-";
    assert_int_equal(request_topic_valid(good, strlen(good)), 1);
    assert_int_equal(request_topic_valid("a", 1), 1);
    assert_int_equal(request_topic_valid("", 0), 0);
    assert_int_equal(request_topic_valid("order.created", 13), 1);
    char *s = rep('t', 129);
    assert_int_equal(request_topic_valid(s, 128), 1);
    assert_int_equal(request_topic_valid(s, 129), 0);
    free(s);
    static const char *const bad[] = {" ", ",", "#", "?", "%", "+", "*", "=", "&", "\"", "\\",
                                      "'", "{", "}", "[", "~", "!", "$", "\t", "\n", "\x7f",
                                      "\xc3\xa9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char t[16];
        snprintf(t, sizeof t, "a%sb", bad[i]);
        if (request_topic_valid(t, strlen(t)))
            fail_msg("topic \"%s\" was accepted", t);
    }
    assert_int_equal(request_topic_valid("a\0b", 3), 0);
    /* Only n bytes count. */
    assert_int_equal(request_topic_valid("ab c", 2), 1);
}

static void test_id_valid(void **state)
{
    (void)state;
    const char *good = "order-42:v1@eu/x_y.z";
    assert_int_equal(request_id_valid(good, strlen(good)), 1);
    assert_int_equal(request_id_valid("", 0), 0);
    char *s = rep('i', 257);
    assert_int_equal(request_id_valid(s, 1), 1);
    assert_int_equal(request_id_valid(s, 256), 1);
    assert_int_equal(request_id_valid(s, 257), 0);
    free(s);
    assert_int_equal(request_id_valid("a b", 3), 0);
    assert_int_equal(request_id_valid("a,b", 3), 0);
    assert_int_equal(request_id_valid("a\0b", 3), 0);
    assert_int_equal(request_id_valid("caf\xc3\xa9", 5), 0);
}

/* ------------------------------------------------------------------------ */
/* Transport: request forms, methods, bodies                                 */
/* ------------------------------------------------------------------------ */

static void test_command_form(void **state)
{
    (void)state;
    OK_POST("/", "{\"command\":\"add\",\"topic\":\"t\",\"body\":1}");
    assert_int_equal(req.cmd, CMD_ADD);
    OK_POST("/", "{\"command\":\"stats\"}");
    assert_int_equal(req.cmd, CMD_STATS);
    OK_POST("/", "{\"command\":\"health\"}");
    assert_int_equal(req.cmd, CMD_HEALTH);
    /* An empty path and no path at all are "/". */
    OK_POST("", "{\"command\":\"metrics\"}");
    assert_int_equal(req.cmd, CMD_METRICS);
    OK_POST(NULL, "{\"command\":\"get\",\"id\":\"x\"}");
    assert_int_equal(req.cmd, CMD_GET);

    BAD_POST("/", "{\"topic\":\"t\",\"body\":1}", "'command'", "required");
    BAD_POST("/", "{}", "'command'");
    UNKNOWN_POST("/", "{\"command\":\"frobnicate\"}", "unknown command", "frobnicate");
    UNKNOWN_POST("/", "{\"command\":\"ADD\",\"topic\":\"t\",\"body\":1}", "unknown command");
    UNKNOWN_POST("/", "{\"command\":\"\"}", "unknown command");
    BAD_POST("/", "{\"command\":1}", "'command'", "string");
    BAD_POST("/", "{\"command\":[\"add\"]}", "'command'");
    BAD_POST("/", "{\"command\":null}", "'command'");
    BAD_POST("/", "{\"Command\":\"stats\"}", "unknown field 'Command'");
}

static void test_path_form(void **state)
{
    (void)state;
    static const struct {
        const char *path;
        dq_command cmd;
        const char *body;
    } all[] = {
        {"/add", CMD_ADD, "{\"topic\":\"t\",\"body\":1}"},
        {"/pop", CMD_POP, "{\"topic\":\"t\"}"},
        {"/finish", CMD_FINISH, "{\"id\":\"x\"}"},
        {"/delete", CMD_DELETE, "{\"id\":\"x\"}"},
        {"/get", CMD_GET, "{\"id\":\"x\"}"},
        {"/touch", CMD_TOUCH, "{\"id\":\"x\"}"},
        {"/release", CMD_RELEASE, "{\"id\":\"x\"}"},
        {"/bury", CMD_BURY, "{\"id\":\"x\"}"},
        {"/kick", CMD_KICK, "{\"topic\":\"t\"}"},
        {"/stats", CMD_STATS, "{}"},
        {"/health", CMD_HEALTH, "{}"},
        {"/metrics", CMD_METRICS, "{}"},
    };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        OK_POST(all[i].path, all[i].body);
        assert_int_equal(req.cmd, all[i].cmd);
        /* A matching command field is allowed. */
        char *b = fmt("{\"command\":\"%s\",%s", all[i].path + 1, all[i].body + 1);
        if (strcmp(all[i].body, "{}") == 0) {
            free(b);
            b = fmt("{\"command\":\"%s\"}", all[i].path + 1);
        }
        OK_POST(all[i].path, b);
        assert_int_equal(req.cmd, all[i].cmd);
        free(b);
    }
}

static void test_path_command_mismatch(void **state)
{
    (void)state;
    BAD_POST("/add", "{\"command\":\"pop\",\"topic\":\"t\",\"body\":1}", "'command'", "/add");
    BAD_POST("/pop", "{\"command\":\"add\",\"topic\":\"t\"}", "'command'", "/pop");
    BAD_POST("/stats", "{\"command\":\"stat\"}", "'command'", "/stats");
    BAD_POST("/stats", "{\"command\":\"statsx\"}", "'command'", "/stats");
    BAD_POST("/stats", "{\"command\":\"STATS\"}", "'command'");
    BAD_POST("/stats", "{\"command\":\"\"}", "'command'");
    BAD_POST("/stats", "{\"command\":7}", "'command'", "string");
}

static void test_unknown_path(void **state)
{
    (void)state;
    UNKNOWN_POST("/frobnicate", "{}", "unknown command", "/frobnicate");
    UNKNOWN_POST("/ADD", "{\"topic\":\"t\",\"body\":1}", "unknown command");
    UNKNOWN_POST("/add/", "{\"topic\":\"t\",\"body\":1}", "unknown command");
    UNKNOWN_POST("//add", "{\"topic\":\"t\",\"body\":1}", "unknown command");
    UNKNOWN_POST("/v1/add", "{\"topic\":\"t\",\"body\":1}", "unknown command");
    BAD_POST("/stats", "{\"command\":\"stats\"}x", "JSON");
    UNKNOWN_POST("/nope", "", "unknown command");
    UNKNOWN_GET("/nope", NULL, "unknown command");
}

static void test_empty_body(void **state)
{
    (void)state;
    /* POST /<command> with an empty body counts as {}. */
    OK_POST("/stats", "");
    assert_int_equal(req.cmd, CMD_STATS);
    assert_int_equal(req.ntopics, 0);
    OK("POST", "/stats", NULL, NULL);
    assert_int_equal(req.cmd, CMD_STATS);
    OK_POST("/health", "");
    assert_int_equal(req.cmd, CMD_HEALTH);
    OK_POST("/metrics", "");
    assert_int_equal(req.cmd, CMD_METRICS);
    /* ... so the command's own rules still apply. */
    BAD_POST("/add", "", "'topic'", "required");
    BAD_POST("/pop", "", "'topic'", "required");
    BAD_POST("/finish", "", "'id'", "required");
    BAD_POST("/kick", "", "'topic'", "required");
    /* POST / with an empty body is 400. */
    BAD_POST("/", "", "JSON");
    BAD(DQ_BAD_REQUEST, "POST", "/", NULL, NULL, "JSON");
    /* Whitespace only is not empty: it is not JSON. */
    BAD_POST("/stats", " ", "JSON");
    BAD_POST("/", "\n", "JSON");
}

static void test_body_must_be_object(void **state)
{
    (void)state;
    BAD_POST("/", "[]", "JSON object");
    BAD_POST("/", "[{\"command\":\"stats\"}]", "JSON object");
    BAD_POST("/stats", "\"stats\"", "JSON object");
    BAD_POST("/stats", "1", "JSON object");
    BAD_POST("/stats", "true", "JSON object");
    BAD_POST("/stats", "null", "JSON object");
    BAD_POST("/stats", "{", "JSON");
    BAD_POST("/stats", "{\"topic\":\"t\",}", "JSON");
    BAD_POST("/stats", "{'topic':'t'}", "JSON");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":NaN}", "JSON");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"delay\":Infinity}", "JSON");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"delay\":1e400}", "JSON");
    BAD_POST("/add", "{\"topic\":\"t\",\"topic\":\"u\",\"body\":1}", "duplicate");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":{\"a\":1,\"a\":2}}", "duplicate");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":\"\xc3\x28\"}", "UTF-8");
}

static void test_nesting_in_request(void **state)
{
    (void)state;
    /* 32 levels including the request object itself: body at 31 is fine. */
    dq_buf b;
    buf_init(&b);
    buf_puts(&b, "{\"topic\":\"t\",\"body\":");
    for (int i = 0; i < 31; i++)
        buf_puts(&b, "[");
    for (int i = 0; i < 31; i++)
        buf_puts(&b, "]");
    buf_puts(&b, "}");
    OK_POST("/add", b.data);
    buf_reset(&b);
    buf_puts(&b, "{\"topic\":\"t\",\"body\":");
    for (int i = 0; i < 32; i++)
        buf_puts(&b, "[");
    for (int i = 0; i < 32; i++)
        buf_puts(&b, "]");
    buf_puts(&b, "}");
    BAD_POST("/add", b.data, "32");
    buf_free(&b);
}

static void test_methods(void **state)
{
    (void)state;
    static const char *const bad[] = {"PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT",
                                      "post", "get", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        BAD(DQ_BAD_REQUEST, bad[i], "/stats", NULL, "{}", "method", "POST");
        BAD(DQ_BAD_REQUEST, bad[i], "/", NULL, "{\"command\":\"stats\"}", "method");
    }
    BAD(DQ_BAD_REQUEST, "PUT", "/add", NULL, "{\"topic\":\"t\",\"body\":1}", "PUT");
    BAD(DQ_BAD_REQUEST, "DELETE", "/delete", NULL, "{\"id\":\"x\"}", "DELETE");
}

/* ------------------------------------------------------------------------ */
/* GET and HEAD                                                              */
/* ------------------------------------------------------------------------ */

static void test_get_read_only(void **state)
{
    (void)state;
    OK_GET("/stats", NULL);
    assert_int_equal(req.cmd, CMD_STATS);
    assert_int_equal(req.ntopics, 0);
    OK_GET("/stats", "");
    assert_int_equal(req.ntopics, 0);
    OK_GET("/stats", "topic=order");
    assert_int_equal(req.ntopics, 1);
    assert_string_equal(req.topics[0], "order");
    OK_GET("/get", "id=order-42");
    assert_int_equal(req.cmd, CMD_GET);
    assert_int_equal(req.nids, 1);
    assert_string_equal(req.ids[0], "order-42");
    OK_GET("/health", NULL);
    assert_int_equal(req.cmd, CMD_HEALTH);
    OK_GET("/metrics", NULL);
    assert_int_equal(req.cmd, CMD_METRICS);
    /* HEAD is served like GET. */
    OK("HEAD", "/stats", "topic=t", NULL);
    assert_int_equal(req.cmd, CMD_STATS);
    OK("HEAD", "/health", NULL, NULL);
    BAD(DQ_BAD_REQUEST, "HEAD", "/add", "topic=t", NULL, "POST");
    BAD(DQ_BAD_REQUEST, "HEAD", "/", NULL, NULL, "GET /");
    /* A body on GET is not read. */
    OK("GET", "/stats", NULL, "not json at all");
    assert_int_equal(req.cmd, CMD_STATS);
    /* A command parameter must match the path, like the JSON field. */
    OK_GET("/stats", "command=stats");
    BAD_GET("/stats", "command=get", "'command'");
}

static void test_get_other_commands(void **state)
{
    (void)state;
    BAD_GET("/", NULL, "GET /");
    BAD_GET("/", "command=stats", "GET /");
    BAD_GET("", NULL, "GET /");
    BAD_GET("/add", "topic=t&body=1", "'add'", "POST");
    BAD_GET("/pop", "topic=t", "'pop'", "POST");
    BAD_GET("/finish", "id=x", "'finish'", "POST");
    BAD_GET("/delete", "id=x", "'delete'", "POST");
    BAD_GET("/touch", "id=x", "'touch'", "POST");
    BAD_GET("/release", "id=x", "'release'", "POST");
    BAD_GET("/bury", "id=x", "'bury'", "POST");
    BAD_GET("/kick", "topic=t", "'kick'", "POST");
}

static void test_get_query_decoding(void **state)
{
    (void)state;
    OK_GET("/get", "id=a%2Fb%3Ac%40d");
    assert_string_equal(req.ids[0], "a/b:c@d");
    OK_GET("/get", "id=a%2fb");
    assert_string_equal(req.ids[0], "a/b");
    OK_GET("/get", "%69%64=%6F%72%64%65%72"); /* the name is decoded too */
    assert_string_equal(req.ids[0], "order");
    OK_GET("/stats", "topic=ord%65r.created");
    assert_string_equal(req.topics[0], "order.created");
    /* Unknown parameters are refused like unknown fields; empty pieces
     * are skipped. */
    BAD_GET("/get", "x=1&&id=j1", "unknown query parameter 'x'");
    OK_GET("/get", "&&id=j1&");
    assert_string_equal(req.ids[0], "j1");
    /* Decoded values are validated like the JSON fields. */
    BAD_GET("/get", "id=a+b", "'id'");
    BAD_GET("/get", "id=a%20b", "'id'");
    BAD_GET("/get", "id=a%00b", "'id'");
    BAD_GET("/get", "id=", "'id'");
    BAD_GET("/get", "id", "'id'");
    BAD_GET("/get", NULL, "'id'", "required");
    BAD_GET("/get", "ID=x", "unknown query parameter 'ID'");
    BAD_GET("/stats", "topic=", "'topic'");
    BAD_GET("/stats", "topic=a%2Cb", "'topic'");
    BAD_GET("/stats", "topic=caf%C3%A9", "'topic'");
    BAD_GET("/get", "id=%C3%28", "UTF-8");
    BAD_GET("/get", "id=%FF", "UTF-8");

    char *id = rep('i', 256);
    char *q = fmt("id=%s", id);
    OK_GET("/get", q);
    assert_int_equal(strlen(req.ids[0]), 256);
    free(q);
    q = fmt("id=%si", id);
    BAD_GET("/get", q, "'id'");
    free(q);
    free(id);
    char *t = rep('t', 128);
    q = fmt("topic=%s", t);
    OK_GET("/stats", q);
    free(q);
    q = fmt("topic=%st", t);
    BAD_GET("/stats", q, "'topic'");
    free(q);
    free(t);
}

static void test_get_query_repeated(void **state)
{
    (void)state;
    BAD_GET("/stats", "topic=a&topic=b", "'topic'", "repeated");
    BAD_GET("/stats", "topic=a&topic=a", "'topic'", "repeated");
    BAD_GET("/get", "id=x&id=x", "'id'", "repeated");
    BAD_GET("/get", "id=x&%69d=y", "'id'", "repeated");
    BAD_GET("/get", "id=x&foo=1&foo=2", "unknown query parameter 'foo'");
}

static void test_get_query_malformed(void **state)
{
    (void)state;
    BAD_GET("/get", "id=%", "escape");
    BAD_GET("/get", "id=a%", "escape");
    BAD_GET("/get", "id=a%4", "escape");
    BAD_GET("/get", "id=%zz", "escape");
    BAD_GET("/get", "id=%4g", "escape");
    BAD_GET("/get", "id=%g4", "escape");
    BAD_GET("/get", "i%d=x", "escape");
    BAD_GET("/stats", "topic=t&x=%", "escape");
}

/* ------------------------------------------------------------------------ */
/* add                                                                       */
/* ------------------------------------------------------------------------ */

static void test_add_minimal(void **state)
{
    (void)state;
    OK_POST("/add", "{\"topic\":\"order\",\"body\":1}");
    assert_int_equal(req.cmd, CMD_ADD);
    assert_int_equal(req.batch, 0);
    assert_int_equal(req.njobs, 1);
    assert_string_equal(req.jobs[0].topic, "order");
    assert_null(req.jobs[0].id);
    assert_int_equal(req.jobs[0].delay_ms, 0);
    assert_int_equal(req.jobs[0].at_ms, -1);
    assert_int_equal(req.jobs[0].ttr_ms, 60000);
    assert_int_equal(req.jobs[0].retries, -1);
    assert_int_equal(req.jobs[0].body_len, 1);
    assert_memory_equal(req.jobs[0].body, "1", 1);

    OK_POST("/", "{\"command\":\"add\",\"topic\":\"order\",\"id\":\"order-42\",\"delay\":1800,"
                 "\"ttr\":60,\"body\":{\"sku\":\"x\"}}");
    assert_string_equal(req.jobs[0].id, "order-42");
    assert_int_equal(req.jobs[0].delay_ms, 1800000);
    assert_int_equal(req.jobs[0].ttr_ms, 60000);

    /* The limit's default TTR applies when ttr is omitted. */
    lim.default_ttr_ms = 12345;
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1}");
    assert_int_equal(req.jobs[0].ttr_ms, 12345);
}

static void test_add_topic_and_id(void **state)
{
    (void)state;
    BAD_POST("/add", "{\"body\":1}", "'topic'", "required");
    BAD_POST("/add", "{\"Topic\":\"t\",\"body\":1}", "unknown field 'Topic'");
    BAD_POST("/add", "{\"topic\":1,\"body\":1}", "'topic'", "string");
    BAD_POST("/add", "{\"topic\":null,\"body\":1}", "'topic'");
    BAD_POST("/add", "{\"topic\":\"\",\"body\":1}", "'topic'");
    BAD_POST("/add", "{\"topic\":\"a b\",\"body\":1}", "'topic'");
    BAD_POST("/add", "{\"topic\":\"a,b\",\"body\":1}", "'topic'");
    BAD_POST("/add", "{\"topic\":\"caf\xc3\xa9\",\"body\":1}", "'topic'");
    BAD_POST("/add", "{\"topic\":\"a\\u0000b\",\"body\":1}", "'topic'");

    BAD_POST("/add", "{\"topic\":\"t\",\"id\":42,\"body\":1}", "'id'", "string");
    BAD_POST("/add", "{\"topic\":\"t\",\"id\":null,\"body\":1}", "'id'");
    BAD_POST("/add", "{\"topic\":\"t\",\"id\":\"\",\"body\":1}", "'id'");
    BAD_POST("/add", "{\"topic\":\"t\",\"id\":\"a#b\",\"body\":1}", "'id'");
    BAD_POST("/add", "{\"topic\":\"t\",\"id\":\"a\\nb\",\"body\":1}", "'id'");

    char *t = rep('t', 128), *i = rep('i', 256);
    char *b = fmt("{\"topic\":\"%s\",\"id\":\"%s\",\"body\":1}", t, i);
    OK_POST("/add", b);
    assert_int_equal(strlen(req.jobs[0].topic), 128);
    assert_int_equal(strlen(req.jobs[0].id), 256);
    free(b);
    b = fmt("{\"topic\":\"%st\",\"id\":\"x\",\"body\":1}", t);
    BAD_POST("/add", b, "'topic'", "128");
    free(b);
    b = fmt("{\"topic\":\"t\",\"id\":\"%si\",\"body\":1}", i);
    BAD_POST("/add", b, "'id'", "256");
    free(b);
    free(t);
    free(i);
}

static void test_add_delay_at(void **state)
{
    (void)state;
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1,\"delay\":0}");
    assert_int_equal(req.jobs[0].delay_ms, 0);
    assert_int_equal(req.jobs[0].at_ms, -1);
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1,\"delay\":1.5}");
    assert_int_equal(req.jobs[0].delay_ms, 1500);
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1,\"delay\":2.0006}");
    assert_int_equal(req.jobs[0].delay_ms, 2001); /* rounded to the millisecond */
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1,\"delay\":0.0004}");
    assert_int_equal(req.jobs[0].delay_ms, 0);
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1,\"delay\":315532800}");
    assert_int_equal(req.jobs[0].delay_ms, 315532800000LL);
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1,\"delay\":1e3}");
    assert_int_equal(req.jobs[0].delay_ms, 1000000);

    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"delay\":315532800.01}", "'delay'");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"delay\":1e12}", "'delay'");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"delay\":-1}", "'delay'");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"delay\":-0.001}", "'delay'");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"delay\":\"30\"}", "'delay'", "number");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"delay\":true}", "'delay'", "number");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"delay\":null}", "'delay'", "number");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"delay\":[1]}", "'delay'", "number");

    OK_POST("/add", "{\"topic\":\"t\",\"body\":1,\"at\":1700000000.5}");
    assert_int_equal(req.jobs[0].at_ms, 1700000000500LL);
    assert_int_equal(req.jobs[0].delay_ms, 0);
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1,\"at\":1}"); /* the past: ready now */
    assert_int_equal(req.jobs[0].at_ms, 1000);
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1,\"at\":0}");
    assert_int_equal(req.jobs[0].at_ms, 0);
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"at\":\"1700000000\"}", "'at'", "number");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"at\":1e300}", "'at'");

    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"delay\":5,\"at\":1700000000}", "'delay'",
             "'at'");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"delay\":0,\"at\":0}", "'delay'", "'at'");
}

static void test_add_ttr(void **state)
{
    (void)state;
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1,\"ttr\":30}");
    assert_int_equal(req.jobs[0].ttr_ms, 30000);
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1,\"ttr\":0.001}");
    assert_int_equal(req.jobs[0].ttr_ms, 1);
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1,\"ttr\":0.0015}");
    assert_int_equal(req.jobs[0].ttr_ms, 2);
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1,\"ttr\":1.2506}");
    assert_int_equal(req.jobs[0].ttr_ms, 1251);
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1,\"ttr\":86400}");
    assert_int_equal(req.jobs[0].ttr_ms, 86400000);
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1,\"ttr\":86400.0}");
    assert_int_equal(req.jobs[0].ttr_ms, 86400000);

    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"ttr\":0}", "'ttr'");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"ttr\":0.0009}", "'ttr'");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"ttr\":-1}", "'ttr'");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"ttr\":86400.001}", "'ttr'");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"ttr\":86401}", "'ttr'");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"ttr\":\"60\"}", "'ttr'", "number");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"ttr\":null}", "'ttr'", "number");

    /* TTR is a synonym of ttr, with the same rules. */
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1,\"TTR\":45}");
    assert_int_equal(req.jobs[0].ttr_ms, 45000);
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1,\"TTR\":0.001}");
    assert_int_equal(req.jobs[0].ttr_ms, 1);
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"TTR\":0}", "'TTR'");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"TTR\":86401}", "'TTR'");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"TTR\":\"5\"}", "'TTR'", "number");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"ttr\":5,\"TTR\":5}", "'ttr'", "'TTR'");
    /* Other spellings are unknown fields. */
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"Ttr\":0}", "unknown field 'Ttr'");
}

static void test_add_retries(void **state)
{
    (void)state;
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1,\"retries\":0}");
    assert_int_equal(req.jobs[0].retries, 0);
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1,\"retries\":5}");
    assert_int_equal(req.jobs[0].retries, 5);
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1,\"retries\":1000000}");
    assert_int_equal(req.jobs[0].retries, 1000000);

    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"retries\":2.0}", "'retries'", "integer");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"retries\":2.5}", "'retries'", "integer");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"retries\":1e2}", "'retries'", "integer");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"retries\":\"3\"}", "'retries'", "integer");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"retries\":null}", "'retries'", "integer");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"retries\":true}", "'retries'", "integer");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"retries\":-1}", "'retries'");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"retries\":1000001}", "'retries'");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"retries\":99999999999999999999}",
             "'retries'");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"retries\":-99999999999999999999}",
             "'retries'");
}

static void expect_body(const char *request, const char *want)
{
    OK_POST("/add", request);
    assert_int_equal(req.jobs[0].body_len, strlen(want));
    assert_memory_equal(req.jobs[0].body, want, strlen(want));
}

static void test_add_body(void **state)
{
    (void)state;
    BAD_POST("/add", "{\"topic\":\"t\"}", "'body'", "required");
    BAD_POST("/add", "{\"topic\":\"t\",\"Body\":1}", "unknown field 'Body'");

    /* Kept as compact JSON text: a string stays a string, an object an object. */
    expect_body("{\"topic\":\"t\",\"body\":\"hello\"}", "\"hello\"");
    expect_body("{\"topic\":\"t\",\"body\":\"{\\\"a\\\":1}\"}", "\"{\\\"a\\\":1}\"");
    expect_body("{\"topic\":\"t\",\"body\": { \"a\" : [ 1 , 2 ] , \"b\" : { } } }",
                "{\"a\":[1,2],\"b\":{}}");
    expect_body("{\"topic\":\"t\",\"body\":[\"x\", null, true, false]}",
                "[\"x\",null,true,false]");
    expect_body("{\"topic\":\"t\",\"body\":null}", "null");
    expect_body("{\"topic\":\"t\",\"body\":false}", "false");
    expect_body("{\"topic\":\"t\",\"body\":0}", "0");
    expect_body("{\"topic\":\"t\",\"body\":-12.5}", "-12.5");
    expect_body("{\"topic\":\"t\",\"body\":\"\"}", "\"\"");
    expect_body("{\"topic\":\"t\",\"body\":{}}", "{}");
    expect_body("{\"topic\":\"t\",\"body\":\"a/b\"}", "\"a/b\"");
    expect_body("{\"topic\":\"t\",\"body\":\"line\\nnext\\t\\\"q\\\" \\\\\"}",
                "\"line\\nnext\\t\\\"q\\\" \\\\\"");
    /* Escapes stay escapes: the text is kept, not re-encoded. */
    expect_body("{\"topic\":\"t\",\"body\":\"caf\xc3\xa9 \\u00e9\"}", "\"caf\xc3\xa9 \\u00e9\"");
    expect_body("{\"topic\":\"t\",\"body\":{\"order\":{\"id\":42,\"items\":[{\"sku\":\"a\"}]}}}",
                "{\"order\":{\"id\":42,\"items\":[{\"sku\":\"a\"}]}}");
}

static void test_add_body_size(void **state)
{
    (void)state;
    lim.max_body = 10;
    expect_body("{\"topic\":\"t\",\"body\":\"12345678\"}", "\"12345678\""); /* 10 bytes */
    expect_body("{\"topic\":\"t\",\"body\":[ 1, 2, 3, 45 ]}", "[1,2,3,45]"); /* 10 compact */
    expect_body("{\"topic\":\"t\",\"body\":1}", "1");
}

static void test_add_body_too_large(void **state)
{
    (void)state;
    lim.max_body = 10;
    LARGE_POST("/add", "{\"topic\":\"t\",\"body\":\"123456789\"}", "'body'", "10");
    LARGE_POST("/add", "{\"topic\":\"t\",\"body\":{\"a\":\"1234\"}}", "'body'");
    /* Whitespace does not count: the limit is on the compact text. */
    OK_POST("/add", "{\"topic\":\"t\",\"body\":{   \"a\"   :   \"12\"   }}");
    assert_int_equal(req.jobs[0].body_len, 10);

    /* The default 64 KiB. */
    lim.max_body = 65536;
    char *s = rep('x', 65534);
    char *b = fmt("{\"topic\":\"t\",\"body\":\"%s\"}", s);
    OK_POST("/add", b);
    assert_int_equal(req.jobs[0].body_len, 65536);
    free(b);
    b = fmt("{\"topic\":\"t\",\"body\":\"%sx\"}", s);
    LARGE_POST("/add", b, "'body'", "65536");
    free(b);
    free(s);
}

/* A batch add of n jobs; job bad_index (if < n) gets extra appended. */
static char *batch(size_t n, size_t bad_index, const char *extra)
{
    dq_buf b;
    buf_init(&b);
    buf_puts(&b, "{\"jobs\":[");
    for (size_t i = 0; i < n; i++) {
        buf_printf(&b, "%s{\"topic\":\"t%zu\",\"id\":\"j%zu\",\"body\":%zu%s}", i ? "," : "", i, i,
                   i, i == bad_index ? extra : "");
    }
    buf_puts(&b, "]}");
    return b.data;
}

static void test_add_batch(void **state)
{
    (void)state;
    OK_POST("/add", "{\"jobs\":[{\"topic\":\"a\",\"body\":\"x\",\"delay\":1},"
                    "{\"topic\":\"b\",\"id\":\"j2\",\"body\":{\"k\":[]},\"TTR\":2,\"retries\":3}]}");
    assert_int_equal(req.cmd, CMD_ADD);
    assert_int_equal(req.batch, 1);
    assert_int_equal(req.njobs, 2);
    assert_string_equal(req.jobs[0].topic, "a");
    assert_null(req.jobs[0].id);
    assert_int_equal(req.jobs[0].delay_ms, 1000);
    assert_int_equal(req.jobs[0].ttr_ms, 60000);
    assert_int_equal(req.jobs[0].retries, -1);
    assert_memory_equal(req.jobs[0].body, "\"x\"", 3);
    assert_string_equal(req.jobs[1].topic, "b");
    assert_string_equal(req.jobs[1].id, "j2");
    assert_int_equal(req.jobs[1].at_ms, -1);
    assert_int_equal(req.jobs[1].ttr_ms, 2000);
    assert_int_equal(req.jobs[1].retries, 3);
    assert_int_equal(req.jobs[1].body_len, 8);
    assert_memory_equal(req.jobs[1].body, "{\"k\":[]}", 8);

    /* One job is still the batch form. */
    OK_POST("/", "{\"command\":\"add\",\"jobs\":[{\"topic\":\"a\",\"body\":1}]}");
    assert_int_equal(req.batch, 1);
    assert_int_equal(req.njobs, 1);

    /* The batch form takes its fields from each job, none from the top. */
    BAD_POST("/add", "{\"ttr\":5,\"jobs\":[{\"topic\":\"a\",\"body\":1}]}", "field 'ttr'",
             "not a field of add");

    char *b = batch(1000, 1000, "");
    OK_POST("/add", b);
    assert_int_equal(req.njobs, 1000);
    assert_string_equal(req.jobs[999].topic, "t999");
    assert_string_equal(req.jobs[999].id, "j999");
    assert_memory_equal(req.jobs[999].body, "999", 3);
    free(b);
}

static void test_add_batch_errors(void **state)
{
    (void)state;
    BAD_POST("/add", "{\"jobs\":[]}", "'jobs'", "1000");
    BAD_POST("/add", "{\"jobs\":{}}", "'jobs'", "array");
    BAD_POST("/add", "{\"jobs\":null}", "'jobs'", "array");
    BAD_POST("/add", "{\"jobs\":\"x\"}", "'jobs'", "array");
    char *b = batch(1001, 1001, "");
    BAD_POST("/add", b, "'jobs'", "1000");
    free(b);

    BAD_POST("/add", "{\"jobs\":[{\"topic\":\"a\",\"body\":1},7]}", "jobs[1]", "object");
    BAD_POST("/add", "{\"jobs\":[{\"topic\":\"a\",\"body\":1},[]]}", "jobs[1]", "object");
    BAD_POST("/add", "{\"jobs\":[{\"topic\":\"a\",\"body\":1},{\"body\":1}]}", "jobs[1]",
             "'jobs[1].topic'");
    BAD_POST("/add", "{\"jobs\":[{\"topic\":\"a\"}]}", "jobs[0]", "'jobs[0].body'");

    b = batch(3, 2, ",\"ttr\":0");
    BAD_POST("/add", b, "jobs[2]", "jobs[2].ttr'");
    free(b);
    b = batch(3, 0, ",\"delay\":\"5\"");
    BAD_POST("/add", b, "jobs[0]", "jobs[0].delay'");
    free(b);
    b = batch(3, 1, ",\"delay\":1,\"at\":2");
    BAD_POST("/add", b, "jobs[1]", "'delay'", "'at'");
    free(b);
    b = batch(3, 1, ",\"retries\":1.0");
    BAD_POST("/add", b, "jobs[1]", "jobs[1].retries'");
    free(b);
    b = batch(3, 1, ",\"ttr\":1,\"TTR\":1");
    BAD_POST("/add", b, "jobs[1]", "'ttr'", "'TTR'");
    free(b);
    b = batch(1000, 999, ",\"retries\":-1");
    BAD_POST("/add", b, "jobs[999]", "jobs[999].retries'");
    free(b);
    BAD_POST("/add", "{\"jobs\":[{\"topic\":\"a\",\"body\":1},{\"topic\":\"b\",\"id\":\"a b\",\"body\":1}]}",
             "jobs[1]", "jobs[1].id'");

    /* A body over the limit in a batch: 413 naming the job and the field. */
    lim.max_body = 4;
    BAD(DQ_TOO_LARGE, "POST", "/add",
        NULL, "{\"jobs\":[{\"topic\":\"a\",\"body\":1},{\"topic\":\"a\",\"body\":\"long\"}]}",
        "jobs[1]", "jobs[1].body'");
}

/* The grouping key: optional, the name rules of ids, at most 128 bytes,
 * refused with the field's name and its rule (in a batch, with the job's
 * place); a job without one has NULL. */
static void test_add_key(void **state)
{
    (void)state;
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1}");
    assert_null(req.jobs[0].key);
    OK_POST("/add", "{\"topic\":\"t\",\"key\":\"merchant-42/eu:a@b_c.d\",\"body\":1}");
    assert_string_equal(req.jobs[0].key, "merchant-42/eu:a@b_c.d");
    OK_POST("/add", "{\"topic\":\"t\",\"key\":\"m\\u0031\",\"body\":1}");
    assert_string_equal(req.jobs[0].key, "m1");

    const char *rule = "1 to 128 characters of A-Z a-z 0-9 _ . : @ / -";
    BAD_POST("/add", "{\"topic\":\"t\",\"key\":\"\",\"body\":1}", "field 'key' must be", rule);
    BAD_POST("/add", "{\"topic\":\"t\",\"key\":\"a b\",\"body\":1}", "field 'key' must be", rule);
    BAD_POST("/add", "{\"topic\":\"t\",\"key\":\"caf\xc3\xa9\",\"body\":1}", "'key'", rule);
    BAD_POST("/add", "{\"topic\":\"t\",\"key\":\"a\\u0000b\",\"body\":1}", "'key'", rule);
    BAD_POST("/add", "{\"topic\":\"t\",\"key\":7,\"body\":1}", "field 'key' must be a string");
    BAD_POST("/add", "{\"topic\":\"t\",\"key\":null,\"body\":1}", "'key'");
    BAD_POST("/add", "{\"topic\":\"t\",\"key\":[\"a\"],\"body\":1}", "'key'");

    char *k = rep('k', 128);
    char *b = fmt("{\"topic\":\"t\",\"key\":\"%s\",\"body\":1}", k);
    OK_POST("/add", b);
    assert_int_equal(strlen(req.jobs[0].key), 128);
    free(b);
    b = fmt("{\"topic\":\"t\",\"key\":\"%sk\",\"body\":1}", k);
    BAD_POST("/add", b, "field 'key' must be", rule);
    free(b);
    free(k);

    OK_POST("/add", "{\"jobs\":[{\"topic\":\"a\",\"key\":\"k1\",\"body\":1},{\"topic\":\"a\",\"body\":2}]}");
    assert_string_equal(req.jobs[0].key, "k1");
    assert_null(req.jobs[1].key);
    BAD_POST("/add", "{\"jobs\":[{\"topic\":\"a\",\"body\":1},{\"topic\":\"a\",\"key\":\"x y\",\"body\":1}]}",
             "field 'jobs[1].key' must be", rule);
    /* Only add takes a key. */
    BAD_POST("/pop", "{\"topic\":\"t\",\"key\":\"k\"}", "'key'", "is not a field of pop");
    BAD_POST("/schedule", "{\"id\":\"s\",\"topic\":\"t\",\"every\":60,\"key\":\"k\",\"body\":1}",
             "'key'", "is not a field of schedule");
}

/* Upsert: "replace" is a JSON boolean, per job of a batch, and names its
 * job (an id is required with true). */
static void test_add_replace(void **state)
{
    (void)state;
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1}");
    assert_int_equal(req.jobs[0].replace, 0);
    OK_POST("/add", "{\"topic\":\"t\",\"id\":\"j\",\"replace\":true,\"body\":1}");
    assert_int_equal(req.jobs[0].replace, 1);
    OK_POST("/add", "{\"topic\":\"t\",\"replace\":false,\"body\":1}");
    assert_int_equal(req.jobs[0].replace, 0);
    static const char *const bad[] = {"\"true\"", "1", "0", "null", "[true]", "{}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *b = fmt("{\"topic\":\"t\",\"id\":\"j\",\"replace\":%s,\"body\":1}", bad[i]);
        BAD_POST("/add", b, "field 'replace' must be true or false");
        free(b);
    }
    BAD_POST("/add", "{\"topic\":\"t\",\"replace\":true,\"body\":1}",
             "field 'replace' needs field 'id'");
    OK_POST("/add", "{\"jobs\":[{\"topic\":\"a\",\"id\":\"x\",\"replace\":true,\"body\":1},"
                    "{\"topic\":\"a\",\"body\":2}]}");
    assert_int_equal(req.jobs[0].replace, 1);
    assert_int_equal(req.jobs[1].replace, 0);
    BAD_POST("/add", "{\"jobs\":[{\"topic\":\"a\",\"body\":1},{\"topic\":\"a\",\"replace\":1,\"body\":1}]}",
             "field 'jobs[1].replace' must be true or false");
    /* Per job only: a batch takes no top-level replace. */
    BAD_POST("/add", "{\"replace\":true,\"jobs\":[{\"topic\":\"a\",\"id\":\"x\",\"body\":1}]}",
             "'replace'", "is not a field of add");
    BAD_POST("/reschedule", "{\"id\":\"j\",\"delay\":1,\"replace\":true}", "'replace'",
             "is not a field of reschedule");
}

/* Trace context as fields: W3C traceparent version 00 in lowercase hex, ids
 * not all zeros; tracestate up to 512 printable ASCII bytes, only with a
 * traceparent (empty: none). Each rule is named with the field. */
#define TP "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
#define TP_SHAPE "must be a W3C traceparent of version 00: 00-<32 hex>-<16 hex>-<2 hex>"
static void test_add_trace_fields(void **state)
{
    (void)state;
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1}");
    assert_null(req.jobs[0].traceparent);
    assert_null(req.jobs[0].tracestate);
    OK_POST("/add", "{\"topic\":\"t\",\"traceparent\":\"" TP "\",\"tracestate\":\"a=1,b=x y\",\"body\":1}");
    assert_string_equal(req.jobs[0].traceparent, TP);
    assert_string_equal(req.jobs[0].tracestate, "a=1,b=x y");
    OK_POST("/add", "{\"topic\":\"t\",\"traceparent\":\"" TP "\",\"tracestate\":\"\",\"body\":1}");
    assert_null(req.jobs[0].tracestate);
    /* Escapes decode first: \u0030 is '0'. */
    OK_POST("/add", "{\"topic\":\"t\",\"traceparent\":\"\\u00300-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\",\"body\":1}");
    assert_string_equal(req.jobs[0].traceparent, TP);

    static const char *const shapes[] = {
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", /* uppercase trace id */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01", /* uppercase parent id */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A", /* uppercase flags */
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", /* version 01 */
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", /* version ff */
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  /* trace id of 31 */
        "00-4bf92f3577b34da6a3ce929d0e0e47366-00f067aa0ba902b7-01", /* trace id of 33 */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",  /* parent id of 15 */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",  /* flags of 1 */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", /* a trailing part */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",    /* no flags */
        "00 4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7 01", /* separators */
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", /* not hex */
        "",
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        char *b = fmt("{\"topic\":\"t\",\"traceparent\":\"%s\",\"body\":1}", shapes[i]);
        BAD_POST("/add", b, "field 'traceparent' " TP_SHAPE, "lowercase");
        free(b);
    }
    BAD_POST("/add", "{\"topic\":\"t\",\"traceparent\":\"00-00000000000000000000000000000000-00f067aa0ba902b7-01\",\"body\":1}",
             "field 'traceparent' must not have a trace id of all zeros");
    BAD_POST("/add", "{\"topic\":\"t\",\"traceparent\":\"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01\",\"body\":1}",
             "field 'traceparent' must not have a parent id of all zeros");
    /* Flags of 00 are fine (not sampled). */
    OK_POST("/add", "{\"topic\":\"t\",\"traceparent\":\"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00\",\"body\":1}");
    BAD_POST("/add", "{\"topic\":\"t\",\"traceparent\":7,\"body\":1}", "field 'traceparent' must be a string");
    BAD_POST("/add", "{\"topic\":\"t\",\"traceparent\":null,\"body\":1}", "'traceparent'");
    BAD_POST("/add", "{\"topic\":\"t\",\"traceparent\":\"" TP "\",\"tracestate\":[],\"body\":1}",
             "field 'tracestate' must be a string");

    char *st = rep('s', 512);
    char *b = fmt("{\"topic\":\"t\",\"traceparent\":\"" TP "\",\"tracestate\":\"%s\",\"body\":1}", st);
    OK_POST("/add", b);
    assert_int_equal(strlen(req.jobs[0].tracestate), 512);
    free(b);
    b = fmt("{\"topic\":\"t\",\"traceparent\":\"" TP "\",\"tracestate\":\"%ss\",\"body\":1}", st);
    BAD_POST("/add", b, "field 'tracestate' must be at most 512 bytes");
    free(b);
    free(st);
    static const char *const unprintable[] = {"a=b\\nc=d", "a=\\r", "a=\\t", "a=\\u0000", "a=\\u007f",
                                              "caf\xc3\xa9"};
    for (size_t i = 0; i < sizeof unprintable / sizeof unprintable[0]; i++) {
        b = fmt("{\"topic\":\"t\",\"traceparent\":\"" TP "\",\"tracestate\":\"%s\",\"body\":1}",
                unprintable[i]);
        BAD_POST("/add", b, "field 'tracestate' must be printable ASCII (no control characters)");
        free(b);
    }
    BAD_POST("/add", "{\"topic\":\"t\",\"tracestate\":\"a=b\",\"body\":1}",
             "field 'tracestate' needs 'traceparent'");

    /* Per job of a batch, named with the job's place. */
    OK_POST("/add", "{\"jobs\":[{\"topic\":\"a\",\"traceparent\":\"" TP "\",\"body\":1},{\"topic\":\"a\",\"body\":2}]}");
    assert_string_equal(req.jobs[0].traceparent, TP);
    assert_null(req.jobs[1].traceparent);
    BAD_POST("/add", "{\"jobs\":[{\"topic\":\"a\",\"body\":1},{\"topic\":\"a\",\"traceparent\":\"00-x\",\"body\":1}]}",
             "field 'jobs[1].traceparent' " TP_SHAPE);
    BAD_POST("/add", "{\"jobs\":[{\"topic\":\"a\",\"traceparent\":\"" TP "\",\"tracestate\":\"\\n\",\"body\":1}]}",
             "field 'jobs[0].tracestate' must be printable ASCII");
    /* Only add takes them. */
    BAD_POST("/pop", "{\"topic\":\"t\",\"traceparent\":\"" TP "\"}", "'traceparent'", "is not a field of pop");
    BAD_POST("/schedule", "{\"id\":\"s\",\"topic\":\"t\",\"every\":60,\"tracestate\":\"a\",\"body\":1}",
             "'tracestate'", "is not a field of schedule");
}

/* Trace context as headers: a single add whose job has no trace field takes
 * them, checked by the same rules and named as headers; a job with either
 * field takes neither header; a batch and other commands ignore them. */
#define WITH_HEADERS(tp, ts) (next_headers = &(const dq_headers){(tp), (ts)})
static void test_add_trace_headers(void **state)
{
    (void)state;
    WITH_HEADERS(TP, "v=1");
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1}");
    assert_string_equal(req.jobs[0].traceparent, TP);
    assert_string_equal(req.jobs[0].tracestate, "v=1");
    WITH_HEADERS(TP, "");
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1}");
    assert_null(req.jobs[0].tracestate);
    WITH_HEADERS("", NULL); /* an empty header is none */
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1}");
    assert_null(req.jobs[0].traceparent);
    /* Headers are for the next parse only. */
    OK_POST("/add", "{\"topic\":\"t\",\"body\":1}");
    assert_null(req.jobs[0].traceparent);

    /* The fields win, as a whole, and the header they override is not checked. */
    WITH_HEADERS(TP, "v=1");
    OK_POST("/add", "{\"topic\":\"t\",\"traceparent\":\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\",\"body\":1}");
    assert_string_equal(req.jobs[0].traceparent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    assert_null(req.jobs[0].tracestate);
    WITH_HEADERS("garbage", "\x01");
    OK_POST("/add", "{\"topic\":\"t\",\"traceparent\":\"" TP "\",\"body\":1}");
    assert_string_equal(req.jobs[0].traceparent, TP);

    WITH_HEADERS("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", NULL);
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1}", "header 'traceparent' " TP_SHAPE);
    WITH_HEADERS("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", NULL);
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1}", "header 'traceparent' must not have a parent id of all zeros");
    WITH_HEADERS(TP, "a=\x7f");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1}", "header 'tracestate' must be printable ASCII");
    WITH_HEADERS(NULL, "a=b");
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1}", "header 'tracestate' needs 'traceparent'");

    /* A batch and other commands ignore them, even malformed. */
    WITH_HEADERS(TP, NULL);
    OK_POST("/add", "{\"jobs\":[{\"topic\":\"a\",\"body\":1}]}");
    assert_null(req.jobs[0].traceparent);
    WITH_HEADERS("garbage", NULL);
    OK_POST("/add", "{\"jobs\":[{\"topic\":\"a\",\"body\":1}]}");
    WITH_HEADERS("garbage", "\x01");
    OK_POST("/pop", "{\"topic\":\"t\"}");
    WITH_HEADERS("garbage", NULL);
    OK_GET("/get", "id=x");
}

/* policy: per field omitted (kept), null (removed) or a value in range;
 * seconds kept in ms; a bad value names its field. */
static void test_policy(void **state)
{
    (void)state;
    OK_POST("/policy", "{\"topic\":\"n\",\"concurrency\":50,\"rate\":100,\"period\":1,"
                       "\"key_concurrency\":1,\"key_rate\":5,\"key_period\":0.5,\"keep\":86400}");
    assert_string_equal(req.topics[0], "n");
    const int64_t want[DQ_POLICY_NFIELDS] = {50, 100, 1000, 1, 5, 500, 86400000};
    for (int i = 0; i < DQ_POLICY_NFIELDS; i++) {
        assert_int_equal(req.policy.op[i], DQ_POLICY_SET);
        assert_int_equal(req.policy.value[i], want[i]);
    }
    OK_POST("/policy", "{\"topic\":\"n\",\"rate\":null,\"keep\":0}");
    assert_int_equal(req.policy.op[DQ_POLICY_RATE], DQ_POLICY_REMOVE);
    assert_int_equal(req.policy.op[DQ_POLICY_KEEP], DQ_POLICY_SET);
    assert_int_equal(req.policy.value[DQ_POLICY_KEEP], 0);
    assert_int_equal(req.policy.op[DQ_POLICY_CONCURRENCY], DQ_POLICY_KEEP_VALUE);
    assert_int_equal(req.policy.op[DQ_POLICY_PERIOD], DQ_POLICY_KEEP_VALUE);
    OK_POST("/policy", "{\"topic\":\"n\"}");
    for (int i = 0; i < DQ_POLICY_NFIELDS; i++)
        assert_int_equal(req.policy.op[i], DQ_POLICY_KEEP_VALUE);

    BAD_POST("/policy", "{\"rate\":1}", "'topic'", "required");
    BAD_POST("/policy", "{\"topic\":\"n\",\"concurrency\":-1}", "field 'concurrency' must be an integer from 1 to 1000000");
    BAD_POST("/policy", "{\"topic\":\"n\",\"key_concurrency\":0}", "field 'key_concurrency' must be an integer from 1");
    BAD_POST("/policy", "{\"topic\":\"n\",\"rate\":1000001}", "field 'rate'", "1000000");
    BAD_POST("/policy", "{\"topic\":\"n\",\"key_rate\":2.5}", "field 'key_rate' must be an integer");
    BAD_POST("/policy", "{\"topic\":\"n\",\"rate\":\"5\"}", "field 'rate' must be an integer");
    BAD_POST("/policy", "{\"topic\":\"n\",\"period\":0}", "field 'period' must be between 0.001 and 86400 seconds");
    BAD_POST("/policy", "{\"topic\":\"n\",\"key_period\":86400.5}", "field 'key_period'", "86400");
    BAD_POST("/policy", "{\"topic\":\"n\",\"period\":0.0004}", "field 'period' must be");
    BAD_POST("/policy", "{\"topic\":\"n\",\"keep\":-1}", "field 'keep' must be between 0 and 2592000 seconds");
    BAD_POST("/policy", "{\"topic\":\"n\",\"keep\":true}", "field 'keep'");
    BAD_POST("/policy", "{\"topic\":\"n\",\"burst\":1}", "unknown field 'burst'");
    BAD_POST("/policy", "{\"topic\":\"n\",\"id\":\"x\"}", "'id'", "is not a field of policy");
    BAD_POST("/add", "{\"topic\":\"n\",\"rate\":1,\"body\":1}", "'rate'", "is not a field of add");

    OK_GET("/policies", NULL);
    assert_int_equal(req.ntopics, 0);
    OK_GET("/policies", "topic=n");
    assert_string_equal(req.topics[0], "n");
    OK_GET("/policies", "limit=2&cursor=a");
    assert_int_equal(req.limit, 2);
    BAD_POST("/policies", "{\"topic\":\"n\",\"rate\":1}", "'rate'", "is not a field of policies");
}

/* ------------------------------------------------------------------------ */
/* pop                                                                       */
/* ------------------------------------------------------------------------ */

/* "t0,t1,...": n topics. The returned string is owned by the caller. */
static char *topic_list(size_t n, const char *sep, const char *quote)
{
    dq_buf b;
    buf_init(&b);
    for (size_t i = 0; i < n; i++)
        buf_printf(&b, "%s%st%zu%s", i ? sep : "", quote, i, quote);
    return b.data;
}

static void test_pop_topic(void **state)
{
    (void)state;
    OK_POST("/pop", "{\"topic\":\"order\"}");
    assert_int_equal(req.cmd, CMD_POP);
    assert_int_equal(req.ntopics, 1);
    assert_string_equal(req.topics[0], "order");
    assert_int_equal(req.timeout_ms, 0);
    assert_int_equal(req.count, 0);

    OK_POST("/", "{\"command\":\"pop\",\"topic\":\"a,b.c,d\"}");
    assert_int_equal(req.ntopics, 3);
    assert_string_equal(req.topics[0], "a");
    assert_string_equal(req.topics[1], "b.c");
    assert_string_equal(req.topics[2], "d");

    BAD_POST("/pop", "{}", "'topic'", "required");
    BAD_POST("/pop", "{\"topic\":\"\"}", "'topic'");
    BAD_POST("/pop", "{\"topic\":\"a,,b\"}", "'topic'");
    BAD_POST("/pop", "{\"topic\":\"a,\"}", "'topic'");
    BAD_POST("/pop", "{\"topic\":\",a\"}", "'topic'");
    BAD_POST("/pop", "{\"topic\":\"a, b\"}", "'topic'");
    BAD_POST("/pop", "{\"topic\":\"a;b\"}", "'topic'");
    BAD_POST("/pop", "{\"topic\":[\"a\"]}", "'topic'", "string");
    BAD_POST("/pop", "{\"topic\":7}", "'topic'", "string");

    char *t = rep('t', 129);
    char *b = fmt("{\"topic\":\"a,%.128s\"}", t);
    OK_POST("/pop", b);
    assert_int_equal(strlen(req.topics[1]), 128);
    free(b);
    b = fmt("{\"topic\":\"a,%s\"}", t);
    BAD_POST("/pop", b, "'topic'", "128");
    free(b);
    free(t);

    char *list = topic_list(64, ",", "");
    b = fmt("{\"topic\":\"%s\"}", list);
    OK_POST("/pop", b);
    assert_int_equal(req.ntopics, 64);
    assert_string_equal(req.topics[63], "t63");
    free(b);
    free(list);
    list = topic_list(65, ",", "");
    b = fmt("{\"topic\":\"%s\"}", list);
    BAD_POST("/pop", b, "'topic'", "64");
    free(b);
    free(list);
}

static void test_pop_finish(void **state)
{
    (void)state;
    OK_POST("/pop", "{\"topic\":\"t\",\"finish\":\"job-1\"}");
    assert_int_equal(req.nids, 1);
    assert_string_equal(req.ids[0], "job-1");
    assert_int_equal(req.batch, 0);
    OK_POST("/pop", "{\"topic\":\"t\",\"finish\":[\"a\",\"b\\u0063\"],\"count\":2}");
    assert_int_equal(req.nids, 2);
    assert_string_equal(req.ids[1], "bc");
    assert_int_equal(req.count, 2);
    OK_POST("/pop", "{\"topic\":\"t\"}");
    assert_int_equal(req.nids, 0);

    BAD_POST("/pop", "{\"topic\":\"t\",\"finish\":7}", "'finish'", "an id or an array");
    BAD_POST("/pop", "{\"topic\":\"t\",\"finish\":null}", "'finish'", "an id or an array");
    BAD_POST("/pop", "{\"topic\":\"t\",\"finish\":[]}", "'finish'", "1 to 1000 ids");
    BAD_POST("/pop", "{\"topic\":\"t\",\"finish\":\"\"}", "'finish'", "1 to 256");
    BAD_POST("/pop", "{\"topic\":\"t\",\"finish\":[\"a\",{}]}", "'finish[1]'", "string");
    BAD_POST("/pop", "{\"topic\":\"t\",\"finish\":[\"a\",\"b c\"]}", "'finish[1]'");
    BAD_POST("/finish", "{\"id\":\"x\",\"finish\":\"a\"}", "'finish' is not a field of finish");
    char *ids = topic_list(1001, ",", "\"");
    char *b = fmt("{\"topic\":\"t\",\"finish\":[%s]}", ids);
    BAD_POST("/pop", b, "'finish'", "1 to 1000 ids");
    free(b);
    free(ids);
}

static void test_pop_topics_array(void **state)
{
    (void)state;
    OK_POST("/pop", "{\"topics\":[\"a\",\"b\"]}");
    assert_int_equal(req.ntopics, 2);
    assert_string_equal(req.topics[0], "a");
    assert_string_equal(req.topics[1], "b");

    BAD_POST("/pop", "{\"topics\":[]}", "'topics'");
    BAD_POST("/pop", "{\"topics\":\"a\"}", "'topics'", "array");
    BAD_POST("/pop", "{\"topics\":[\"a\",1]}", "'topics'", "string");
    BAD_POST("/pop", "{\"topics\":[\"a\",null]}", "'topics'");
    BAD_POST("/pop", "{\"topics\":[\"a\",\"\"]}", "'topics'");
    BAD_POST("/pop", "{\"topics\":[\"a,b\"]}", "'topics'");
    BAD_POST("/pop", "{\"topics\":[\"a b\"]}", "'topics'");

    char *list = topic_list(64, ",", "\"");
    char *b = fmt("{\"topics\":[%s]}", list);
    OK_POST("/pop", b);
    assert_int_equal(req.ntopics, 64);
    assert_string_equal(req.topics[63], "t63");
    free(b);
    free(list);
    list = topic_list(65, ",", "\"");
    b = fmt("{\"topics\":[%s]}", list);
    BAD_POST("/pop", b, "'topics'", "64");
    free(b);
    free(list);

    BAD_POST("/pop", "{\"topic\":\"a\",\"topics\":[\"b\"]}", "'topic'", "'topics'");
    BAD_POST("/pop", "{\"topic\":\"a\",\"topics\":[\"a\"]}", "'topic'", "'topics'");
}

static void test_pop_timeout_count(void **state)
{
    (void)state;
    OK_POST("/pop", "{\"topic\":\"t\",\"timeout\":0}");
    assert_int_equal(req.timeout_ms, 0);
    OK_POST("/pop", "{\"topic\":\"t\",\"timeout\":0.25}");
    assert_int_equal(req.timeout_ms, 250);
    OK_POST("/pop", "{\"topic\":\"t\",\"timeout\":60}");
    assert_int_equal(req.timeout_ms, 60000);
    BAD_POST("/pop", "{\"topic\":\"t\",\"timeout\":60.001}", "'timeout'");
    BAD_POST("/pop", "{\"topic\":\"t\",\"timeout\":61}", "'timeout'");
    BAD_POST("/pop", "{\"topic\":\"t\",\"timeout\":-1}", "'timeout'");
    BAD_POST("/pop", "{\"topic\":\"t\",\"timeout\":\"5\"}", "'timeout'", "number");

    OK_POST("/pop", "{\"topic\":\"t\",\"count\":1}");
    assert_int_equal(req.count, 1); /* present, even 1: the list answer */
    OK_POST("/pop", "{\"topic\":\"t\",\"count\":100,\"timeout\":1.5}");
    assert_int_equal(req.count, 100);
    assert_int_equal(req.timeout_ms, 1500);
    BAD_POST("/pop", "{\"topic\":\"t\",\"count\":0}", "'count'");
    BAD_POST("/pop", "{\"topic\":\"t\",\"count\":101}", "'count'");
    BAD_POST("/pop", "{\"topic\":\"t\",\"count\":-1}", "'count'");
    BAD_POST("/pop", "{\"topic\":\"t\",\"count\":2.0}", "'count'", "integer");
    BAD_POST("/pop", "{\"topic\":\"t\",\"count\":\"2\"}", "'count'", "integer");
}

/* ------------------------------------------------------------------------ */
/* finish / delete                                                           */
/* ------------------------------------------------------------------------ */

static char *id_batch(size_t n, size_t bad_index, const char *bad)
{
    dq_buf b;
    buf_init(&b);
    buf_puts(&b, "{\"ids\":[");
    for (size_t i = 0; i < n; i++) {
        if (i == bad_index)
            buf_printf(&b, "%s%s", i ? "," : "", bad);
        else
            buf_printf(&b, "%s\"id%zu\"", i ? "," : "", i);
    }
    buf_puts(&b, "]}");
    return b.data;
}

static void test_finish_delete(void **state)
{
    (void)state;
    static const char *const paths[] = {"/finish", "/delete"};
    static const dq_command cmds[] = {CMD_FINISH, CMD_DELETE};
    for (size_t k = 0; k < 2; k++) {
        const char *p = paths[k];
        OK_POST(p, "{\"id\":\"order-42\"}");
        assert_int_equal(req.cmd, cmds[k]);
        assert_int_equal(req.batch, 0);
        assert_int_equal(req.nids, 1);
        assert_string_equal(req.ids[0], "order-42");

        OK_POST(p, "{\"ids\":[\"a\",\"b\"]}");
        assert_int_equal(req.batch, 1);
        assert_int_equal(req.nids, 2);
        assert_string_equal(req.ids[0], "a");
        assert_string_equal(req.ids[1], "b");

        BAD_POST(p, "{}", "'id'", "required");
        BAD_POST(p, "{\"id\":1}", "'id'", "string");
        BAD_POST(p, "{\"id\":\"\"}", "'id'");
        BAD_POST(p, "{\"id\":\"a b\"}", "'id'");
        BAD_POST(p, "{\"id\":\"a\",\"ids\":[\"b\"]}", "'id'", "'ids'");
        BAD_POST(p, "{\"ids\":[]}", "'ids'", "1000");
        BAD_POST(p, "{\"ids\":\"a\"}", "'ids'", "array");
        BAD_POST(p, "{\"ids\":null}", "'ids'", "array");

        char *b = id_batch(1000, 1000, "");
        OK_POST(p, b);
        assert_int_equal(req.nids, 1000);
        assert_string_equal(req.ids[999], "id999");
        free(b);
        b = id_batch(1001, 1001, "");
        BAD_POST(p, b, "'ids'", "1000");
        free(b);

        b = id_batch(5, 3, "\"a b\"");
        BAD_POST(p, b, "ids[3]");
        free(b);
        b = id_batch(5, 0, "\"\"");
        BAD_POST(p, b, "ids[0]");
        free(b);
        b = id_batch(5, 1, "7");
        BAD_POST(p, b, "ids[1]", "string");
        free(b);
        b = id_batch(5, 4, "null");
        BAD_POST(p, b, "ids[4]");
        free(b);
        char *big = rep('i', 257);
        char *q = fmt("\"%s\"", big);
        b = id_batch(1000, 999, q);
        BAD_POST(p, b, "ids[999]");
        free(b);
        free(q);
        q = fmt("\"%.256s\"", big);
        b = id_batch(3, 2, q);
        OK_POST(p, b);
        assert_int_equal(strlen(req.ids[2]), 256);
        free(b);
        free(q);
        free(big);
    }
}

/* ------------------------------------------------------------------------ */
/* get, touch, bury, release                                                 */
/* ------------------------------------------------------------------------ */

static void test_single_id_commands(void **state)
{
    (void)state;
    static const char *const paths[] = {"/get", "/touch", "/bury", "/release"};
    static const dq_command cmds[] = {CMD_GET, CMD_TOUCH, CMD_BURY, CMD_RELEASE};
    for (size_t k = 0; k < 4; k++) {
        const char *p = paths[k];
        OK_POST(p, "{\"id\":\"j1\"}");
        assert_int_equal(req.cmd, cmds[k]);
        assert_int_equal(req.nids, 1);
        assert_string_equal(req.ids[0], "j1");
        BAD_POST(p, "{}", "'id'", "required");
        BAD_POST(p, "{\"ids\":[\"j1\"]}", "'id'", "required");
        BAD_POST(p, "{\"id\":[\"j1\"]}", "'id'", "string");
        BAD_POST(p, "{\"id\":\"j 1\"}", "'id'");
        BAD_POST(p, "{\"id\":\"\"}", "'id'");
    }
}

static void test_release_delay(void **state)
{
    (void)state;
    OK_POST("/release", "{\"id\":\"j1\"}");
    assert_int_equal(req.delay_ms, 0);
    OK_POST("/release", "{\"id\":\"j1\",\"delay\":30}");
    assert_int_equal(req.delay_ms, 30000);
    OK_POST("/release", "{\"id\":\"j1\",\"delay\":0.5}");
    assert_int_equal(req.delay_ms, 500);
    OK_POST("/release", "{\"id\":\"j1\",\"delay\":315532800}");
    assert_int_equal(req.delay_ms, 315532800000LL);
    BAD_POST("/release", "{\"id\":\"j1\",\"delay\":-1}", "'delay'");
    BAD_POST("/release", "{\"id\":\"j1\",\"delay\":315532801}", "'delay'");
    BAD_POST("/release", "{\"id\":\"j1\",\"delay\":\"30\"}", "'delay'", "number");
    BAD_POST("/release", "{\"delay\":1}", "'id'", "required");
}

/* ------------------------------------------------------------------------ */
/* kick, stats, health, metrics                                              */
/* ------------------------------------------------------------------------ */

static void test_kick(void **state)
{
    (void)state;
    OK_POST("/kick", "{\"topic\":\"order\"}");
    assert_int_equal(req.cmd, CMD_KICK);
    assert_int_equal(req.ntopics, 1);
    assert_string_equal(req.topics[0], "order");
    assert_int_equal(req.count, 1); /* default */
    OK_POST("/kick", "{\"topic\":\"order\",\"count\":10}");
    assert_int_equal(req.count, 10);
    OK_POST("/kick", "{\"topic\":\"order\",\"count\":10000}");
    assert_int_equal(req.count, 10000);
    BAD_POST("/kick", "{\"topic\":\"order\",\"count\":10001}", "'count'");
    BAD_POST("/kick", "{\"topic\":\"order\",\"count\":0}", "'count'");
    BAD_POST("/kick", "{\"topic\":\"order\",\"count\":2.0}", "'count'", "integer");
    BAD_POST("/kick", "{\"topic\":\"order\",\"count\":\"2\"}", "'count'", "integer");
    BAD_POST("/kick", "{}", "'topic'", "required");
    BAD_POST("/kick", "{\"topic\":\"a,b\"}", "'topic'");
    BAD_POST("/kick", "{\"topic\":\"\"}", "'topic'");
    BAD_POST("/kick", "{\"topic\":1}", "'topic'", "string");
}

static void test_kick_by_id(void **state)
{
    (void)state;
    OK_POST("/kick", "{\"id\":\"j1\"}");
    assert_int_equal(req.nids, 1);
    assert_int_equal(req.batch, 0);
    assert_int_equal(req.ntopics, 0);
    assert_string_equal(req.ids[0], "j1");
    OK_POST("/kick", "{\"ids\":[\"j1\",\"j2\"]}");
    assert_int_equal(req.nids, 2);
    assert_int_equal(req.batch, 1);
    assert_string_equal(req.ids[1], "j2");
    BAD_POST("/kick", "{\"id\":\"j1\",\"topic\":\"order\"}", "'id'", "'topic'");
    BAD_POST("/kick", "{\"ids\":[\"j1\"],\"count\":2}", "'count'");
    BAD_POST("/kick", "{\"id\":\"j1\",\"ids\":[\"j2\"]}", "'ids'");
    BAD_POST("/kick", "{\"ids\":[]}", "'ids'");
    BAD_POST("/kick", "{\"ids\":[\"a b\"]}", "'ids[0]'");
}

static void test_reschedule(void **state)
{
    (void)state;
    OK_POST("/reschedule", "{\"id\":\"j1\",\"delay\":1.5}");
    assert_int_equal(req.cmd, CMD_RESCHEDULE);
    assert_int_equal(req.delay_ms, 1500);
    assert_int_equal(req.at_ms, -1);
    OK_POST("/reschedule", "{\"id\":\"j1\",\"at\":1767225600}");
    assert_int_equal(req.at_ms, 1767225600000LL);
    OK_POST("/reschedule", "{\"id\":\"j1\",\"delay\":0}");
    assert_int_equal(req.delay_ms, 0);
    BAD_POST("/reschedule", "{\"id\":\"j1\"}", "'delay'", "'at'");
    BAD_POST("/reschedule", "{\"id\":\"j1\",\"delay\":1,\"at\":5}", "cannot both");
    BAD_POST("/reschedule", "{\"id\":\"j1\",\"delay\":-1}", "'delay'");
    BAD_POST("/reschedule", "{\"delay\":1}", "'id'", "required");
    BAD_GET("/reschedule", "id=j1&delay=1", "needs POST",
            "(get, stats, health, metrics, schedules, jobs, policies)");
}

static void test_jobs(void **state)
{
    (void)state;
    OK_GET("/jobs", "topic=order&state=delay");
    assert_int_equal(req.cmd, CMD_JOBS);
    assert_string_equal(req.topics[0], "order");
    assert_string_equal(req.state, "delay");
    assert_int_equal(req.limit, 50); /* default */
    assert_null(req.cursor);
    OK_GET("/jobs", "topic=order&state=buried&limit=1000&cursor=1767225600000:order-1:x");
    assert_int_equal(req.limit, 1000);
    assert_string_equal(req.cursor, "1767225600000:order-1:x");
    OK_POST("/jobs", "{\"topic\":\"order\",\"state\":\"reserved\",\"limit\":1}");
    assert_string_equal(req.state, "reserved");
    OK_POST("/jobs", "{\"topic\":\"order\",\"state\":\"ready\"}");
    BAD_GET("/jobs", "state=ready", "'topic'", "required");
    BAD_GET("/jobs", "topic=order", "'state'", "required");
    BAD_GET("/jobs", "topic=order&state=Ready", "'state'");
    BAD_GET("/jobs", "topic=order&state=readyx", "'state'");
    BAD_GET("/jobs", "topic=order&state=ready&limit=0", "'limit'");
    BAD_GET("/jobs", "topic=order&state=ready&limit=1001", "'limit'");
    BAD_GET("/jobs", "topic=order&state=ready&cursor=", "'cursor'");
    BAD_GET("/jobs", "topic=order&state=ready&cursor=x:a", "'cursor'");
    BAD_GET("/jobs", "topic=order&state=ready&cursor=12", "'cursor'");
    BAD_GET("/jobs", "topic=order&state=ready&cursor=12:", "'cursor'");
    BAD_GET("/jobs", "topic=order&state=ready&cursor=12:a%20b", "'cursor'");
    BAD_GET("/jobs", "topic=order&state=ready&cursor=1234567890123456789:a", "'cursor'");
    BAD_POST("/jobs", "{\"topic\":\"order\",\"state\":1}", "'state'", "string");
    BAD_POST("/jobs", "{\"topic\":\"order\",\"state\":\"ready\",\"count\":1}", "'count'");
}

static void test_purge(void **state)
{
    (void)state;
    OK_POST("/purge", "{\"topic\":\"order\"}");
    assert_int_equal(req.cmd, CMD_PURGE);
    assert_string_equal(req.topics[0], "order");
    assert_null(req.state); /* every state */
    OK_POST("/purge", "{\"topic\":\"order\",\"state\":\"buried\"}");
    assert_string_equal(req.state, "buried");
    BAD_POST("/purge", "{}", "'topic'", "required");
    BAD_POST("/purge", "{\"state\":\"ready\"}", "'topic'", "required");
    BAD_POST("/purge", "{\"topic\":\"order\",\"state\":\"done\"}", "'state'",
             "delay, ready, reserved, buried");
    BAD_POST("/purge", "{\"topic\":\"order\",\"state\":\"\"}", "'state'");
    BAD_POST("/purge", "{\"topic\":\"order\",\"state\":null}", "'state'", "string");
    BAD_POST("/purge", "{\"topic\":\"order\",\"limit\":5}", "'limit'");
    BAD_GET("/purge", "topic=order", "'purge'", "POST");
}

static void test_pause(void **state)
{
    (void)state;
    OK_POST("/pause", "{\"topic\":\"order\"}");
    assert_int_equal(req.cmd, CMD_PAUSE);
    assert_int_equal(req.ntopics, 1);
    assert_string_equal(req.topics[0], "order");
    OK_POST("/resume", "{\"topic\":\"order\"}");
    assert_int_equal(req.cmd, CMD_RESUME);
    BAD_POST("/pause", "{}", "'topic'", "required");
    BAD_POST("/resume", "{\"topic\":\"a,b\"}", "'topic'");
    BAD_POST("/pause", "{\"topic\":\"order\",\"count\":1}", "'count'");
    BAD_POST("/pause", "{\"topic\":\"order\",\"topics\":[\"x\"]}", "'topics'");
}

static void test_schedule(void **state)
{
    (void)state;
    OK_POST("/schedule", "{\"id\":\"n\",\"topic\":\"r\",\"cron\":\"0 3 * * *\","
                         "\"tz\":\"Asia/Shanghai\",\"body\":{ \"a\" : [1, 2.50] },\"ttr\":5,"
                         "\"retries\":2,\"start\":100,\"end\":200}");
    assert_int_equal(req.cmd, CMD_SCHEDULE);
    const dq_schedule_spec *sc = &req.schedule;
    assert_string_equal(sc->id, "n");
    assert_string_equal(sc->topic, "r");
    assert_string_equal(req.topics[0], "r"); /* for auth_check */
    assert_string_equal(sc->cron, "0 3 * * *");
    assert_string_equal(sc->tz, "Asia/Shanghai");
    assert_int_equal(sc->body_len, strlen("{\"a\":[1,2.50]}"));
    assert_memory_equal(sc->body, "{\"a\":[1,2.50]}", sc->body_len);
    assert_int_equal(sc->ttr_ms, 5000);
    assert_int_equal(sc->retries, 2);
    assert_int_equal(sc->start_s, 100);
    assert_int_equal(sc->end_s, 200);
    OK_POST("/schedule", "{\"id\":\"n\",\"topic\":\"r\",\"every\":60,\"body\":\"x\"}");
    assert_null(req.schedule.cron);
    assert_int_equal(req.schedule.every_s, 60);
    assert_string_equal(req.schedule.tz, "UTC");
    assert_int_equal(req.schedule.retries, -1);
    assert_int_equal(req.schedule.start_s, -1);
    BAD_POST("/schedule", "{\"id\":\"a@b\",\"topic\":\"r\",\"every\":60,\"body\":1}", "'id'", "'@'");
    BAD_POST("/schedule", "{\"id\":\"n\",\"topic\":\"r\",\"body\":1}", "'cron' or 'every'");
    BAD_POST("/schedule", "{\"id\":\"n\",\"topic\":\"r\",\"every\":1,\"cron\":\"* * * * *\",\"body\":1}",
             "cannot both");
    BAD_POST("/schedule", "{\"id\":\"n\",\"topic\":\"r\",\"cron\":\"60 * * * *\",\"body\":1}", "'cron'");
    BAD_POST("/schedule", "{\"id\":\"n\",\"topic\":\"r\",\"every\":0,\"body\":1}", "'every'");
    BAD_POST("/schedule", "{\"id\":\"n\",\"topic\":\"r\",\"every\":1.5,\"body\":1}", "'every'");
    BAD_POST("/schedule", "{\"id\":\"n\",\"topic\":\"r\",\"every\":31622401,\"body\":1}", "'every'");
    BAD_POST("/schedule", "{\"id\":\"n\",\"topic\":\"r\",\"every\":1,\"start\":5,\"end\":4,\"body\":1}",
             "'end'");
    BAD_POST("/schedule", "{\"id\":\"n\",\"topic\":\"r\",\"every\":1}", "'body'", "required");
    BAD_POST("/schedule", "{\"id\":\"n\",\"topic\":\"r\",\"every\":1,\"body\":1,\"delay\":1}",
             "'delay'", "not a field of schedule");
    char *long_id = rep('i', DQ_SCHEDULE_ID_MAX + 1);
    char *body = fmt("{\"id\":\"%s\",\"topic\":\"r\",\"every\":1,\"body\":1}", long_id);
    BAD_POST("/schedule", body, "'id'");
    free(body);
    free(long_id);
    OK_POST("/unschedule", "{\"id\":\"n\"}");
    assert_string_equal(req.ids[0], "n");
    BAD_POST("/unschedule", "{\"id\":\"n@1\"}", "'id'");
    OK_GET("/schedules", NULL);
    assert_int_equal(req.nids, 0);
    OK_GET("/schedules", "id=n&preview=100");
    assert_string_equal(req.ids[0], "n");
    assert_int_equal(req.preview, 100);
    BAD_GET("/schedules", "preview=3", "'preview'", "'id'");
    BAD_GET("/schedules", "id=n&preview=101", "'preview'");
    BAD_GET("/schedule", "id=n", "POST");
}

static void test_stats(void **state)
{
    (void)state;
    OK_POST("/stats", "{}");
    assert_int_equal(req.cmd, CMD_STATS);
    assert_int_equal(req.ntopics, 0);
    OK_POST("/", "{\"command\":\"stats\",\"topic\":\"order\"}");
    assert_int_equal(req.ntopics, 1);
    assert_string_equal(req.topics[0], "order");
    BAD_POST("/stats", "{\"topic\":\"\"}", "'topic'");
    BAD_POST("/stats", "{\"topic\":\"a b\"}", "'topic'");
    BAD_POST("/stats", "{\"topic\":[\"a\"]}", "'topic'", "string");
    BAD_POST("/stats", "{\"topic\":null}", "'topic'");
}

/* Every byte of s as \u00XX. The returned string is owned by the caller. */
static char *escape_all(const char *s)
{
    size_t n = strlen(s);
    char *out = malloc(n * 6 + 1);
    assert_non_null(out);
    for (size_t i = 0; i < n; i++)
        snprintf(out + i * 6, 7, "\\u%04x", (unsigned char)s[i]);
    return out;
}

/* A field name means the same field however it is spelled: every name of
 * fields.def with every byte escaped (key_concurrency: 90 bytes raw) is the
 * field, not an unknown one. */
static void test_escaped_field_names(void **state)
{
    (void)state;
    for (int f = 0; f < NFIELDS; f++) {
        if (f == F_COMMAND)
            continue; /* below: it names the command */
        char *name = escape_all(field_name((dq_field)f));
        char *body = fmt("{\"%s\":1}", name);
        char *want = fmt("field '%s' is not a field of metrics", field_name((dq_field)f));
        BAD_POST("/metrics", body, want);
        free(name);
        free(body);
        free(want);
    }
    char *command = escape_all("command");
    char *body = fmt("{\"%s\":\"stats\"}", command);
    OK_POST("/", body);
    assert_int_equal(req.cmd, CMD_STATS);
    free(command);
    free(body);
    /* Partly escaped, and over 32 raw bytes. */
    OK_POST("/policy", "{\"topic\":\"n\",\"key\\u005f\\u0063\\u006f\\u006e\\u0063\\u0075\\u0072"
                       "\\u0072\\u0065ncy\":2}");
    assert_int_equal(req.policy.op[DQ_POLICY_KEY_CONCURRENCY], DQ_POLICY_SET);
    assert_int_equal(req.policy.value[DQ_POLICY_KEY_CONCURRENCY], 2);
}

/* Load balancers and probes append query strings of their own (cache
 * busters): health, which takes no fields, ignores its query string; every
 * other GET still refuses an unknown parameter. */
static void test_health_ignores_its_query_string(void **state)
{
    (void)state;
    OK_GET("/health", "x=1");
    assert_int_equal(req.cmd, CMD_HEALTH);
    OK_GET("/health", "x=%41&x=2&%zz");
    OK("HEAD", "/health", "probe", NULL);
    BAD_GET("/stats", "x=1", "unknown query parameter 'x'");
    BAD_GET("/metrics", "x=1", "unknown query parameter 'x'");
}

/* Only a page of the server's own site may send a request from a browser. */
static void test_origin(void **state)
{
    (void)state;
    assert_true(request_origin_allowed(NULL, "127.0.0.1:8080"));
    assert_true(request_origin_allowed(NULL, NULL));
    assert_true(request_origin_allowed("http://127.0.0.1:8080", "127.0.0.1:8080"));
    assert_true(request_origin_allowed("https://Queue.Example.com", "queue.example.com"));
    assert_false(request_origin_allowed("http://127.0.0.1:9000", "127.0.0.1:8080"));
    assert_false(request_origin_allowed("http://127.0.0.1", "127.0.0.1:8080"));
    assert_false(request_origin_allowed("http://evil.example", "queue.example.com"));
    assert_false(request_origin_allowed("null", "127.0.0.1:8080"));
    assert_false(request_origin_allowed("http://127.0.0.1:8080", NULL));
    assert_false(request_origin_allowed("http://127.0.0.1:8080", ""));
}

static void test_unknown_fields_refused(void **state)
{
    (void)state;
    /* A typo must never be obeyed by being ignored: "dealy" would make an
     * unpaid order's job ready at once. */
    BAD_POST("/add", "{\"topic\":\"t\",\"body\":1,\"dealy\":1800}", "unknown field 'dealy'");
    BAD_POST("/pop", "{\"topic\":\"t\",\"Timeout\":5}", "unknown field 'Timeout'");
    BAD_POST("/finish", "{\"id\":\"x\",\"topic\":\"t\"}", "field 'topic'", "not a field of finish");
    BAD_POST("/health", "{\"id\":7}", "field 'id'", "not a field of health");
    BAD_POST("/metrics", "{\"anything\":[1,2,{}]}", "unknown field 'anything'");
    BAD_GET("/get", "id=a&topic=t", "field 'topic'", "not a field of get");
    /* In a batch, each job's fields are checked, and the top level takes
     * no job field. */
    BAD_POST("/add", "{\"jobs\":[{\"topic\":\"t\",\"body\":1},{\"topic\":\"t\",\"body\":1,\"x\":2}]}",
             "'jobs[1].x'");
    BAD_POST("/add", "{\"topic\":\"t\",\"jobs\":[{\"topic\":\"t\",\"body\":1}]}", "field 'topic'",
             "not a field of add");
    /* A field name is its whole decoded string: a NUL does not end it. */
    BAD_POST("/add", "{\"topic\\u0000zz\":\"t\",\"body\":1}", "unknown field 'topic\\u0000zz'");
    BAD_POST("/add", "{\"top\\u0069c\":\"t\",\"body\":1,\"topic\":\"u\"}", "duplicate key");
    OK_POST("/add", "{\"top\\u0069c\":\"t\",\"b\\u006fdy\":1}");
    assert_string_equal(req.jobs[0].topic, "t");
    BAD_GET("/get", "id%00x=a", "unknown query parameter 'id\\u0000x'");
    /* A long unknown name is quoted shortened, still valid UTF-8. */
    char *longname = rep('n', 500);
    char *body = fmt("{\"%s\":1}", longname);
    BAD_POST("/stats", body, "unknown field 'nnnn", "...");
    assert_true(strlen(err) < 200);
    free(body);
    free(longname);
}

static void test_free_is_reusable(void **state)
{
    (void)state;
    /* request_free leaves a zeroed request; parsing again is fine. */
    OK_POST("/pop", "{\"topic\":\"a,b\"}");
    request_free(&req);
    live = 0;
    assert_null(req.topics);
    assert_null(req.query);
    assert_int_equal(req.ntopics, 0);
    request_free(&req); /* twice is harmless */
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_command_names),
        T(test_schedule),
        T(test_purge),
        T(test_pause),
        T(test_topic_valid),
        T(test_id_valid),
        T(test_command_form),
        T(test_path_form),
        T(test_path_command_mismatch),
        T(test_unknown_path),
        T(test_empty_body),
        T(test_body_must_be_object),
        T(test_nesting_in_request),
        T(test_methods),
        T(test_get_read_only),
        T(test_get_other_commands),
        T(test_get_query_decoding),
        T(test_get_query_repeated),
        T(test_get_query_malformed),
        T(test_add_minimal),
        T(test_add_topic_and_id),
        T(test_add_delay_at),
        T(test_add_ttr),
        T(test_add_retries),
        T(test_add_body),
        T(test_add_body_size),
        T(test_add_body_too_large),
        T(test_add_batch),
        T(test_add_batch_errors),
        T(test_add_key),
        T(test_add_trace_fields),
        T(test_add_replace),
        T(test_add_trace_headers),
        T(test_policy),
        T(test_pop_topic),
        T(test_pop_topics_array),
        T(test_pop_finish),
        T(test_pop_timeout_count),
        T(test_finish_delete),
        T(test_single_id_commands),
        T(test_release_delay),
        T(test_kick),
        T(test_kick_by_id),
        T(test_reschedule),
        T(test_jobs),
        T(test_stats),
        T(test_unknown_fields_refused),
        T(test_escaped_field_names),
        T(test_health_ignores_its_query_string),
        T(test_origin),
        T(test_free_is_reusable),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
