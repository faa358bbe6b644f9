/* Unit tests for src/json_strict.c: strict RFC 8259 parsing in front of json-c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "json_strict.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

/* Parses text[0..n) into a copy without a terminating NUL past n, so the
 * parser cannot rely on one. */
static int parse_n(const char *text, size_t n, json_object **out, char *err, size_t errlen)
{
    char *copy = malloc(n ? n : 1);
    assert_non_null(copy);
    memcpy(copy, text, n);
    int rc = json_parse_strict(copy, n, out, err, errlen);
    free(copy);
    return rc;
}

/* Expects a rejection whose message contains want (or just a message). */
static void rejects_n(const char *text, size_t n, const char *want)
{
    char err[256] = "";
    json_object *out = (json_object *)&err; /* must be reset to NULL */
    int rc = parse_n(text, n, &out, err, sizeof err);
    if (rc != -1)
        fail_msg("accepted %.*s", (int)n, text);
    assert_null(out);
    assert_true(strlen(err) > 0);
    if (want && !strstr(err, want))
        fail_msg("error for %.*s is \"%s\", expected it to mention \"%s\"", (int)n, text, err, want);
}

static void rejects(const char *text, const char *want)
{
    rejects_n(text, strlen(text), want);
}

/* Expects acceptance and returns the tree (the caller puts it). */
static json_object *accepts_n(const char *text, size_t n)
{
    char err[256] = "";
    json_object *out = NULL;
    int rc = parse_n(text, n, &out, err, sizeof err);
    if (rc != 0)
        fail_msg("rejected %.*s: %s", (int)n, text, err);
    return out;
}

static json_object *accepts(const char *text)
{
    return accepts_n(text, strlen(text));
}

/* Expects acceptance and that json-c prints the tree as want. */
static void roundtrips(const char *text, const char *want)
{
    json_object *o = accepts(text);
    assert_string_equal(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
                                                              JSON_C_TO_STRING_NOSLASHESCAPE),
                        want);
    json_object_put(o);
}

/* n nested arrays, the innermost holding inner. */
static char *nested(int n, const char *inner)
{
    size_t len = strlen(inner);
    char *s = malloc(2 * (size_t)n + len + 1);
    assert_non_null(s);
    memset(s, '[', (size_t)n);
    memcpy(s + n, inner, len);
    memset(s + n + len, ']', (size_t)n);
    s[2 * n + len] = '\0';
    return s;
}

/* ------------------------------------------------------------------------ */
/* Valid documents                                                           */
/* ------------------------------------------------------------------------ */

static void test_valid_objects(void **state)
{
    (void)state;
    roundtrips("{}", "{}");
    roundtrips(" { } ", "{}");
    roundtrips("{\"a\":1}", "{\"a\":1}");
    roundtrips("\t{\r\n \"a\" : [ 1 , 2.5 , -3e2 , true , false , null ] ,\"b\":{\"c\":\"d\"}}\n",
               "{\"a\":[1,2.5,-3e2,true,false,null],\"b\":{\"c\":\"d\"}}");
    roundtrips("{\"command\":\"add\",\"topic\":\"t\",\"body\":{\"x\":[{},[]]}}",
               "{\"command\":\"add\",\"topic\":\"t\",\"body\":{\"x\":[{},[]]}}");

    json_object *o = accepts("{\"n\":-0.5,\"i\":9007199254740993,\"z\":0,\"e\":1E+2}");
    json_object *v;
    assert_true(json_object_object_get_ex(o, "n", &v));
    assert_true(json_object_get_double(v) == -0.5);
    assert_true(json_object_object_get_ex(o, "i", &v));
    assert_true(json_object_is_type(v, json_type_int));
    assert_true(json_object_get_int64(v) == 9007199254740993LL);
    assert_true(json_object_object_get_ex(o, "e", &v));
    assert_true(json_object_get_double(v) == 100.0);
    json_object_put(o);
}

static void test_valid_scalars_and_arrays(void **state)
{
    (void)state;
    roundtrips("[]", "[]");
    roundtrips("[1,[2,[3]]]", "[1,[2,[3]]]");
    roundtrips("\"x\"", "\"x\"");
    roundtrips("123", "123");
    roundtrips("-1.5", "-1.5");
    roundtrips(" 0 ", "0");
    roundtrips("true", "true");
    roundtrips("false", "false");
    roundtrips("1e-400", "1e-400"); /* underflow is fine: only overflow is rejected */

    /* A top-level null is valid JSON; the tree is json-c's NULL. */
    char err[256] = "";
    json_object *out = (json_object *)&err;
    assert_int_equal(parse_n("null", 4, &out, err, sizeof err), 0);
    assert_null(out);
}

static void test_valid_strings_and_escapes(void **state)
{
    (void)state;
    json_object *o = accepts("[\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"]");
    assert_string_equal(json_object_get_string(json_object_array_get_idx(o, 0)),
                        "\" \\ / \b \f \n \r \t");
    json_object_put(o);

    /* Escaped unicode: BMP, a surrogate pair, and raw UTF-8 side by side. */
    o = accepts("{\"a\":\"\\u00e9\\u20AC\\ud83d\\ude00 caf\xc3\xa9 \xf0\x9f\x98\x80\"}");
    json_object *v;
    assert_true(json_object_object_get_ex(o, "a", &v));
    assert_string_equal(json_object_get_string(v),
                        "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 caf\xc3\xa9 \xf0\x9f\x98\x80");
    json_object_put(o);

    /* An escaped NUL is legal JSON; the string keeps its length. */
    o = accepts("\"a\\u0000b\"");
    assert_int_equal(json_object_get_string_len(o), 3);
    assert_memory_equal(json_object_get_string(o), "a\0b", 3);
    json_object_put(o);

    /* Largest code point, U+10FFFF, raw. */
    json_object_put(accepts("\"\xf4\x8f\xbf\xbf\""));
}

static void test_not_nul_terminated(void **state)
{
    (void)state;
    /* Only the first n bytes count, whatever follows them in memory. */
    const char *text = "{\"a\":1}garbage";
    json_object *o = accepts_n(text, 7);
    assert_int_equal(json_object_object_length(o), 1);
    json_object_put(o);
    o = accepts_n("12345", 2);
    assert_int_equal(json_object_get_int(o), 12);
    json_object_put(o);
}

/* ------------------------------------------------------------------------ */
/* Rejected: not JSON                                                        */
/* ------------------------------------------------------------------------ */

static void test_nan_infinity(void **state)
{
    (void)state;
    rejects("{\"a\":NaN}", NULL);
    rejects("{\"a\":Infinity}", NULL);
    rejects("{\"a\":-Infinity}", NULL);
    rejects("{\"a\":nan}", NULL);
    rejects("{\"a\":-inf}", NULL);
    rejects("NaN", NULL);
    rejects("[Infinity]", NULL);
}

static void test_number_overflow(void **state)
{
    (void)state;
    rejects("{\"a\":1e400}", "range");
    rejects("{\"a\":-1e400}", "range");
    rejects("[1.5e309]", "range");
    rejects("1e400", "range");
}

static void test_bad_numbers(void **state)
{
    (void)state;
    rejects("[01]", NULL);
    rejects("[1.]", "number");
    rejects("[.5]", NULL);
    rejects("[+1]", NULL);
    rejects("[-]", "number");
    rejects("[1e]", "number");
    rejects("[1e+]", "number");
    rejects("[0x10]", NULL);
    rejects("[1 2]", NULL);
}

static void test_single_quotes(void **state)
{
    (void)state;
    rejects("{'a':1}", "double-quoted");
    rejects("{\"a\":'x'}", NULL);
    rejects("['x']", NULL);
}

static void test_trailing_commas(void **state)
{
    (void)state;
    rejects("{\"a\":1,}", NULL);
    rejects("[1,]", NULL);
    rejects("[1,,2]", NULL);
    rejects("{,}", NULL);
    rejects("[,]", NULL);
}

static void test_structure_errors(void **state)
{
    (void)state;
    rejects("{\"a\" 1}", "':'");
    rejects("{\"a\":1 \"b\":2}", NULL);
    rejects("{a:1}", "double-quoted");
    rejects("{\"a\":1", NULL);
    rejects("[1", NULL);
    rejects("{\"a\":}", NULL);
    rejects("tru", NULL);
    rejects("True", NULL);
    rejects("nul", NULL);
    rejects("{\"a\":undefined}", NULL);
    rejects("/* c */ {}", NULL);
    rejects("{} // c", NULL);
}

static void test_trailing_garbage(void **state)
{
    (void)state;
    rejects("{}x", "trailing");
    rejects("{} {}", "trailing");
    rejects("[1]]", "trailing");
    rejects("{\"a\":1}}", "trailing");
    rejects("1 2", "trailing");
    rejects_n("{}\0", 3, "trailing");
}

static void test_empty_input(void **state)
{
    (void)state;
    rejects_n("", 0, "end");
    rejects("   ", "end");
    rejects("\n\t", "end");
}

/* ------------------------------------------------------------------------ */
/* Rejected: duplicate keys                                                  */
/* ------------------------------------------------------------------------ */

static void test_duplicate_keys(void **state)
{
    (void)state;
    rejects("{\"a\":1,\"a\":1}", "duplicate");
    rejects("{\"a\":1,\"b\":2,\"a\":3}", "duplicate");
    rejects("{\"command\":\"add\",\"command\":\"pop\"}", "duplicate");
    /* The overwritten value held members of its own. */
    rejects("{\"a\":{\"x\":1,\"y\":2},\"a\":{\"x\":1,\"y\":2}}", "duplicate");
    /* Nested. */
    rejects("{\"o\":{\"k\":1,\"k\":2}}", "duplicate");
    rejects("{\"o\":{\"p\":{\"q\":{\"k\":1,\"k\":2}}}}", "duplicate");
    /* In arrays of objects, top level and nested. */
    rejects("[{\"a\":1},{\"b\":1,\"b\":2}]", "duplicate");
    rejects("{\"jobs\":[{\"topic\":\"t\",\"body\":1},{\"topic\":\"t\",\"topic\":\"u\",\"body\":1}]}",
            "duplicate");
    rejects("{\"x\":[[{\"a\":[{\"b\":1,\"b\":1}]}]]}", "duplicate");
    /* The same key in different objects is not a duplicate. */
    json_object_put(accepts("{\"a\":{\"a\":{\"a\":1}},\"b\":[{\"a\":1},{\"a\":2}]}"));
    /* Case matters: ttr and TTR are different keys. */
    json_object_put(accepts("{\"ttr\":1,\"TTR\":2}"));
}

static void test_duplicate_keys_escaped(void **state)
{
    (void)state;
    /* "\u0061" is "a": the same key spelled differently. */
    rejects("{\"a\":1,\"\\u0061\":2}", "duplicate");
}

/* ------------------------------------------------------------------------ */
/* Rejected: strings                                                         */
/* ------------------------------------------------------------------------ */

static void test_invalid_utf8(void **state)
{
    (void)state;
    /* Bad continuation byte. */
    rejects("[\"\xc3\x28\"]", "UTF-8");
    rejects("[\"\xe2\x82\x28\"]", "UTF-8");
    rejects("[\"\xf0\x9f\x98\x28\"]", "UTF-8");
    /* Lone continuation byte, invalid lead bytes. */
    rejects("[\"\x80\"]", "UTF-8");
    rejects("[\"\xbf\"]", "UTF-8");
    rejects("[\"\xfe\"]", "UTF-8");
    rejects("[\"\xff\"]", "UTF-8");
    rejects("[\"\xf8\x88\x80\x80\x80\"]", "UTF-8");
    /* Overlong forms. */
    rejects("[\"\xc0\xaf\"]", "UTF-8");
    rejects("[\"\xc1\xbf\"]", "UTF-8");
    rejects("[\"\xe0\x80\xaf\"]", "UTF-8");
    rejects("[\"\xf0\x80\x80\xaf\"]", "UTF-8");
    rejects("[\"\xc0\x80\"]", "UTF-8");
    /* Surrogates encoded in UTF-8. */
    rejects("[\"\xed\xa0\x80\"]", "UTF-8");
    rejects("[\"\xed\xbf\xbf\"]", "UTF-8");
    rejects("[\"\xed\xa0\xbd\xed\xb8\x80\"]", "UTF-8");
    /* Above U+10FFFF. */
    rejects("[\"\xf4\x90\x80\x80\"]", "UTF-8");
    rejects("[\"\xf5\x80\x80\x80\"]", "UTF-8");
    /* Truncated sequences, inside the string and at the end of input. */
    rejects("[\"\xe2\x82\"]", "UTF-8");
    rejects("[\"\xf0\x9f\x98\"]", "UTF-8");
    rejects_n("\"\xe2\x82", 3, NULL);
    rejects_n("\"\xc3", 2, NULL);
    /* In a key too. */
    rejects("{\"\xc3\x28\":1}", "UTF-8");
    /* Outside a string: not JSON at all. */
    rejects("[\xc3\xa9]", NULL);
}

static void test_control_chars(void **state)
{
    (void)state;
    rejects("[\"a\nb\"]", "control");
    rejects("[\"a\tb\"]", "control");
    rejects("[\"\x01\"]", "control");
    rejects("[\"\x1f\"]", "control");
    rejects("{\"k\x1by\":1}", "control");
    rejects_n("[\"a\0b\"]", 7, "control");
    /* DEL is allowed raw. */
    json_object_put(accepts("[\"\x7f\"]"));
}

static void test_bad_escapes(void **state)
{
    (void)state;
    rejects("[\"\\x41\"]", "escape");
    rejects("[\"\\a\"]", "escape");
    rejects("[\"\\'\"]", "escape");
    rejects("[\"\\U0041\"]", "escape");
    rejects("[\"\\0\"]", "escape");
    rejects("[\"\\ \"]", "escape");
    rejects("[\"abc\\", NULL);
    rejects_n("[\"\\\0\"]", 6, "escape");
}

static void test_short_unicode_escapes(void **state)
{
    (void)state;
    rejects("[\"\\u\"]", "four hex");
    rejects("[\"\\u1\"]", "four hex");
    rejects("[\"\\u12\"]", "four hex");
    rejects("[\"\\u123\"]", "four hex");
    rejects("[\"\\u123g\"]", "four hex");
    rejects("[\"\\uzzzz\"]", "four hex");
    rejects_n("\"\\u12", 5, "four hex");
}

/* json-c would turn a lone surrogate escape into U+FFFD, silently changing
 * a body, so only well-formed pairs are accepted. */
static void test_surrogate_escapes(void **state)
{
    (void)state;
    rejects("[\"\\ud800\"]", "surrogate");
    rejects("[\"\\udbff x\"]", "surrogate");
    rejects("[\"\\ud800\\u0041\"]", "surrogate");
    rejects("[\"\\ud800\\ud800\"]", "surrogate");
    rejects("[\"\\udc00\"]", "surrogate");
    rejects("{\"\\ude00\":1}", "surrogate");
    json_object_put(accepts("[\"\\uD83D\\uDE00\"]"));
    json_object_put(accepts("[\"\\udbff\\udfff\"]"));
}

static void test_unterminated_string(void **state)
{
    (void)state;
    rejects("\"abc", "unterminated");
    rejects("{\"abc", NULL);
    rejects("[\"abc\\\"]", NULL);
}

/* ------------------------------------------------------------------------ */
/* Nesting                                                                   */
/* ------------------------------------------------------------------------ */

static void test_nesting_limit(void **state)
{
    (void)state;
    char *s = nested(32, "");
    json_object_put(accepts(s));
    free(s);

    s = nested(31, "{\"a\":1}");
    json_object_put(accepts(s));
    free(s);

    s = nested(33, "");
    rejects(s, "32");
    free(s);

    s = nested(32, "{}");
    rejects(s, "32");
    free(s);

    s = nested(1000, "");
    rejects(s, "32");
    free(s);

    /* Objects count too: 32 levels of objects are fine, 33 are not. */
    char buf[512];
    size_t n = 0;
    for (int i = 0; i < 32; i++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "{\"k\":");
    n += (size_t)snprintf(buf + n, sizeof buf - n, "1");
    for (int i = 0; i < 32; i++)
        buf[n++] = '}';
    buf[n] = '\0';
    json_object_put(accepts(buf));

    n = 0;
    for (int i = 0; i < 33; i++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "{\"k\":");
    n += (size_t)snprintf(buf + n, sizeof buf - n, "1");
    for (int i = 0; i < 33; i++)
        buf[n++] = '}';
    buf[n] = '\0';
    rejects(buf, "32");

    /* Width is not depth: [[1],[1],...,[1]] with 1000 members. */
    char wide[4 * 1000 + 2];
    n = 0;
    wide[n++] = '[';
    for (int i = 0; i < 1000; i++) {
        memcpy(wide + n, i ? ",[1]" : "[1]", i ? 4 : 3);
        n += i ? 4 : 3;
    }
    wide[n++] = ']';
    wide[n] = '\0';
    json_object_put(accepts(wide));
}

/* ------------------------------------------------------------------------ */
/* json_utf8_valid                                                           */
/* ------------------------------------------------------------------------ */

static int utf8(const char *s)
{
    return json_utf8_valid(s, strlen(s));
}

static void test_utf8_valid(void **state)
{
    (void)state;
    assert_int_equal(json_utf8_valid("", 0), 1);
    assert_int_equal(utf8("plain ascii"), 1);
    assert_int_equal(utf8("\xc2\x80"), 1);             /* U+0080, smallest 2-byte */
    assert_int_equal(utf8("\xdf\xbf"), 1);             /* U+07FF */
    assert_int_equal(utf8("\xe0\xa0\x80"), 1);         /* U+0800, smallest 3-byte */
    assert_int_equal(utf8("\xed\x9f\xbf"), 1);         /* U+D7FF, just below surrogates */
    assert_int_equal(utf8("\xee\x80\x80"), 1);         /* U+E000, just above */
    assert_int_equal(utf8("\xef\xbf\xbf"), 1);         /* U+FFFF */
    assert_int_equal(utf8("\xf0\x90\x80\x80"), 1);     /* U+10000, smallest 4-byte */
    assert_int_equal(utf8("\xf4\x8f\xbf\xbf"), 1);     /* U+10FFFF */
    assert_int_equal(json_utf8_valid("a\0b", 3), 1);   /* NUL is valid UTF-8 */
}

static void test_utf8_invalid(void **state)
{
    (void)state;
    assert_int_equal(utf8("\x80"), 0);
    assert_int_equal(utf8("a\xbf"), 0);
    assert_int_equal(utf8("\xc3\x28"), 0);             /* bad continuation */
    assert_int_equal(utf8("\xe2\x28\xa1"), 0);
    assert_int_equal(utf8("\xc0\x80"), 0);             /* overlong NUL */
    assert_int_equal(utf8("\xc1\xbf"), 0);             /* overlong U+007F */
    assert_int_equal(utf8("\xe0\x9f\xbf"), 0);         /* overlong U+07FF */
    assert_int_equal(utf8("\xf0\x8f\xbf\xbf"), 0);     /* overlong U+FFFF */
    assert_int_equal(utf8("\xed\xa0\x80"), 0);         /* U+D800 */
    assert_int_equal(utf8("\xed\xbf\xbf"), 0);         /* U+DFFF */
    assert_int_equal(utf8("\xf4\x90\x80\x80"), 0);     /* U+110000 */
    assert_int_equal(utf8("\xf8\x88\x80\x80\x80"), 0); /* 5-byte form */
    assert_int_equal(utf8("\xfe"), 0);
    assert_int_equal(utf8("\xff"), 0);
    /* Truncated: the length given ends inside a sequence. */
    assert_int_equal(json_utf8_valid("\xe2\x82\xac", 2), 0);
    assert_int_equal(json_utf8_valid("\xf0\x9f\x98\x80", 3), 0);
    assert_int_equal(json_utf8_valid("ok\xc3", 3), 0);
    assert_int_equal(json_utf8_valid("\xe2\x82\xac", 3), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_objects),
        cmocka_unit_test(test_valid_scalars_and_arrays),
        cmocka_unit_test(test_valid_strings_and_escapes),
        cmocka_unit_test(test_not_nul_terminated),
        cmocka_unit_test(test_nan_infinity),
        cmocka_unit_test(test_number_overflow),
        cmocka_unit_test(test_bad_numbers),
        cmocka_unit_test(test_single_quotes),
        cmocka_unit_test(test_trailing_commas),
        cmocka_unit_test(test_structure_errors),
        cmocka_unit_test(test_trailing_garbage),
        cmocka_unit_test(test_empty_input),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_duplicate_keys_escaped),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_control_chars),
        cmocka_unit_test(test_bad_escapes),
        cmocka_unit_test(test_short_unicode_escapes),
        cmocka_unit_test(test_surrogate_escapes),
        cmocka_unit_test(test_unterminated_string),
        cmocka_unit_test(test_nesting_limit),
        cmocka_unit_test(test_utf8_valid),
        cmocka_unit_test(test_utf8_invalid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
