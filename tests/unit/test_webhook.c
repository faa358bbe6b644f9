/* Unit tests for src/push/webhook.c and src/common/base64.c: the Standard Webhooks
 * signature scheme, secret lists and rotation, and strict base64. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/base64.h"
#include "push/webhook.h"

/* The test vector the Standard Webhooks reference libraries sign with. */
#define SPEC_SECRET "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#define SPEC_ID "msg_p5jXN8AQM9LWM0D4loKWxJek"
#define SPEC_TS INT64_C(1614265330)
#define SPEC_BODY "{\"test\": 2432232314}"
#define SPEC_SIG "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

/* A second vector, computed on its own with Python's hmac module and with
 * `openssl dgst -sha256 -mac HMAC -macopt hexkey:2021...3f`: key 1 is the
 * bytes 0x20..0x3f, key 2 the bytes 0xa0..0xc7, and the body holds UTF-8,
 * a NUL and a 0xff byte. */
#define KEY1 "whsec_ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8="
#define KEY2 "whsec_oKGio6SlpqeoqaqrrK2ur7CxsrO0tba3uLm6u7y9vr/AwcLDxMXGxw=="
#define BIN_ID "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
#define BIN_TS INT64_C(1700000000)
static const char BIN_BODY[] = "{\"a\":\"\xc3\xa9\xe2\x82\xac\"}\0tail\xff";
#define BIN_BODY_LEN (sizeof BIN_BODY - 1)
#define BIN_SIG1 "v1,QAtrbp27EEtE4j8sWvACLS7d8/OMcgD+rO7fru2E7MI="
#define BIN_SIG2 "v1,iOf9C99YAY2uHNjycGBBqOb0dpN9L6bGuLdy0k2QwKE="

static dq_webhook_keys *keys_ok(const char *spec)
{
    char err[256] = "";
    dq_webhook_keys *k = webhook_keys_parse(spec, err, sizeof err);
    if (!k)
        fail_msg("unexpected error for '%s': %s", spec, err);
    return k;
}

/* The list must be refused with an error holding needle and none of the
 * secret's text (secret: a piece of the spec that must not leak, or NULL). */
static void keys_bad(const char *spec, const char *needle, const char *secret)
{
    char err[256] = "";
    dq_webhook_keys *k = webhook_keys_parse(spec, err, sizeof err);
    if (k) {
        webhook_keys_free(k);
        fail_msg("accepted: '%s'", spec);
    }
    if (!strstr(err, needle))
        fail_msg("error '%s' does not mention '%s'", err, needle);
    if (secret && strstr(err, secret))
        fail_msg("error '%s' shows the secret", err);
}

static void sign_ok(const dq_webhook_keys *k, const char *id, int64_t ts, const char *body,
                    size_t len, char *out, size_t outlen)
{
    if (webhook_sign(k, id, ts, body, len, out, outlen) != 0)
        fail_msg("webhook_sign failed for id '%s'", id);
}

/* ---------------------------------------------------------------- base64 */

static void test_base64_rfc4648_vectors(void **state)
{
    (void)state;
    static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const coded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        char out[16];
        size_t n = strlen(plain[i]);
        assert_int_equal(base64_encode((const unsigned char *)plain[i], n, out, sizeof out), 0);
        assert_string_equal(out, coded[i]);
        assert_int_equal(strlen(out), BASE64_ENCODED_LEN(n));
        unsigned char back[16];
        size_t bn = 99;
        assert_int_equal(base64_decode(coded[i], strlen(coded[i]), back, sizeof back, &bn), 0);
        assert_int_equal(bn, n);
        assert_memory_equal(back, plain[i], n);
    }
}

static void test_base64_round_trip(void **state)
{
    (void)state;
    unsigned char in[70];
    for (size_t i = 0; i < sizeof in; i++)
        in[i] = (unsigned char)(255 - i * 37);
    for (size_t n = 0; n <= sizeof in; n++) {
        char text[BASE64_ENCODED_LEN(sizeof in) + 1];
        assert_int_equal(base64_encode(in, n, text, sizeof text), 0);
        unsigned char out[sizeof in];
        size_t on = 0;
        assert_int_equal(base64_decode(text, strlen(text), out, sizeof out, &on), 0);
        assert_int_equal(on, n);
        assert_memory_equal(out, in, n);
    }
    /* every character of the alphabet, in order, decodes and comes back */
    static const char ALL[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    unsigned char bytes[48];
    size_t bn = 0;
    assert_int_equal(base64_decode(ALL, 64, bytes, sizeof bytes, &bn), 0);
    assert_int_equal(bn, 48);
    assert_int_equal(bytes[0], 0x00);
    assert_int_equal(bytes[47], 0xbf);
    char text[65];
    assert_int_equal(base64_encode(bytes, sizeof bytes, text, sizeof text), 0);
    assert_string_equal(text, ALL);
}

static void test_base64_limits(void **state)
{
    (void)state;
    char out[9];
    /* "foobar" needs 8 characters and the NUL */
    assert_int_equal(base64_encode((const unsigned char *)"foobar", 6, out, 8), -1);
    assert_int_equal(base64_encode((const unsigned char *)"foobar", 6, out, 9), 0);
    unsigned char b[6];
    size_t n = 0;
    assert_int_equal(base64_decode("Zm9vYmFy", 8, b, 5, &n), -1);
    assert_int_equal(base64_decode("Zm9vYmFy", 8, b, 6, &n), 0);
    assert_int_equal(base64_decode("Zm9vYg==", 8, b, 4, &n), 0); /* padding needs no room */
    assert_int_equal(n, 4);
}

static void test_base64_strict(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "Zg",       /* no padding */
        "Zg=",      /* length not a multiple of 4 */
        "Zh==",     /* bits after the last byte not zero */
        "Zm9=",     /* same, one '=' */
        "Z===",     /* three '=' */
        "====",     /* nothing but padding */
        "=Zg=",     /* '=' first */
        "Zg=A",     /* '=' then data */
        "Zg==Zg==", /* padding in the middle */
        "Zm 9v",    /* space */
        "Zm9v\n",   /* newline */
        "Zm9-",     /* URL-safe alphabet */
        "Zm9_",     /* URL-safe alphabet */
        "Zm9\x80",  /* not ASCII */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned char out[16];
        size_t n = 0;
        if (base64_decode(bad[i], strlen(bad[i]), out, sizeof out, &n) != -1)
            fail_msg("accepted '%s'", bad[i]);
    }
    /* an embedded NUL is a bad character, not the end */
    unsigned char out[8];
    size_t n = 0;
    assert_int_equal(base64_decode("Zm\0v", 4, out, sizeof out, &n), -1);
}

/* ---------------------------------------------------------------- signing */

static void test_spec_vector(void **state)
{
    (void)state;
    char out[128];
    /* with the whsec_ prefix and without it */
    static const char *const specs[] = {SPEC_SECRET, SPEC_SECRET + 6};
    for (size_t i = 0; i < 2; i++) {
        dq_webhook_keys *k = keys_ok(specs[i]);
        assert_int_equal(webhook_keys_count(k), 1);
        sign_ok(k, SPEC_ID, SPEC_TS, SPEC_BODY, strlen(SPEC_BODY), out, sizeof out);
        assert_string_equal(out, SPEC_SIG);
        assert_int_equal(webhook_verify(k, SPEC_ID, SPEC_TS, SPEC_BODY, strlen(SPEC_BODY), SPEC_SIG), 1);
        /* the reference libraries' own "invalid signature": last character changed */
        assert_int_equal(webhook_verify(k, SPEC_ID, SPEC_TS, SPEC_BODY, strlen(SPEC_BODY),
                                        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA="),
                         0);
        /* several entries, one of them valid, others of other versions */
        assert_int_equal(webhook_verify(k, SPEC_ID, SPEC_TS, SPEC_BODY, strlen(SPEC_BODY),
                                        "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= "
                                        "v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= " SPEC_SIG
                                        " v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="),
                         1);
        webhook_keys_free(k);
    }
}

static void test_binary_body(void **state)
{
    (void)state;
    dq_webhook_keys *k = keys_ok(KEY1);
    char out[128];
    sign_ok(k, BIN_ID, BIN_TS, BIN_BODY, BIN_BODY_LEN, out, sizeof out);
    assert_string_equal(out, BIN_SIG1);
    assert_int_equal(webhook_verify(k, BIN_ID, BIN_TS, BIN_BODY, BIN_BODY_LEN, out), 1);
    /* the body is bytes, not a C string: stopping at the NUL is another body */
    assert_int_equal(webhook_verify(k, BIN_ID, BIN_TS, BIN_BODY, strlen(BIN_BODY), out), 0);
    char changed[sizeof BIN_BODY];
    memcpy(changed, BIN_BODY, sizeof BIN_BODY);
    changed[BIN_BODY_LEN - 1] = '\xfe'; /* the last byte, after the NUL */
    assert_int_equal(webhook_verify(k, BIN_ID, BIN_TS, changed, BIN_BODY_LEN, out), 0);
    webhook_keys_free(k);
}

static void test_empty_body(void **state)
{
    (void)state;
    dq_webhook_keys *k = keys_ok(KEY1);
    char a[128], b[128];
    sign_ok(k, BIN_ID, BIN_TS, NULL, 0, a, sizeof a);
    sign_ok(k, BIN_ID, BIN_TS, "", 0, b, sizeof b);
    assert_string_equal(a, b);
    assert_int_equal(webhook_verify(k, BIN_ID, BIN_TS, NULL, 0, a), 1);
    assert_int_equal(webhook_verify(k, BIN_ID, BIN_TS, " ", 1, a), 0);
    webhook_keys_free(k);
}

static void test_rotation(void **state)
{
    (void)state;
    dq_webhook_keys *both = keys_ok(KEY2 " " KEY1); /* new secret first, old one still signing */
    dq_webhook_keys *old = keys_ok(KEY1);
    dq_webhook_keys *new = keys_ok(KEY2);
    dq_webhook_keys *other = keys_ok(SPEC_SECRET);
    assert_int_equal(webhook_keys_count(both), 2);
    assert_int_equal(webhook_signature_size(both), 2 * WEBHOOK_SIG_LEN + 2);

    char out[256];
    sign_ok(both, BIN_ID, BIN_TS, BIN_BODY, BIN_BODY_LEN, out, sizeof out);
    /* one signature per secret, in the order given, space-separated */
    assert_string_equal(out, BIN_SIG2 " " BIN_SIG1);
    assert_int_equal(strlen(out) + 1, webhook_signature_size(both));

    /* a receiver that knows either secret accepts it */
    assert_int_equal(webhook_verify(old, BIN_ID, BIN_TS, BIN_BODY, BIN_BODY_LEN, out), 1);
    assert_int_equal(webhook_verify(new, BIN_ID, BIN_TS, BIN_BODY, BIN_BODY_LEN, out), 1);
    assert_int_equal(webhook_verify(both, BIN_ID, BIN_TS, BIN_BODY, BIN_BODY_LEN, BIN_SIG1), 1);
    assert_int_equal(webhook_verify(both, BIN_ID, BIN_TS, BIN_BODY, BIN_BODY_LEN, BIN_SIG2), 1);
    assert_int_equal(webhook_verify(other, BIN_ID, BIN_TS, BIN_BODY, BIN_BODY_LEN, out), 0);

    /* commas separate too, and runs of separators are one */
    dq_webhook_keys *commas = keys_ok(" ," KEY2 ",\t, " KEY1 ", ");
    char out2[256];
    sign_ok(commas, BIN_ID, BIN_TS, BIN_BODY, BIN_BODY_LEN, out2, sizeof out2);
    assert_string_equal(out2, out);

    webhook_keys_free(both);
    webhook_keys_free(old);
    webhook_keys_free(new);
    webhook_keys_free(other);
    webhook_keys_free(commas);
}

static void test_verify_rejects_changes(void **state)
{
    (void)state;
    dq_webhook_keys *k = keys_ok(SPEC_SECRET);
    const char *b = SPEC_BODY;
    size_t n = strlen(b);
    assert_int_equal(webhook_verify(k, SPEC_ID, SPEC_TS, b, n, SPEC_SIG), 1);
    assert_int_equal(webhook_verify(k, SPEC_ID, SPEC_TS, "{\"test\": 2432232315}", n, SPEC_SIG), 0);
    assert_int_equal(webhook_verify(k, SPEC_ID, SPEC_TS, b, n - 1, SPEC_SIG), 0);
    assert_int_equal(webhook_verify(k, SPEC_ID, SPEC_TS + 1, b, n, SPEC_SIG), 0);
    assert_int_equal(webhook_verify(k, SPEC_ID, -SPEC_TS, b, n, SPEC_SIG), 0);
    assert_int_equal(webhook_verify(k, "msg_p5jXN8AQM9LWM0D4loKWxJeK", SPEC_TS, b, n, SPEC_SIG), 0);
    assert_int_equal(webhook_verify(k, "msg_p5jXN8AQM9LWM0D4loKWxJe", SPEC_TS, b, n, SPEC_SIG), 0);
    /* the header's form */
    static const char *const headers[] = {
        "",
        "   ",
        "v1,",
        "v1a,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",  /* another scheme */
        "V1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",   /* the version is case-sensitive */
        "v1=g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",   /* '=' for ',' */
        "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",      /* no version */
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1O",     /* truncated */
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=x",  /* trailing byte */
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=,v1", /* comma is not a separator */
        "v1,g0hM9SsE-OTPJTGt_tmIKtSyZlE3uFJELVlNIOLJ1OE=",   /* URL-safe alphabet */
    };
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
        if (webhook_verify(k, SPEC_ID, SPEC_TS, b, n, headers[i]) != 0)
            fail_msg("accepted header '%s'", headers[i]);
    }
    assert_int_equal(webhook_verify(k, SPEC_ID, SPEC_TS, b, n, NULL), 0);
    /* spaces and tabs around entries are fine */
    assert_int_equal(webhook_verify(k, SPEC_ID, SPEC_TS, b, n, "  \t" SPEC_SIG "\t "), 1);
    webhook_keys_free(k);
}

static void test_sign_limits(void **state)
{
    (void)state;
    dq_webhook_keys *k = keys_ok(KEY1 "," KEY2);
    size_t need = webhook_signature_size(k);
    char out[256];
    memset(out, 'x', sizeof out);
    assert_int_equal(webhook_sign(k, BIN_ID, BIN_TS, "b", 1, out, need - 1), -1);
    assert_string_equal(out, "");
    assert_int_equal(webhook_sign(k, BIN_ID, BIN_TS, "b", 1, NULL, 0), -1);
    assert_int_equal(webhook_sign(k, BIN_ID, BIN_TS, "b", 1, out, need), 0);
    assert_int_equal(strlen(out), need - 1);

    /* ids the scheme cannot sign safely, or that cannot go into a header */
    static const char *const bad_ids[] = {"", "msg.1", ".", "msg 1", "msg\r\nX-Evil: 1", "msg\x7f",
                                          "msg\xc3\xa9"};
    for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++) {
        if (webhook_sign(k, bad_ids[i], BIN_TS, "b", 1, out, sizeof out) != -1)
            fail_msg("signed id '%s'", bad_ids[i]);
        assert_string_equal(out, "");
        assert_false(webhook_id_valid(bad_ids[i]));
    }
    assert_false(webhook_id_valid(NULL));
    char longest[WEBHOOK_ID_MAX + 2];
    memset(longest, 'a', sizeof longest);
    longest[WEBHOOK_ID_MAX] = '\0';
    assert_true(webhook_id_valid(longest));
    assert_int_equal(webhook_sign(k, longest, BIN_TS, "b", 1, out, sizeof out), 0);
    longest[WEBHOOK_ID_MAX] = 'a';
    longest[WEBHOOK_ID_MAX + 1] = '\0';
    assert_false(webhook_id_valid(longest));
    /* a verifier given such an id says no rather than checking */
    assert_int_equal(webhook_verify(k, "msg.1", BIN_TS, "b", 1, out), 0);
    webhook_keys_free(k);
}

/* ---------------------------------------------------------------- secrets */

static void test_secret_lengths(void **state)
{
    (void)state;
    unsigned char key[WEBHOOK_KEY_MAX + 1];
    for (size_t i = 0; i < sizeof key; i++)
        key[i] = (unsigned char)(i * 7 + 3);
    char spec[6 + BASE64_ENCODED_LEN(sizeof key) + 1];
    memcpy(spec, "whsec_", 6);
    for (size_t n = 1; n <= sizeof key; n++) {
        assert_int_equal(base64_encode(key, n, spec + 6, sizeof spec - 6), 0);
        char err[256] = "";
        dq_webhook_keys *k = webhook_keys_parse(spec, err, sizeof err);
        if (n >= WEBHOOK_KEY_MIN && n <= WEBHOOK_KEY_MAX) {
            if (!k)
                fail_msg("%zu-byte key refused: %s", n, err);
            webhook_keys_free(k);
        } else {
            if (k) {
                webhook_keys_free(k);
                fail_msg("%zu-byte key accepted", n);
            }
            assert_non_null(strstr(err, n < WEBHOOK_KEY_MIN ? "shorter than 24 bytes" : "longer than 64 bytes"));
            assert_null(strstr(err, spec + 6));
        }
    }
    /* far too long, and longer than any buffer for a 64-byte key */
    char huge[400];
    memset(huge, 'A', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    keys_bad(huge, "longer than 64 bytes", "AAAAAAAA");
}

static void test_bad_secrets(void **state)
{
    (void)state;
    keys_bad("", "no webhook secrets", NULL);
    keys_bad(" , \t,", "no webhook secrets", NULL);
    keys_bad(NULL, "no webhook secrets", NULL);
    keys_bad("whsec_", "webhook secret 1 is empty", NULL);
    keys_bad(KEY1 " whsec_", "webhook secret 2 is empty", NULL);
    /* not base64: '!' and '-', URL-safe '_', missing padding, padding bits */
    keys_bad("whsec_MfKQ9r8GKYqrTwjU!D8ILPZIo2LaLaSw", "webhook secret 1 is not base64", "MfKQ9r8G");
    keys_bad(KEY1 ",whsec_MfKQ9r8GKYqrTwjU-D8ILPZIo2LaLaSw", "webhook secret 2 is not base64", "MfKQ9r8G");
    keys_bad("whsec_MfKQ9r8GKYqrTwjU_D8ILPZIo2LaLaSw", "not base64", "MfKQ9r8G");
    keys_bad("whsec_ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8", "not base64", "ICEiIyQl");
    keys_bad("whsec_ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj9=", "not base64", "ICEiIyQl");
    keys_bad("WHSEC_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "not base64", "MfKQ9r8G"); /* the prefix is lower case */
    keys_bad("whsec_whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "not base64", "MfKQ9r8G");
    keys_bad("whsk_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "not base64", "MfKQ9r8G"); /* asymmetric: not ours */
    /* a short secret: 18 bytes */
    keys_bad("whsec_c2hvcnQtc2VjcmV0LTEyMzQ1", "webhook secret 1 is shorter than 24 bytes", "c2hvcnQt");
    /* the same secret twice, with and without the prefix */
    keys_bad(SPEC_SECRET " MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "webhook secret 2 repeats secret 1",
             "MfKQ9r8G");
}

static void test_many_secrets(void **state)
{
    (void)state;
    /* WEBHOOK_KEYS_MAX distinct secrets are fine, one more is not */
    char spec[(6 + 44 + 1) * (WEBHOOK_KEYS_MAX + 1) + 1] = "";
    for (int i = 0; i <= WEBHOOK_KEYS_MAX; i++) {
        unsigned char key[32];
        memset(key, 'k', sizeof key);
        key[0] = (unsigned char)i;
        char b64[45];
        assert_int_equal(base64_encode(key, sizeof key, b64, sizeof b64), 0);
        if (i == WEBHOOK_KEYS_MAX) {
            dq_webhook_keys *k = keys_ok(spec);
            assert_int_equal(webhook_keys_count(k), WEBHOOK_KEYS_MAX);
            char out[WEBHOOK_KEYS_MAX * (WEBHOOK_SIG_LEN + 1)];
            assert_int_equal(webhook_signature_size(k), sizeof out);
            sign_ok(k, BIN_ID, BIN_TS, "x", 1, out, sizeof out);
            assert_int_equal(webhook_verify(k, BIN_ID, BIN_TS, "x", 1, out), 1);
            webhook_keys_free(k);
        }
        strcat(spec, i ? ",whsec_" : "whsec_");
        strcat(spec, b64);
    }
    keys_bad(spec, "at most 8 webhook secrets", NULL);
}

static void test_free_null(void **state)
{
    (void)state;
    webhook_keys_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base64_rfc4648_vectors),
        cmocka_unit_test(test_base64_round_trip),
        cmocka_unit_test(test_base64_limits),
        cmocka_unit_test(test_base64_strict),
        cmocka_unit_test(test_spec_vector),
        cmocka_unit_test(test_binary_body),
        cmocka_unit_test(test_empty_body),
        cmocka_unit_test(test_rotation),
        cmocka_unit_test(test_verify_rejects_changes),
        cmocka_unit_test(test_sign_limits),
        cmocka_unit_test(test_secret_lengths),
        cmocka_unit_test(test_bad_secrets),
        cmocka_unit_test(test_many_secrets),
        cmocka_unit_test(test_free_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
