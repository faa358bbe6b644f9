/* Unit tests for src/common/buf.c: the growable buffer and its JSON writers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/buf.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

/* Expects the buffer to hold exactly want (and to be NUL-terminated). */
static void expect_buf(const dq_buf *b, const char *want)
{
    assert_non_null(b->data);
    assert_int_equal(b->len, strlen(want));
    assert_memory_equal(b->data, want, b->len);
    assert_int_equal(b->data[b->len], '\0');
    assert_true(b->cap > b->len);
}

static void json_string_is(const char *in, size_t n, const char *want)
{
    dq_buf b;
    buf_init(&b);
    buf_put_json_string(&b, in, n);
    expect_buf(&b, want);
    buf_free(&b);
}

static void seconds_is(int64_t ms, const char *want)
{
    dq_buf b;
    buf_init(&b);
    buf_put_seconds(&b, ms);
    expect_buf(&b, want);
    buf_free(&b);
}

/* ------------------------------------------------------------------------ */
/* Basic buffer                                                              */
/* ------------------------------------------------------------------------ */

static void test_init_free(void **state)
{
    (void)state;
    dq_buf b;
    buf_init(&b);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    buf_reset(&b); /* no data yet: must not crash */
    assert_int_equal(b.len, 0);
    buf_free(&b);
    assert_null(b.data);
    buf_free(&b); /* twice is harmless */
}

static void test_append_puts_printf(void **state)
{
    (void)state;
    dq_buf b;
    buf_init(&b);
    buf_append(&b, "abc", 3);
    expect_buf(&b, "abc");
    buf_append(&b, "xyz", 0);
    expect_buf(&b, "abc");
    buf_puts(&b, "-def");
    expect_buf(&b, "abc-def");
    buf_printf(&b, "/%d/%s/", 42, "q");
    expect_buf(&b, "abc-def/42/q/");
    buf_reset(&b);
    expect_buf(&b, "");
    buf_puts(&b, "again");
    expect_buf(&b, "again");
    buf_free(&b);
}

static void test_append_embedded_nul(void **state)
{
    (void)state;
    dq_buf b;
    buf_init(&b);
    buf_append(&b, "a\0b", 3);
    assert_int_equal(b.len, 3);
    assert_memory_equal(b.data, "a\0b", 3);
    assert_int_equal(b.data[3], '\0');
    buf_free(&b);
}

static void test_put_i64(void **state)
{
    (void)state;
    dq_buf b;
    buf_init(&b);
    buf_put_i64(&b, 0);
    buf_puts(&b, " ");
    buf_put_i64(&b, -17);
    buf_puts(&b, " ");
    buf_put_i64(&b, INT64_MAX);
    buf_puts(&b, " ");
    buf_put_i64(&b, INT64_MIN);
    expect_buf(&b, "0 -17 9223372036854775807 -9223372036854775808");
    buf_free(&b);
}

static void test_growth_past_256(void **state)
{
    (void)state;
    dq_buf b;
    char want[1001];
    buf_init(&b);
    for (int i = 0; i < 1000; i++) {
        char c = (char)('a' + i % 26);
        buf_append(&b, &c, 1);
        want[i] = c;
    }
    want[1000] = '\0';
    expect_buf(&b, want);
    assert_true(b.cap >= 1001);
    buf_free(&b);
}

static void test_printf_growth(void **state)
{
    (void)state;
    dq_buf b;
    char big[600];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    buf_init(&b);
    buf_puts(&b, "<");
    buf_printf(&b, "%s>", big);
    assert_int_equal(b.len, 1 + 599 + 1);
    assert_int_equal(b.data[0], '<');
    assert_int_equal(b.data[1], 'x');
    assert_int_equal(b.data[599], 'x');
    assert_int_equal(b.data[600], '>');
    assert_int_equal(b.data[601], '\0');
    buf_free(&b);
}

/* ------------------------------------------------------------------------ */
/* JSON strings                                                              */
/* ------------------------------------------------------------------------ */

static void test_json_string_plain(void **state)
{
    (void)state;
    json_string_is("", 0, "\"\"");
    json_string_is("hello", 5, "\"hello\"");
    json_string_is("a/b", 3, "\"a/b\""); /* '/' need not be escaped */
}

static void test_json_string_quote_backslash(void **state)
{
    (void)state;
    json_string_is("say \"hi\"", 8, "\"say \\\"hi\\\"\"");
    json_string_is("C:\\dir\\", 7, "\"C:\\\\dir\\\\\"");
    json_string_is("\\\"", 2, "\"\\\\\\\"\"");
}

static void test_json_string_short_escapes(void **state)
{
    (void)state;
    json_string_is("a\nb\rc\td\be\ff", 11, "\"a\\nb\\rc\\td\\be\\ff\"");
}

static void test_json_string_control_chars(void **state)
{
    (void)state;
    json_string_is("\x01", 1, "\"\\u0001\"");
    json_string_is("\x1f", 1, "\"\\u001f\"");
    json_string_is("x\x0by", 3, "\"x\\u000by\"");
    json_string_is("\x1b[0m", 4, "\"\\u001b[0m\"");
    json_string_is("\0", 1, "\"\\u0000\"");
    json_string_is("a\0b", 3, "\"a\\u0000b\"");
    /* DEL is not a control character in JSON. */
    json_string_is("\x7f", 1, "\"\x7f\"");
}

static void test_json_string_utf8_passthrough(void **state)
{
    (void)state;
    json_string_is("caf\xc3\xa9", 5, "\"caf\xc3\xa9\"");
    json_string_is("\xe2\x82\xac", 3, "\"\xe2\x82\xac\"");
    json_string_is("\xf0\x9f\x98\x80", 4, "\"\xf0\x9f\x98\x80\"");
}

static void test_json_string_appends(void **state)
{
    (void)state;
    dq_buf b;
    buf_init(&b);
    buf_puts(&b, "{\"id\":");
    buf_put_json_string(&b, "x", 1);
    buf_puts(&b, "}");
    expect_buf(&b, "{\"id\":\"x\"}");
    buf_free(&b);
}

static void test_json_string_growth(void **state)
{
    (void)state;
    /* 300 quotes become 600 bytes of escapes: far past the first 256. */
    char in[300];
    char want[2 + 600 + 1];
    memset(in, '"', sizeof in);
    want[0] = '"';
    for (size_t i = 0; i < 300; i++) {
        want[1 + 2 * i] = '\\';
        want[2 + 2 * i] = '"';
    }
    want[601] = '"';
    want[602] = '\0';
    json_string_is(in, sizeof in, want);

    /* 100 control characters become 600 bytes of \u00XX. */
    char ctl[100];
    dq_buf b;
    memset(ctl, 0x01, sizeof ctl);
    buf_init(&b);
    buf_put_json_string(&b, ctl, sizeof ctl);
    assert_int_equal(b.len, 2 + 600);
    for (size_t i = 0; i < 100; i++)
        assert_memory_equal(b.data + 1 + 6 * i, "\\u0001", 6);
    assert_int_equal(b.data[601], '"');
    buf_free(&b);
}

/* ------------------------------------------------------------------------ */
/* Seconds                                                                   */
/* ------------------------------------------------------------------------ */

static void test_seconds(void **state)
{
    (void)state;
    seconds_is(60000, "60");
    seconds_is(250, "0.25");
    seconds_is(1500, "1.5");
    seconds_is(1, "0.001");
    seconds_is(0, "0");
    seconds_is(1000, "1");
    seconds_is(10, "0.01");
    seconds_is(100, "0.1");
    seconds_is(1234, "1.234");
    seconds_is(86400000, "86400");
    seconds_is(86399999, "86399.999");
}

static void test_seconds_appends(void **state)
{
    (void)state;
    dq_buf b;
    buf_init(&b);
    buf_puts(&b, "{\"ttr\":");
    buf_put_seconds(&b, 2500);
    buf_puts(&b, "}");
    expect_buf(&b, "{\"ttr\":2.5}");
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_free),
        cmocka_unit_test(test_append_puts_printf),
        cmocka_unit_test(test_append_embedded_nul),
        cmocka_unit_test(test_put_i64),
        cmocka_unit_test(test_growth_past_256),
        cmocka_unit_test(test_printf_growth),
        cmocka_unit_test(test_json_string_plain),
        cmocka_unit_test(test_json_string_quote_backslash),
        cmocka_unit_test(test_json_string_short_escapes),
        cmocka_unit_test(test_json_string_control_chars),
        cmocka_unit_test(test_json_string_utf8_passthrough),
        cmocka_unit_test(test_json_string_appends),
        cmocka_unit_test(test_json_string_growth),
        cmocka_unit_test(test_seconds),
        cmocka_unit_test(test_seconds_appends),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
