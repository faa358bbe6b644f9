/* Unit tests for src/common/json_scan.c: strict RFC 8259 JSON in one pass, the
 * exact text of values kept, and the helpers that read values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/json_scan.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

static json_doc doc;
static char *text; /* the copy the last accepted document's tokens point into */

static int setup(void **state)
{
    (void)state;
    json_doc_init(&doc);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    json_doc_free(&doc);
    free(text);
    text = NULL;
    return 0;
}

/* Scans text[0..n) from a copy without a terminating NUL past n, so the
 * scanner cannot rely on one. The copy stays in `text`. */
static int scan_n(const char *t, size_t n, char *err, size_t errlen)
{
    free(text);
    text = malloc(n ? n : 1);
    assert_non_null(text);
    memcpy(text, t, n);
    return json_scan(&doc, text, n, err, errlen);
}

/* Expects a rejection whose message contains want (or just a message). */
static void rejects_n(const char *t, size_t n, const char *want)
{
    char err[256] = "";
    int rc = scan_n(t, n, err, sizeof err);
    if (rc != -1)
        fail_msg("accepted %.*s", (int)n, t);
    assert_true(strlen(err) > 0);
    if (want && !strstr(err, want))
        fail_msg("error for %.*s is \"%s\", expected it to mention \"%s\"", (int)n, t, err, want);
}

static void rejects(const char *t, const char *want)
{
    rejects_n(t, strlen(t), want);
}

static void accepts_n(const char *t, size_t n)
{
    char err[256] = "";
    if (scan_n(t, n, err, sizeof err) != 0)
        fail_msg("rejected %.*s: %s", (int)n, t, err);
}

static void accepts(const char *t)
{
    accepts_n(t, strlen(t));
}

/* The whole document compacted: what a job body is stored as. */
static void compacts(const char *t, const char *want)
{
    accepts(t);
    size_t start, end;
    json_raw(&doc, 0, &start, &end);
    char *out = malloc(end - start + 1);
    assert_non_null(out);
    size_t n = json_compact(text, start, end, out);
    if (n != strlen(want) || memcmp(out, want, n) != 0)
        fail_msg("%s compacted to %.*s, expected %s", t, (int)n, out, want);
    free(out);
}

/* The decoded value of the string member key of the top-level object. */
static void decodes(const char *t, const char *key, const char *want, size_t want_len)
{
    accepts(t);
    size_t v = json_member(&doc, text, 0, key);
    assert_true(v > 0);
    assert_int_equal(doc.toks[v].type, JSON_STRING);
    char out[256];
    size_t n = json_string_decode(text, &doc.toks[v], out);
    assert_int_equal(n, want_len);
    assert_memory_equal(out, want, want_len);
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
    compacts("{}", "{}");
    compacts(" { } ", "{}");
    compacts("{\"a\":1}", "{\"a\":1}");
    compacts("\t{\r\n \"a\" : [ 1 , 2.5 , -3e2 , true , false , null ] ,\"b\":{\"c\":\"d\"}}\n",
             "{\"a\":[1,2.5,-3e2,true,false,null],\"b\":{\"c\":\"d\"}}");
    /* Tokens: the object, then key, value, key, value... with skips. */
    accepts("{\"a\":[1,2],\"b\":{\"c\":null}}");
    assert_int_equal(doc.toks[0].type, JSON_OBJECT);
    assert_int_equal(doc.toks[0].count, 2);
    assert_int_equal(doc.toks[0].skip, doc.n);
    size_t a = json_member(&doc, text, 0, "a"), b = json_member(&doc, text, 0, "b");
    assert_int_equal(doc.toks[a].type, JSON_ARRAY);
    assert_int_equal(doc.toks[a].count, 2);
    assert_int_equal(doc.toks[b].type, JSON_OBJECT);
    assert_int_equal(json_member(&doc, text, 0, "c"), 0); /* only direct members */
    assert_int_equal(doc.toks[json_member(&doc, text, b, "c")].type, JSON_NULL);
    size_t start, end;
    json_raw(&doc, a, &start, &end);
    assert_memory_equal(text + start, "[1,2]", 5);
}

static void test_valid_scalars_and_arrays(void **state)
{
    (void)state;
    compacts("[]", "[]");
    compacts("[1,[2,[3]]]", "[1,[2,[3]]]");
    compacts("\"x\"", "\"x\"");
    compacts("123", "123");
    compacts("-1.5", "-1.5");
    compacts(" 0 ", "0");
    compacts("true", "true");
    compacts("false", "false");
    compacts("null", "null");
    compacts("1e-400", "1e-400"); /* underflow is fine: only overflow is rejected */
}

/* A body is kept as the text that was sent: numbers keep every digit and
 * escapes stay as written; only whitespace outside strings goes. */
static void test_exact_text(void **state)
{
    (void)state;
    compacts("-12345678901234567890123", "-12345678901234567890123");
    compacts("100000000000000000000", "100000000000000000000");
    compacts("[ 0.1000000000000000055511151231257827 , 1E+2 , -0e-0 ]",
             "[0.1000000000000000055511151231257827,1E+2,-0e-0]");
    compacts("{\"a\\u0000b\":1,\"c\":2}", "{\"a\\u0000b\":1,\"c\":2}");
    compacts("{\"a\\u0000b\":1,\"a\\u0000c\":2}", "{\"a\\u0000b\":1,\"a\\u0000c\":2}");
    compacts("\"\\u00e9 \\/ \\\" \\n\"", "\"\\u00e9 \\/ \\\" \\n\"");
    compacts("[\" spaces  inside \" , \"\\\"\" ]", "[\" spaces  inside \",\"\\\"\"]");
    compacts("{ \"k\" : \"a \\\"quoted\\\" } \" }", "{\"k\":\"a \\\"quoted\\\" } \"}");
    /* A valid number of any length (within a double's range: 300 digits). */
    char big[301];
    memset(big, '9', sizeof big - 1);
    big[0] = '1';
    big[sizeof big - 1] = '\0';
    compacts(big, big);
    char frac[2000] = "0.";
    memset(frac + 2, '0', sizeof frac - 4);
    frac[sizeof frac - 2] = '1';
    frac[sizeof frac - 1] = '\0';
    compacts(frac, frac);
}

/* JSONTestSuite's y_ number and string cases (and implementation-defined
 * i_ ones this parser accepts): valid JSON, kept exactly. */
static void test_testsuite_valid(void **state)
{
    (void)state;
    static const char *const y[] = {
        "[123e65]", "[0e+1]", "[0e1]", "[ 4]", "[-0.000000000000000000000000000000000000000000000000000000000000000000000000000001]",
        "[20e1]", "[-0]", "[-123]", "[-1]", "[1E22]", "[1E-2]", "[1E+2]", "[123e45]", "[123.456e78]",
        "[1e-2]", "[1e+2]", "[123]", "[123.456789]", "[1.0e+28]", "[-9223372036854775808]",
        "[100000000000000000000]", "[-1e-400]", "[123456789012345678901234567890]",
        "[\"\\u0060\\u012a\\u12AB\"]", "[\"\\uD801\\udc37\"]", "[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"]",
        "[\"\\u0000\"]", "[\"\\u002c\"]", "[\"asd\"]", "[\"\\uFFFF\"]", "[\"\\uDBFF\\uDFFF\"]",
        "[\"\xe2\x80\xa8\"]", "[\"\x7f\"]", "[\"\xf4\x8f\xbf\xbf\"]", "[\"\\u0012\"]",
        "{\"\":0}", "{\"a\":\"b\",\"a\\u0000\":\"c\"}", "[\"\\u005C\"]", "[\"\\uD834\\uDd1e\"]",
    };
    for (size_t i = 0; i < sizeof y / sizeof y[0]; i++)
        accepts(y[i]);
}

static void test_valid_strings_and_escapes(void **state)
{
    (void)state;
    decodes("{\"a\":\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"}", "a", "\" \\ / \b \f \n \r \t", 15);
    /* Escaped unicode: BMP, a surrogate pair, and raw UTF-8 side by side. */
    decodes("{\"a\":\"\\u00e9\\u20AC\\ud83d\\ude00 caf\xc3\xa9 \xf0\x9f\x98\x80\"}", "a",
            "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 caf\xc3\xa9 \xf0\x9f\x98\x80", 20);
    /* An escaped NUL is legal JSON; the string keeps its length. */
    decodes("{\"a\":\"a\\u0000b\"}", "a", "a\0b", 3);
    /* Member names are compared decoded. */
    decodes("{\"\\u0061\":\"x\"}", "a", "x", 1);
    /* Largest code point, U+10FFFF, raw. */
    accepts("\"\xf4\x8f\xbf\xbf\"");
    /* Decoding in place is safe. */
    accepts("\"\\u00e9x\\\"\"");
    size_t n = json_string_decode(text, &doc.toks[0], text + doc.toks[0].start);
    assert_int_equal(n, 4);
    assert_memory_equal(text + doc.toks[0].start, "\xc3\xa9x\"", 4);
}

static void test_not_nul_terminated(void **state)
{
    (void)state;
    /* Only the first n bytes count, whatever follows them in memory. */
    accepts_n("{\"a\":1}garbage", 7);
    assert_int_equal(doc.toks[0].count, 1);
    accepts_n("12345", 2);
    assert_int_equal(doc.toks[0].end, 2);
}

static void test_numbers(void **state)
{
    (void)state;
    double d;
    int64_t i;
    assert_int_equal(json_number_double("1.5", 3, &d), 0);
    assert_true(d == 1.5);
    assert_int_equal(json_number_double("-0.25e1", 7, &d), 0);
    assert_true(d == -2.5);
    assert_int_equal(json_number_double("0.000001", 8, &d), 0);
    assert_true(d == 0.000001);
    assert_int_equal(json_number_double("1e400", 5, &d), -1);
    assert_int_equal(json_number_double("1.7976931348623157e308", 22, &d), 0);
    assert_int_equal(json_number_double("1.8e308", 7, &d), -1);
    assert_int_equal(json_number_double("1e-400", 6, &d), 0);
    assert_true(d == 0);
    assert_int_equal(json_number_double("0e99999999999999999999", 22, &d), 0);
    assert_int_equal(json_number_double("1e99999999999999999999", 22, &d), -1);
    const char *many = "123456789012345678901234567890123456789012345678901234567890";
    assert_int_equal(json_number_double(many, strlen(many), &d), 0);
    assert_true(d > 1.2345678901e59 && d < 1.2345678902e59);
    assert_true(json_number_syntax("-0.5e+3", 7));
    assert_false(json_number_syntax("01", 2));
    assert_false(json_number_syntax("1.", 2));
    assert_false(json_number_syntax("", 0));
    assert_false(json_number_syntax("1 ", 2));
    assert_int_equal(json_number_int64("42", 2, &i), 0);
    assert_int_equal(i, 42);
    assert_int_equal(json_number_int64("-9223372036854775808", 20, &i), 0);
    assert_true(i == INT64_MIN);
    assert_int_equal(json_number_int64("9223372036854775807", 19, &i), 0);
    assert_true(i == INT64_MAX);
    assert_int_equal(json_number_int64("9223372036854775808", 19, &i), -1);
    assert_int_equal(json_number_int64("99999999999999999999", 20, &i), -1);
    assert_int_equal(json_number_int64("2.0", 3, &i), 1);
    assert_int_equal(json_number_int64("1e2", 3, &i), 1);
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
    accepts("{\"a\":{\"a\":{\"a\":1}},\"b\":[{\"a\":1},{\"a\":2}]}");
    /* Case matters: ttr and TTR are different keys. */
    accepts("{\"ttr\":1,\"TTR\":2}");
}

static void test_duplicate_keys_escaped(void **state)
{
    (void)state;
    /* "\u0061" is "a": the same key spelled differently. */
    rejects("{\"a\":1,\"\\u0061\":2}", "duplicate");
    rejects("{\"a\\u0000b\":1,\"a\\u0000b\":2}", "duplicate");
    rejects("{\"\\ud83d\\ude00\":1,\"\xf0\x9f\x98\x80\":2}", "duplicate");
    /* A NUL does not end a key: these differ after it. */
    accepts("{\"a\\u0000b\":1,\"a\\u0000c\":2,\"a\":3}");
    /* Where the repeated key is. */
    char err[256];
    assert_int_equal(scan_n("{\"x\":1,\"y\":2,\"x\":3}", 19, err, sizeof err), -1);
    assert_non_null(strstr(err, "at byte 13"));
}

/* Objects with many keys: all distinct, one repeated far apart. */
static void test_duplicate_keys_many(void **state)
{
    (void)state;
    char *buf = malloc(20 * 5000 + 16);
    assert_non_null(buf);
    size_t n = 0;
    buf[n++] = '{';
    for (int i = 0; i < 5000; i++)
        n += (size_t)sprintf(buf + n, "%s\"k%d\":%d", i ? "," : "", i, i);
    buf[n++] = '}';
    buf[n] = '\0';
    accepts(buf);
    assert_int_equal(doc.toks[0].count, 5000);
    n -= 1;
    n += (size_t)sprintf(buf + n, ",\"k17\":1}");
    rejects(buf, "duplicate");
    free(buf);
}

static void test_utf8_prefix(void **state)
{
    (void)state;
    const char *s = "ab\xc3\xa9\xe2\x82\xac";
    assert_int_equal(json_utf8_prefix(s, 7, 10), 7);
    assert_int_equal(json_utf8_prefix(s, 7, 3), 2);  /* not half of the e-acute */
    assert_int_equal(json_utf8_prefix(s, 7, 4), 4);
    assert_int_equal(json_utf8_prefix(s, 7, 5), 4);  /* not a third of the euro sign */
    assert_int_equal(json_utf8_prefix(s, 7, 6), 4);
    assert_int_equal(json_utf8_char(s + 2, 5), 2);
    assert_int_equal(json_utf8_char(s + 3, 4), 0);
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
    accepts("[\"\x7f\"]");
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

/* A lone surrogate escape has no UTF-8 form and consumers decode it
 * differently (PHP's json_decode refuses it), so only pairs are accepted. */
static void test_surrogate_escapes(void **state)
{
    (void)state;
    rejects("[\"\\ud800\"]", "surrogate");
    rejects("[\"\\udbff x\"]", "surrogate");
    rejects("[\"\\ud800\\u0041\"]", "surrogate");
    rejects("[\"\\ud800\\ud800\"]", "surrogate");
    rejects("[\"\\udc00\"]", "surrogate");
    rejects("{\"\\ude00\":1}", "surrogate");
    accepts("[\"\\uD83D\\uDE00\"]");
    accepts("[\"\\udbff\\udfff\"]");
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
    accepts(s);
    free(s);

    s = nested(31, "{\"a\":1}");
    accepts(s);
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
    accepts(buf);

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
    accepts(wide);
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
        cmocka_unit_test(test_exact_text),
        cmocka_unit_test(test_testsuite_valid),
        cmocka_unit_test(test_valid_strings_and_escapes),
        cmocka_unit_test(test_not_nul_terminated),
        cmocka_unit_test(test_numbers),
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
        cmocka_unit_test(test_duplicate_keys_many),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_control_chars),
        cmocka_unit_test(test_bad_escapes),
        cmocka_unit_test(test_short_unicode_escapes),
        cmocka_unit_test(test_surrogate_escapes),
        cmocka_unit_test(test_unterminated_string),
        cmocka_unit_test(test_nesting_limit),
        cmocka_unit_test(test_utf8_valid),
        cmocka_unit_test(test_utf8_invalid),
        cmocka_unit_test(test_utf8_prefix),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
