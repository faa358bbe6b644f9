/* Unit tests for src/protocol/auth.c: tokens file rules and access checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "protocol/auth.h"

static const char *const FILE_TEXT =
    "# admin: everything\n"
    "admin-token-0123456789\n"
    "\n"
    "  producer-token-abcdef   topics=order.,mail.   commands=add,stats  \n"
    "consumer-token-abcdef topics=order. commands=pop,finish,touch\n";

static dq_auth *load_ok(const char *text)
{
    char err[512] = "";
    dq_auth *a = auth_parse(text, "tokens", err, sizeof err);
    if (!a)
        fail_msg("unexpected error: %s", err);
    return a;
}

static void load_bad(const char *text, const char *needle)
{
    char err[512] = "";
    dq_auth *a = auth_parse(text, "tokens", err, sizeof err);
    if (a) {
        auth_free(a);
        fail_msg("accepted: %s", text);
    }
    if (!strstr(err, needle))
        fail_msg("error '%s' does not mention '%s'", err, needle);
}

static void test_find(void **state)
{
    (void)state;
    dq_auth *a = load_ok(FILE_TEXT);
    assert_non_null(auth_find(a, "Bearer admin-token-0123456789"));
    assert_non_null(auth_find(a, "bearer admin-token-0123456789"));
    assert_null(auth_find(a, "Bearer admin-token-012345678"));   /* prefix of a token */
    assert_null(auth_find(a, "Bearer admin-token-01234567890")); /* longer */
    assert_null(auth_find(a, "Bearer admin-token-0123456788"));  /* last byte differs */
    assert_null(auth_find(a, "admin-token-0123456789"));         /* no scheme */
    assert_null(auth_find(a, "Basic admin-token-0123456789"));
    assert_null(auth_find(a, "Bearer "));
    assert_null(auth_find(a, NULL));
    auth_free(a);
}

static void test_unlimited_token(void **state)
{
    (void)state;
    dq_auth *a = load_ok(FILE_TEXT);
    const dq_token *t = auth_find(a, "Bearer admin-token-0123456789");
    assert_non_null(t);
    for (int c = 0; c < CMD_COUNT; c++)
        assert_true(auth_command_allowed(t, (dq_command)c));
    assert_false(auth_topic_limited(t));
    assert_true(auth_topic_allowed(t, "anything"));
    auth_free(a);
}

static void test_limited_tokens(void **state)
{
    (void)state;
    dq_auth *a = load_ok(FILE_TEXT);
    const dq_token *p = auth_find(a, "Bearer producer-token-abcdef");
    assert_non_null(p);
    assert_true(auth_command_allowed(p, CMD_ADD));
    assert_true(auth_command_allowed(p, CMD_STATS));
    assert_false(auth_command_allowed(p, CMD_POP));
    assert_false(auth_command_allowed(p, CMD_DELETE));
    assert_true(auth_topic_limited(p));
    assert_true(auth_topic_allowed(p, "order.created"));
    assert_true(auth_topic_allowed(p, "mail.welcome"));
    assert_false(auth_topic_allowed(p, "orders"));
    assert_false(auth_topic_allowed(p, "mail"));

    const dq_token *c = auth_find(a, "Bearer consumer-token-abcdef");
    assert_non_null(c);
    assert_true(auth_command_allowed(c, CMD_POP));
    assert_false(auth_command_allowed(c, CMD_ADD));
    assert_false(auth_topic_allowed(c, "mail.x"));
    auth_free(a);
}

/* purge comes with delete's right: a token that may delete may purge, one
 * that may not cannot, and a tokens file may not list purge on its own. */
static void test_purge_needs_the_delete_right(void **state)
{
    (void)state;
    dq_auth *a = load_ok("deleter-token-0123456789 commands=delete\n"
                         "adder-token-0123456789 commands=add,stats\n");
    assert_true(auth_command_allowed(auth_find(a, "Bearer deleter-token-0123456789"), CMD_PURGE));
    assert_false(auth_command_allowed(auth_find(a, "Bearer adder-token-0123456789"), CMD_PURGE));
    auth_free(a);
    load_bad("good-token-0123456789 commands=purge\n", "list delete");
}

/* The answer auth_check gives the token for a parsed POST /<cmd> body. */
static dq_status check(const dq_auth *a, const char *token, const char *cmd, const char *body)
{
    char path[32], text[256], err[512], allow[AUTH_ALLOW_MAX];
    snprintf(path, sizeof path, "/%s", cmd);
    snprintf(text, sizeof text, "%s", body);
    json_doc doc;
    json_doc_init(&doc);
    dq_request req;
    dq_limits lim = {65536, 60000, NULL};
    dq_status st = request_parse(&doc, "POST", path, NULL, NULL, text, strlen(text), &lim, &req,
                                 err, sizeof err);
    if (st != DQ_OK)
        fail_msg("%s %s: %s", cmd, body, err);
    char header[300];
    snprintf(header, sizeof header, "Bearer %s", token);
    st = auth_check(a, header, &req, allow, sizeof allow, err, sizeof err);
    request_free(&req);
    json_doc_free(&doc);
    return st;
}

/* A field that acts like another command needs that command's right too
 * (commands.def's DQ_FIELD_RIGHT): pop's finish removes jobs as finish
 * does; add's replace overwrites a job as delete and add would, in a batch
 * as alone. */
static void test_fields_need_their_rights(void **state)
{
    (void)state;
    dq_auth *a = load_ok("popper-token-0123456789 commands=pop\n"
                         "worker-token-0123456789 commands=pop,finish\n"
                         "adder-token-0123456789 commands=add\n"
                         "upserter-token-0123456789 commands=add,delete\n");
    const char *pop_finish[] = {"{\"topic\":\"a\",\"finish\":\"j1\"}",
                                "{\"topic\":\"a\",\"finish\":[\"j1\",\"j2\"]}"};
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(check(a, "popper-token-0123456789", "pop", pop_finish[i]), DQ_UNAUTHORIZED);
        assert_int_equal(check(a, "worker-token-0123456789", "pop", pop_finish[i]), DQ_OK);
    }
    assert_int_equal(check(a, "popper-token-0123456789", "pop", "{\"topic\":\"a\"}"), DQ_OK);
    const char *replace[] = {
        "{\"topic\":\"a\",\"id\":\"j1\",\"replace\":true,\"body\":1}",
        "{\"jobs\":[{\"topic\":\"a\",\"body\":1},"
        "{\"topic\":\"a\",\"id\":\"j1\",\"replace\":true,\"body\":1}]}"};
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(check(a, "adder-token-0123456789", "add", replace[i]), DQ_UNAUTHORIZED);
        assert_int_equal(check(a, "upserter-token-0123456789", "add", replace[i]), DQ_OK);
    }
    assert_int_equal(check(a, "adder-token-0123456789", "add", "{\"topic\":\"a\",\"body\":1}"),
                     DQ_OK);
    auth_free(a);
}

static void test_bad_files(void **state)
{
    (void)state;
    load_bad("", "no tokens");
    load_bad("# only a comment\n\n", "no tokens");
    load_bad("short\n", "16 to 256");
    load_bad("good-token-0123456789 topics=\n", "topics=");
    load_bad("good-token-0123456789 topics=a b\n", "unknown option");
    load_bad("good-token-0123456789 topics=bad!char\n", "topics=");
    load_bad("good-token-0123456789 commands=add,fly\n", "commands=");
    load_bad("good-token-0123456789 colour=blue\n", "unknown option");
    load_bad("good-token-0123456789\nbad\n", "token 2");
}

static void test_load_missing_file(void **state)
{
    (void)state;
    char err[512] = "";
    assert_null(auth_load("/nonexistent/delayq-tokens", err, sizeof err));
    assert_non_null(strstr(err, "auth_file"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find),
        cmocka_unit_test(test_unlimited_token),
        cmocka_unit_test(test_limited_tokens),
        cmocka_unit_test(test_purge_needs_the_delete_right),
        cmocka_unit_test(test_fields_need_their_rights),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_load_missing_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
