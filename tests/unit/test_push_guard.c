/* Unit tests for src/common/push_guard.c: callback URLs, the push_allow list, the
 * name and address checks (with the embedded IPv4 forms), and Retry-After. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/un.h>

#include <cmocka.h>

#include "common/push_guard.h"

/* ---------------------------------------------------------------- helpers */

static void url_ok(const char *text, dq_url *u)
{
    char err[512] = "";
    if (guard_parse_url(text, strlen(text), u, err, sizeof err) != 0)
        fail_msg("refused '%s': %s", text, err);
}

static void url_bad_n(const char *text, size_t len, const char *needle)
{
    static dq_url u; /* 4 KiB: off the stack */
    char err[512] = "";
    if (guard_parse_url(text, len, &u, err, sizeof err) == 0)
        fail_msg("accepted '%s'", text);
    if (!strstr(err, needle))
        fail_msg("error for '%s' is '%s', without '%s'", text, err, needle);
    if (!strstr(err, "field 'callback.url'"))
        fail_msg("error '%s' does not name the field", err);
}

static void url_bad(const char *text, const char *needle)
{
    url_bad_n(text, strlen(text), needle);
}

static dq_allow *allow_ok(const char *spec)
{
    char err[512] = "";
    dq_allow *a = guard_allow_parse(spec, err, sizeof err);
    if (!a)
        fail_msg("refused push_allow '%s': %s", spec ? spec : "(null)", err);
    return a;
}

static void allow_bad(const char *spec, const char *needle)
{
    char err[512] = "";
    dq_allow *a = guard_allow_parse(spec, err, sizeof err);
    if (a) {
        guard_allow_free(a);
        fail_msg("accepted push_allow '%s'", spec);
    }
    if (!strstr(err, needle))
        fail_msg("error for '%s' is '%s', without '%s'", spec, err, needle);
    if (!strstr(err, "config key 'push_allow'"))
        fail_msg("error '%s' does not name the key", err);
}

/* A sockaddr for an address in text, as libcurl would hand it over. */
static const struct sockaddr *sockaddr_of(const char *text, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    if (strchr(text, ':')) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(443);
        if (inet_pton(AF_INET6, text, &in6->sin6_addr) != 1)
            fail_msg("bad test address %s", text);
    } else {
        struct sockaddr_in *in = (struct sockaddr_in *)ss;
        in->sin_family = AF_INET;
        in->sin_port = htons(443);
        if (inet_pton(AF_INET, text, &in->sin_addr) != 1)
            fail_msg("bad test address %s", text);
    }
    return (const struct sockaddr *)ss;
}

static int addr_allowed(const dq_allow *a, const char *text)
{
    struct sockaddr_storage ss;
    return guard_addr_allowed(a, sockaddr_of(text, &ss));
}

static dq_addr_class addr_class(const char *text)
{
    struct sockaddr_storage ss;
    return guard_addr_class(sockaddr_of(text, &ss));
}

typedef struct {
    const char *what;
    int expect;
} expectation;

/* Each address of list[] through the address check of spec. */
static void check_addrs(const char *spec, const expectation *list, size_t n)
{
    dq_allow *a = allow_ok(spec);
    for (size_t i = 0; i < n; i++) {
        if (addr_allowed(a, list[i].what) != list[i].expect)
            fail_msg("push_allow '%s': address %s should be %s", spec, list[i].what,
                     list[i].expect ? "allowed" : "refused");
    }
    guard_allow_free(a);
}

/* Each host of list[] through the name check of spec. */
static void check_hosts(const char *spec, const expectation *list, size_t n)
{
    dq_allow *a = allow_ok(spec);
    for (size_t i = 0; i < n; i++) {
        if (guard_host_allowed(a, list[i].what) != list[i].expect)
            fail_msg("push_allow '%s': host %s should be %s", spec, list[i].what,
                     list[i].expect ? "allowed" : "refused");
    }
    guard_allow_free(a);
}

#define CHECK_ADDRS(spec, ...)                                                                     \
    do {                                                                                           \
        static const expectation list_[] = {__VA_ARGS__};                                          \
        check_addrs(spec, list_, sizeof list_ / sizeof list_[0]);                                  \
    } while (0)
#define CHECK_HOSTS(spec, ...)                                                                     \
    do {                                                                                           \
        static const expectation list_[] = {__VA_ARGS__};                                          \
        check_hosts(spec, list_, sizeof list_ / sizeof list_[0]);                                  \
    } while (0)

/* ---------------------------------------------------------------- URLs */

static void test_url_accepts(void **state)
{
    (void)state;
    static dq_url u;

    url_ok("http://127.0.0.1:80/x", &u);
    assert_string_equal(u.url, "http://127.0.0.1:80/x");
    assert_string_equal(u.scheme, "http");
    assert_string_equal(u.host, "127.0.0.1");
    assert_int_equal(u.host_kind, GUARD_HOST_IPV4);
    assert_int_equal(u.port, 80);
    assert_int_equal(u.port_given, 1);
    assert_string_equal(u.path, "/x");

    url_ok("https://[::1]/", &u);
    assert_string_equal(u.scheme, "https");
    assert_string_equal(u.host, "::1");
    assert_int_equal(u.host_kind, GUARD_HOST_IPV6);
    assert_int_equal(u.port, 443);
    assert_int_equal(u.port_given, 0);
    assert_string_equal(u.path, "/");

    url_ok("HTTP://Example.COM", &u);
    assert_string_equal(u.url, "http://example.com");
    assert_string_equal(u.scheme, "http");
    assert_string_equal(u.host, "example.com");
    assert_int_equal(u.host_kind, GUARD_HOST_NAME);
    assert_int_equal(u.port, 80);
    assert_string_equal(u.path, "/");

    /* only scheme and host are lower-cased; path and query stay as written */
    url_ok("HtTpS://API.Example.com:8443/Hooks/A?Q=1&b=%2F", &u);
    assert_string_equal(u.url, "https://api.example.com:8443/Hooks/A?Q=1&b=%2F");
    assert_string_equal(u.host, "api.example.com");
    assert_int_equal(u.port, 8443);
    assert_string_equal(u.path, "/Hooks/A?Q=1&b=%2F");

    url_ok("http://x?a=1", &u);
    assert_string_equal(u.path, "/?a=1");
    assert_string_equal(u.url, "http://x?a=1");

    url_ok("http://[2001:DB8::A]:8080", &u);
    assert_string_equal(u.host, "2001:db8::a");
    assert_string_equal(u.url, "http://[2001:db8::a]:8080");
    assert_int_equal(u.port, 8080);

    url_ok("http://[::ffff:10.0.0.1]/", &u);
    assert_string_equal(u.host, "::ffff:10.0.0.1");

    url_ok("http://localhost:3000/cb", &u);
    url_ok("http://receiver/cb", &u); /* a single label */
    url_ok("http://a-b.c-d.example:65535/", &u);
    assert_int_equal(u.port, 65535);
    url_ok("http://x:1/", &u);
    assert_int_equal(u.port, 1);
    url_ok("http://x:00080/", &u);
    assert_int_equal(u.port, 80);
    url_ok("http://x/a@b:c;d=e,f!$'()*+~-._/?q=/?:@", &u);
    /* a number in a label that is not the last is a name, checked at connect time */
    url_ok("http://127.0.0.1.nip.io/", &u);
    assert_int_equal(u.host_kind, GUARD_HOST_NAME);
    url_ok("http://0x7f.example/", &u);
    url_ok("http://0.0.0.0/", &u); /* parses; the address check refuses it */

    /* len bytes, not up to a NUL */
    static const char longer[] = "http://example.com/xyzGARBAGE";
    char err[256];
    assert_int_equal(guard_parse_url(longer, strlen("http://example.com/xyz"), &u, err, sizeof err), 0);
    assert_string_equal(u.url, "http://example.com/xyz");
    assert_string_equal(u.path, "/xyz");

    /* the longest */
    static char big[GUARD_URL_MAX + 2];
    memset(big, 'a', sizeof big - 1);
    memcpy(big, "http://example.com/", 19);
    big[GUARD_URL_MAX] = '\0';
    url_ok(big, &u);
    assert_int_equal(strlen(u.url), GUARD_URL_MAX);
    big[GUARD_URL_MAX] = 'a';
    url_bad(big, "at most 2048 bytes");
}

static void test_url_rejects(void **state)
{
    (void)state;
    url_bad("", "must not be empty");
    url_bad_n(NULL, 0, "must not be empty");
    url_bad("ftp://x", "must use http or https");
    url_bad("file:///etc/passwd", "must use http or https");
    url_bad("gopher://x:70/", "must use http or https");
    url_bad("httpx://x/", "must use http or https");
    url_bad("http://user@x/", "user name or password");
    url_bad("http://user:pass@x/", "user name or password");
    url_bad("http://@x/", "user name or password");
    url_bad("http://x:0/", "port from 1 to 65535");
    url_bad("http://x:65536/", "port from 1 to 65535");
    url_bad("http://x:123456/", "port from 1 to 65535");
    url_bad("http://x:/", "port from 1 to 65535");
    url_bad("http://x:8a/", "port from 1 to 65535");
    url_bad("http://x:-1/", "port from 1 to 65535");
    url_bad("http://x:80:81/", "port from 1 to 65535");
    url_bad("http://[::1]x/", "port from 1 to 65535");
    url_bad("http:///path", "must have a host");
    url_bad("http://:80/", "must have a host");
    url_bad("http://", "must have a host");
    url_bad("http://?q", "must have a host");
    url_bad("http:/x", "absolute URL");
    url_bad("http:x", "absolute URL");
    url_bad("//x/y", "absolute URL");
    url_bad("example.com/hook", "absolute URL");
    url_bad("1http://x/", "absolute URL");
    /* whitespace and control characters, anywhere */
    url_bad("http://x/a b", "spaces or control characters");
    url_bad(" http://x/", "spaces or control characters");
    url_bad("http://x/\t", "spaces or control characters");
    url_bad("http://x/\r\nHost: evil", "spaces or control characters");
    url_bad("http://x/\x7f", "spaces or control characters");
    url_bad_n("http://a\0b/", 11, "spaces or control characters");
    url_bad("http://x/#frag", "fragment");
    url_bad("http://x#", "fragment");
    url_bad("http://ex\xc3\xa4mple.com/", "must be ASCII");
    url_bad("http://x/\xc3\xa9", "must be ASCII");
    /* IPv6 literals */
    url_bad("http://[::1/", "IPv6 address between [ and ]");
    url_bad("http://[]/", "IPv6 address between [ and ]");
    url_bad("http://[fe80::1%25eth0]/", "IPv6 address between [ and ]");
    url_bad("http://[v1.x]/", "IPv6 address between [ and ]");
    url_bad("http://[127.0.0.1]/", "IPv6 address between [ and ]");
    url_bad("http://[::1::2]/", "IPv6 address between [ and ]");
    url_bad("http://::1/", "must have a host"); /* unbracketed: the host ends at the first colon */
    /* names */
    url_bad("http://ex_ample.com/", "DNS name");
    url_bad("http://-x.com/", "DNS name");
    url_bad("http://x-.com/", "DNS name");
    url_bad("http://a..b/", "DNS name");
    url_bad("http://.x/", "DNS name");
    url_bad("http://x.com./", "DNS name");
    url_bad("http://x%2ecom/", "DNS name");
    url_bad("http://evil.com\\.good.com/", "DNS name");
    url_bad("http://a~b/", "DNS name");
    char label[128];
    snprintf(label, sizeof label, "http://%.64s.com/",
             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    url_bad(label, "DNS name"); /* a 64-byte label */
    char host[400];
    strcpy(host, "http://");
    for (int i = 0; i < 51; i++)
        strcat(host, "abcd.");
    strcat(host, "xyz/"); /* 258 bytes of host */
    url_bad(host, "at most 253 bytes");
    /* path and query characters outside RFC 3986 */
    url_bad("http://x/a|b", "percent-encode the character '|'");
    url_bad("http://x/a\\b", "percent-encode the character '\\'");
    url_bad("http://x/{x}", "percent-encode the character '{'");
    url_bad("http://x/?a[]=1", "percent-encode the character '['");
    url_bad("http://x/\"", "percent-encode the character '\"'");
    url_bad("http://x/%zz", "'%' not followed by two hex digits");
    url_bad("http://x/%4", "'%' not followed by two hex digits");
    url_bad("http://x/%", "'%' not followed by two hex digits");
}

static void test_url_numeric_hosts(void **state)
{
    (void)state;
    /* IPv4 spellings other than a.b.c.d: refused, since getaddrinfo, browsers
     * and proxies read them differently (or not at all) */
    static const char *const spellings[] = {
        "http://0177.0.0.1/",  "http://2130706433/",  "http://0x7f000001/", "http://0x7f.0.0.1/",
        "http://127.1/",       "http://127.0.1/",     "http://127.0.0.01/", "http://017700000001/",
        "http://0/",           "http://256.0.0.1/",   "http://1.2.3.0x4/",  "http://127.0.0.1.1/",
        "http://0X7F.0.0.1/",  "http://1.2.3.4.5/",   "http://10.0.0.1./",  "http://0x/",
        "http://999999999999/",
    };
    for (size_t i = 0; i < sizeof spellings / sizeof spellings[0]; i++)
        url_bad(spellings[i], "a.b.c.d");
}

/* ---------------------------------------------------------------- allow list */

static void test_allow_parse(void **state)
{
    (void)state;
    dq_allow *a = allow_ok("*, example.com *.corp.example,10.1.0.0/16,fd00::/8 192.0.2.10 ::1 "
                           "[2001:db8::1] 0.0.0.0/0 ::/0 loopback PRIVATE Link-Local EXAMPLE.org");
    guard_allow_free(a);
    guard_allow_free(NULL);

    /* empty: admits nothing */
    static const char *const empties[] = {"", "  , ,\t", NULL};
    for (size_t i = 0; i < 3; i++) {
        a = allow_ok(empties[i]);
        assert_int_equal(guard_host_allowed(a, "example.com"), 0);
        assert_int_equal(addr_allowed(a, "8.8.8.8"), 0);
        assert_int_equal(addr_allowed(a, "127.0.0.1"), 0);
        assert_int_equal(addr_allowed(a, "10.0.0.1"), 0);
        guard_allow_free(a);
    }

    allow_bad("exa_mple.com", "entry 1 'exa_mple.com' is not a host name");
    allow_bad("a.com, b.com bad!", "entry 3 'bad!' is not a host name");
    allow_bad("*foo.com", "not a host name");
    allow_bad("foo.*.com", "not a host name");
    allow_bad("*.", "not a host name");
    allow_bad("**", "not a host name");
    allow_bad("*.*.com", "not a host name");
    allow_bad("-x.com", "not a host name");
    allow_bad("x.com.", "not a host name");
    allow_bad("10.1.2.3/16", "bits set past /16");
    allow_bad("fd00::1/8", "bits set past /8");
    allow_bad("10.0.0.0/33", "prefix length");
    allow_bad("10.0.0.0/", "prefix length");
    allow_bad("10.0.0.0/08", "prefix length");
    allow_bad("10.0.0.0/x", "prefix length");
    allow_bad("fd00::/129", "prefix length");
    allow_bad("fd00::/-1", "prefix length");
    allow_bad("10.1", "not an IPv4 address written as a.b.c.d");
    allow_bad("0177.0.0.1", "not an IPv4 address written as a.b.c.d");
    allow_bad("2130706433", "not an IPv4 address written as a.b.c.d");
    allow_bad("10.0.0.256", "not an IPv4 address written as a.b.c.d");
    allow_bad("10.0.0.0x1/8", "not an IPv4 address written as a.b.c.d");
    allow_bad("*.10", "not a host name");
    allow_bad("fd00::zz", "not a valid IPv6 address");
    allow_bad("fe80::1%eth0", "not a valid IPv6 address");
    allow_bad("::ffff:10.0.0.1", "IPv4 address in IPv6 form");
    allow_bad("64:ff9b::10.0.0.1", "IPv4 address in IPv6 form");
    allow_bad("::ffff:0:0/96", "IPv4 address in IPv6 form");
    allow_bad("::10.0.0.1", "IPv4 address in IPv6 form");
    allow_bad("localhost", "localhost always means loopback");
    allow_bad("*.localhost", "localhost always means loopback");
    allow_bad("LocalHost", "localhost always means loopback");
    char big[300];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    allow_bad(big, "longer than 253 bytes");
}

/* ---------------------------------------------------------------- addresses */

static void test_addr_classes(void **state)
{
    (void)state;
    static const struct {
        const char *addr;
        dq_addr_class cls;
    } cases[] = {
        /* IPv4 */
        {"127.0.0.1", GUARD_ADDR_LOOPBACK},
        {"127.255.255.254", GUARD_ADDR_LOOPBACK},
        {"10.0.0.1", GUARD_ADDR_PRIVATE},
        {"10.255.255.255", GUARD_ADDR_PRIVATE},
        {"172.16.0.1", GUARD_ADDR_PRIVATE},
        {"172.31.255.255", GUARD_ADDR_PRIVATE},
        {"172.15.255.255", GUARD_ADDR_PUBLIC},
        {"172.32.0.1", GUARD_ADDR_PUBLIC},
        {"192.168.1.1", GUARD_ADDR_PRIVATE},
        {"192.169.0.1", GUARD_ADDR_PUBLIC},
        {"100.64.0.1", GUARD_ADDR_PRIVATE},
        {"100.127.255.255", GUARD_ADDR_PRIVATE},
        {"100.63.255.255", GUARD_ADDR_PUBLIC},
        {"100.128.0.1", GUARD_ADDR_PUBLIC},
        {"169.254.169.254", GUARD_ADDR_LINK_LOCAL},
        {"169.254.0.1", GUARD_ADDR_LINK_LOCAL},
        {"0.0.0.0", GUARD_ADDR_REFUSED},
        {"0.1.2.3", GUARD_ADDR_REFUSED},
        {"224.0.0.1", GUARD_ADDR_REFUSED},
        {"239.255.255.250", GUARD_ADDR_REFUSED},
        {"255.255.255.255", GUARD_ADDR_REFUSED},
        {"240.0.0.1", GUARD_ADDR_REFUSED},
        {"192.0.0.8", GUARD_ADDR_REFUSED},
        {"192.0.2.1", GUARD_ADDR_REFUSED},
        {"198.51.100.7", GUARD_ADDR_REFUSED},
        {"203.0.113.9", GUARD_ADDR_REFUSED},
        {"198.18.0.1", GUARD_ADDR_REFUSED},
        {"198.19.255.255", GUARD_ADDR_REFUSED},
        {"198.20.0.1", GUARD_ADDR_PUBLIC},
        {"192.88.99.1", GUARD_ADDR_REFUSED},
        {"8.8.8.8", GUARD_ADDR_PUBLIC},
        {"1.1.1.1", GUARD_ADDR_PUBLIC},
        {"9.255.255.255", GUARD_ADDR_PUBLIC},
        {"11.0.0.1", GUARD_ADDR_PUBLIC},
        {"126.255.255.255", GUARD_ADDR_PUBLIC},
        {"128.0.0.1", GUARD_ADDR_PUBLIC},
        {"223.255.255.255", GUARD_ADDR_PUBLIC},
        /* IPv6 */
        {"::1", GUARD_ADDR_LOOPBACK},
        {"::", GUARD_ADDR_REFUSED},
        {"fe80::1", GUARD_ADDR_LINK_LOCAL},
        {"febf:ffff::1", GUARD_ADDR_LINK_LOCAL},
        {"fc00::1", GUARD_ADDR_PRIVATE},
        {"fd12:3456::1", GUARD_ADDR_PRIVATE},
        {"fd00:ec2::254", GUARD_ADDR_PRIVATE},
        {"fec0::1", GUARD_ADDR_PRIVATE},
        {"64:ff9b:1::a00:1", GUARD_ADDR_PRIVATE},
        {"ff02::1", GUARD_ADDR_REFUSED},
        {"ff05::1:3", GUARD_ADDR_REFUSED},
        {"2001:db8::1", GUARD_ADDR_REFUSED},
        {"3fff::1", GUARD_ADDR_REFUSED},
        {"2001::1", GUARD_ADDR_REFUSED},   /* Teredo */
        {"2001:2::1", GUARD_ADDR_REFUSED}, /* benchmarking */
        {"2002:7f00:1::1", GUARD_ADDR_REFUSED},
        {"100::1", GUARD_ADDR_REFUSED},
        {"5f00::1", GUARD_ADDR_REFUSED},
        {"4000::1", GUARD_ADDR_REFUSED},
        {"::ffff:0:7f00:1", GUARD_ADDR_REFUSED}, /* IPv4-translated: not global */
        {"2606:4700:4700::1111", GUARD_ADDR_PUBLIC},
        {"2001:4860:4860::8888", GUARD_ADDR_PUBLIC},
        {"2a00:1450::1", GUARD_ADDR_PUBLIC},
        {"3ffe::1", GUARD_ADDR_PUBLIC},
        /* IPv4-mapped: as the IPv4 address */
        {"::ffff:127.0.0.1", GUARD_ADDR_LOOPBACK},
        {"::ffff:7f00:1", GUARD_ADDR_LOOPBACK},
        {"::ffff:10.0.0.1", GUARD_ADDR_PRIVATE},
        {"::ffff:169.254.169.254", GUARD_ADDR_LINK_LOCAL},
        {"::ffff:8.8.8.8", GUARD_ADDR_PUBLIC},
        {"::ffff:0.0.0.0", GUARD_ADDR_REFUSED},
        {"::ffff:224.0.0.1", GUARD_ADDR_REFUSED},
        /* IPv4-compatible (deprecated) */
        {"::127.0.0.1", GUARD_ADDR_LOOPBACK},
        {"::10.0.0.1", GUARD_ADDR_PRIVATE},
        {"::8.8.8.8", GUARD_ADDR_PUBLIC},
        {"::0.0.0.2", GUARD_ADDR_REFUSED},
        /* NAT64 well-known prefix */
        {"64:ff9b::127.0.0.1", GUARD_ADDR_LOOPBACK},
        {"64:ff9b::a9fe:a9fe", GUARD_ADDR_LINK_LOCAL},
        {"64:ff9b::192.168.0.1", GUARD_ADDR_PRIVATE},
        {"64:ff9b::8.8.8.8", GUARD_ADDR_PUBLIC},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dq_addr_class got = addr_class(cases[i].addr);
        if (got != cases[i].cls)
            fail_msg("%s: class %s, want %s", cases[i].addr, guard_addr_class_name(got),
                     guard_addr_class_name(cases[i].cls));
    }
    struct sockaddr_un un;
    memset(&un, 0, sizeof un);
    un.sun_family = AF_UNIX;
    assert_int_equal(guard_addr_class((const struct sockaddr *)&un), GUARD_ADDR_REFUSED);
    assert_int_equal(guard_addr_class(NULL), GUARD_ADDR_REFUSED);
    assert_string_equal(guard_addr_class_name(GUARD_ADDR_PUBLIC), "public");
    assert_string_equal(guard_addr_class_name(GUARD_ADDR_LOOPBACK), "loopback");
    assert_string_equal(guard_addr_class_name(GUARD_ADDR_PRIVATE), "private");
    assert_string_equal(guard_addr_class_name(GUARD_ADDR_LINK_LOCAL), "link-local");
    assert_string_equal(guard_addr_class_name(GUARD_ADDR_REFUSED), "reserved");
}

static void test_addr_allowed(void **state)
{
    (void)state;
    CHECK_ADDRS("*", {"8.8.8.8", 1}, {"2606:4700:4700::1111", 1}, {"::ffff:8.8.8.8", 1},
                {"64:ff9b::8.8.8.8", 1}, {"127.0.0.1", 0}, {"::1", 0}, {"10.0.0.1", 0},
                {"192.168.0.1", 0}, {"100.64.0.1", 0}, {"169.254.169.254", 0}, {"fe80::1", 0},
                {"fd00::1", 0}, {"::ffff:127.0.0.1", 0}, {"::ffff:169.254.169.254", 0},
                {"64:ff9b::7f00:1", 0}, {"::127.0.0.1", 0}, {"0.0.0.0", 0}, {"::", 0},
                {"255.255.255.255", 0}, {"224.0.0.1", 0}, {"ff02::1", 0}, {"192.0.2.1", 0});
    CHECK_ADDRS("loopback", {"127.0.0.1", 1}, {"127.8.9.10", 1}, {"::1", 1}, {"::ffff:127.0.0.1", 1},
                {"64:ff9b::127.0.0.1", 1}, {"8.8.8.8", 0}, {"10.0.0.1", 0}, {"169.254.0.1", 0});
    CHECK_ADDRS("private", {"10.0.0.1", 1}, {"172.16.5.4", 1}, {"192.168.0.1", 1}, {"100.64.0.1", 1},
                {"fd00::1", 1}, {"::ffff:192.168.0.1", 1}, {"127.0.0.1", 0}, {"169.254.0.1", 0},
                {"fe80::1", 0}, {"8.8.8.8", 0});
    CHECK_ADDRS("link-local", {"169.254.169.254", 1}, {"fe80::1", 1}, {"10.0.0.1", 0}, {"::1", 0});
    /* address entries admit what they cover, of any class but the refused ones */
    CHECK_ADDRS("10.1.0.0/16", {"10.1.2.3", 1}, {"10.1.255.255", 1}, {"::ffff:10.1.2.3", 1},
                {"10.2.0.1", 0}, {"192.168.0.1", 0}, {"8.8.8.8", 0});
    CHECK_ADDRS("127.0.0.1", {"127.0.0.1", 1}, {"127.0.0.2", 0}, {"::1", 0});
    CHECK_ADDRS("fd00::/8", {"fd00::1", 1}, {"fd12::1", 1}, {"fc00::1", 0}, {"10.0.0.1", 0});
    CHECK_ADDRS("8.8.8.0/24 2606:4700::/32", {"8.8.8.8", 1}, {"8.8.4.4", 0},
                {"2606:4700:4700::1111", 1}, {"2a00:1450::1", 0});
    CHECK_ADDRS("172.16.0.0/12", {"172.31.0.1", 1}, {"172.32.0.1", 0});
    CHECK_ADDRS("[::1]", {"::1", 1}, {"127.0.0.1", 0});
    /* never admitted, whatever the list */
    CHECK_ADDRS("0.0.0.0/0", {"0.0.0.0", 0}, {"0.1.2.3", 0}, {"224.0.0.1", 0}, {"255.255.255.255", 0},
                {"240.0.0.1", 0}, {"192.0.2.1", 0}, {"198.18.0.1", 0}, {"10.0.0.1", 1},
                {"127.0.0.1", 1}, {"8.8.8.8", 1}, {"::ffff:8.8.8.8", 1}, {"2606:4700::1", 0});
    CHECK_ADDRS("::/0", {"::", 0}, {"ff02::1", 0}, {"2001:db8::1", 0}, {"2002::1", 0}, {"::1", 1},
                {"fe80::1", 1}, {"2606:4700::1", 1}, {"::ffff:8.8.8.8", 0}, {"8.8.8.8", 0});
    CHECK_ADDRS("*, loopback, private, link-local, 0.0.0.0/8, 224.0.0.0/4", {"0.0.0.0", 0},
                {"224.0.0.1", 0}, {"::", 0}, {"127.0.0.1", 1}, {"10.0.0.1", 1}, {"169.254.0.1", 1});
    /* a name entry admits public addresses only */
    CHECK_ADDRS("example.com", {"93.184.216.34", 1}, {"2606:2800::1", 1}, {"10.0.0.1", 0},
                {"127.0.0.1", 0}, {"::1", 0}, {"169.254.169.254", 0}, {"::ffff:10.0.0.1", 0},
                {"fd00::1", 0});
    CHECK_ADDRS("example.com, private", {"10.0.0.1", 1}, {"127.0.0.1", 0});
    /* nothing listed: nothing admitted */
    CHECK_ADDRS("", {"8.8.8.8", 0}, {"127.0.0.1", 0});

    dq_allow *a = allow_ok("*, loopback, private, link-local");
    struct sockaddr_un un;
    memset(&un, 0, sizeof un);
    un.sun_family = AF_UNIX;
    assert_int_equal(guard_addr_allowed(a, (const struct sockaddr *)&un), 0);
    assert_int_equal(guard_addr_allowed(a, NULL), 0);
    assert_int_equal(guard_addr_allowed(NULL, NULL), 0);
    /* a scope id changes nothing */
    struct sockaddr_in6 in6;
    memset(&in6, 0, sizeof in6);
    in6.sin6_family = AF_INET6;
    in6.sin6_scope_id = 2;
    assert_int_equal(inet_pton(AF_INET6, "fe80::1", &in6.sin6_addr), 1);
    assert_int_equal(guard_addr_allowed(a, (const struct sockaddr *)&in6), 1);
    guard_allow_free(a);
}

static void test_host_allowed(void **state)
{
    (void)state;
    CHECK_HOSTS("", {"example.com", 0}, {"8.8.8.8", 0}, {"localhost", 0});
    CHECK_HOSTS("*", {"example.com", 1}, {"a.b.c", 1}, {"receiver", 1}, {"8.8.8.8", 1},
                {"2606:4700::1111", 1}, {"[2606:4700::1111]", 1}, {"127.0.0.1", 0}, {"10.0.0.1", 0},
                {"::1", 0}, {"[::1]", 0}, {"::ffff:127.0.0.1", 0}, {"localhost", 0},
                {"api.localhost", 0}, {"LOCALHOST", 0}, {"0177.0.0.1", 0}, {"2130706433", 0},
                {"ex_ample.com", 0}, {"", 0}, {"[::1", 0}, {"0.0.0.0", 0});
    CHECK_HOSTS("example.com *.corp.example", {"example.com", 1}, {"EXAMPLE.com", 1},
                {"www.example.com", 0}, {"corp.example", 0}, {"a.corp.example", 1},
                {"a.b.corp.example", 1}, {"xcorp.example", 0}, {"corp.example.evil.com", 0},
                {"example.com.evil.com", 0}, {"evil.com", 0},
                /* a list of names admits no address literal */
                {"93.184.216.34", 0}, {"2606:2800::1", 0}, {"10.0.0.1", 0});
    /* localhost means loopback */
    CHECK_HOSTS("loopback", {"localhost", 1}, {"x.localhost", 1}, {"127.0.0.1", 1}, {"::1", 1},
                {"[::1]", 1}, {"example.com", 0}, {"xlocalhost", 0});
    CHECK_HOSTS("127.0.0.0/8", {"localhost", 1}, {"127.0.0.1", 1});
    CHECK_HOSTS("::1", {"localhost", 1}, {"127.0.0.1", 0});
    /* address entries admit literals, not names */
    CHECK_HOSTS("10.1.0.0/16", {"10.1.2.3", 1}, {"10.2.0.1", 0}, {"internal.corp", 0},
                {"::ffff:10.1.2.3", 1}, {"localhost", 0});
    CHECK_HOSTS("private", {"10.0.0.1", 1}, {"fd00::1", 1}, {"intranet", 0}, {"127.0.0.1", 0});
    CHECK_HOSTS("8.8.8.8", {"8.8.8.8", 1}, {"8.8.4.4", 0});
    CHECK_HOSTS("*, 10.0.0.0/8", {"intranet", 1}, {"10.0.0.1", 1}, {"192.168.0.1", 0});
    assert_int_equal(guard_host_allowed(NULL, "example.com"), 0);
    dq_allow *a = allow_ok("*");
    assert_int_equal(guard_host_allowed(a, NULL), 0);
    guard_allow_free(a);
}

/* The two checks together, as delayq-push makes them. */
static void test_name_then_address(void **state)
{
    (void)state;
    static dq_url u;
    dq_allow *a = allow_ok("hooks.example.com");
    url_ok("https://HOOKS.example.com/in", &u);
    assert_int_equal(guard_host_allowed(a, u.host), 1);
    /* the name resolves: public is fine, a rebinding to inside is not */
    assert_int_equal(addr_allowed(a, "93.184.216.34"), 1);
    assert_int_equal(addr_allowed(a, "127.0.0.1"), 0);
    assert_int_equal(addr_allowed(a, "169.254.169.254"), 0);
    assert_int_equal(addr_allowed(a, "::ffff:10.0.0.1"), 0);
    assert_int_equal(addr_allowed(a, "64:ff9b::a9fe:a9fe"), 0);
    url_ok("http://10.0.0.1/in", &u);
    assert_int_equal(guard_host_allowed(a, u.host), 0);
    url_ok("http://other.example.com/in", &u);
    assert_int_equal(guard_host_allowed(a, u.host), 0);
    guard_allow_free(a);

    a = allow_ok("hooks.example.com, private");
    assert_int_equal(addr_allowed(a, "10.0.0.1"), 1);
    url_ok("http://[fd00::5]:8080/in", &u);
    assert_int_equal(guard_host_allowed(a, u.host), 1);
    guard_allow_free(a);
}

/* ---------------------------------------------------------------- Retry-After */

#define EPOCH_1994 INT64_C(784111777) /* Sun, 06 Nov 1994 08:49:37 GMT */
#define EPOCH_2026 INT64_C(1767225600) /* Thu, 01 Jan 2026 00:00:00 GMT */

static int64_t retry_ok(const char *value, int64_t now)
{
    int64_t s = -12345;
    if (guard_retry_after(value, now, &s) != 0)
        fail_msg("refused Retry-After '%s'", value);
    return s;
}

static void test_retry_after_seconds(void **state)
{
    (void)state;
    assert_int_equal(retry_ok("120", EPOCH_2026), 120);
    assert_int_equal(retry_ok("0", EPOCH_2026), 0);
    assert_int_equal(retry_ok(" \t120 \t", EPOCH_2026), 120);
    assert_int_equal(retry_ok("007", EPOCH_2026), 7);
    assert_int_equal(retry_ok("9223372036854775807", EPOCH_2026), INT64_MAX);
    assert_int_equal(retry_ok("9223372036854775808", EPOCH_2026), INT64_MAX);
    assert_int_equal(retry_ok("99999999999999999999999999", EPOCH_2026), INT64_MAX);
}

static void test_retry_after_dates(void **state)
{
    (void)state;
    /* the three forms of RFC 9110's example date */
    static const char *const forms[] = {
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
        "Sun Nov 06 08:49:37 1994",
        "  Sun, 06 Nov 1994 08:49:37 GMT\t",
    };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        assert_int_equal(retry_ok(forms[i], EPOCH_1994 - 100), 100);
        assert_int_equal(retry_ok(forms[i], EPOCH_1994), 0);
        assert_int_equal(retry_ok(forms[i], EPOCH_1994 + 5), 0); /* past: no wait */
    }
    assert_int_equal(retry_ok("Thu, 01 Jan 1970 00:00:00 GMT", EPOCH_2026), 0);
    assert_int_equal(retry_ok("Thu, 29 Feb 2024 00:00:00 GMT", INT64_C(1709164800) - 60), 60);
    assert_int_equal(retry_ok("Tue, 29 Feb 2000 12:00:00 GMT", INT64_C(951825600) - 1), 1);
    /* a leap second is the next minute's first */
    assert_int_equal(retry_ok("Sat, 31 Dec 2016 23:59:60 GMT", INT64_C(1483228800) - 10), 10);
    assert_int_equal(retry_ok("Fri, 31 Dec 9999 23:59:59 GMT", EPOCH_2026),
                     INT64_C(253402300799) - EPOCH_2026);
    /* RFC 850 two-digit years: more than 50 years ahead means last century */
    assert_int_equal(retry_ok("Friday, 01-Jan-27 00:00:00 GMT", EPOCH_2026), INT64_C(1798761600) - EPOCH_2026);
    assert_int_equal(retry_ok("Wednesday, 01-Jan-76 00:00:00 GMT", EPOCH_2026),
                     INT64_C(3345062400) - EPOCH_2026);
    assert_int_equal(retry_ok("Saturday, 01-Jan-77 00:00:00 GMT", EPOCH_2026), 0); /* 1977 */
    assert_int_equal(retry_ok("Sunday, 06-Nov-94 08:49:37 GMT", EPOCH_2026), 0);   /* 1994 */
}

static void test_retry_after_bad(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "  \t ",
        "-1",
        "+5",
        "5.5",
        "5s",
        "1 2",
        "0x10",
        "1e3",
        "soon",
        "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 06 Nov 1994 08:49:37",
        "Sun, 06 Nov 1994 08:49:37 GMT x",
        "sun, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 nov 1994 08:49:37 GMT",
        "Sun, 6 Nov 1994 08:49:37 GMT",
        "Sun 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 94 08:49:37 GMT",
        "Sun, 06 Foo 1994 08:49:37 GMT",
        "Sun, 06-Nov-94 08:49:37 GMT",
        "Sunday, 06-Nov-1994 08:49:37 GMT",
        "Sun Nov 6 08:49:37 1994",
        "Sun Nov  6 08:49:37 94",
        "Sun, 06 Nov 1994 8:49:37 GMT",
        "Sun, 06 Nov 1994 08:49 GMT",
        "Sun, 00 Nov 1994 08:49:37 GMT",
        "Sun, 32 Jan 1994 08:49:37 GMT",
        "Sun, 31 Apr 1994 08:49:37 GMT",
        "Wed, 29 Feb 2023 00:00:00 GMT",
        "Thu, 29 Feb 1900 00:00:00 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT",
        "Sun, 06 Nov 1994 23:60:00 GMT",
        "Sun, 06 Nov 1994 23:59:61 GMT",
        "2026-01-01T00:00:00Z",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t s = 42;
        if (guard_retry_after(bad[i], EPOCH_2026, &s) != -1)
            fail_msg("accepted Retry-After '%s'", bad[i]);
        assert_int_equal(s, 42);
    }
    int64_t s = 42;
    assert_int_equal(guard_retry_after(NULL, EPOCH_2026, &s), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url_accepts),
        cmocka_unit_test(test_url_rejects),
        cmocka_unit_test(test_url_numeric_hosts),
        cmocka_unit_test(test_allow_parse),
        cmocka_unit_test(test_addr_classes),
        cmocka_unit_test(test_addr_allowed),
        cmocka_unit_test(test_host_allowed),
        cmocka_unit_test(test_name_then_address),
        cmocka_unit_test(test_retry_after_seconds),
        cmocka_unit_test(test_retry_after_dates),
        cmocka_unit_test(test_retry_after_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
