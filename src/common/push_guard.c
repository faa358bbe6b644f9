/* push_guard: callback URL parsing, the push_allow list, address classes
 * and Retry-After. The rules themselves are in push_guard.h. */
#include "common/push_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"

#define URL_FIELD "field 'callback.url'"
#define ALLOW_KEY "config key 'push_allow'"

/* ---------------------------------------------------------------- characters
 * ASCII only, whatever the locale says. */

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int is_hex(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static char to_lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* ---------------------------------------------------------------- addresses */

/* An address in network byte order: AF_INET uses b[0..3], the rest zero. */
typedef struct {
    int family;
    unsigned char b[16];
} ipaddr;

/* 1 if s[0..n) is a.b.c.d: four decimal numbers 0-255, no leading zeros.
 * The only IPv4 spelling accepted: inet_aton and the URL standards also
 * read 127.1, 0177.0.0.1, 0x7f.0.0.1 and 2130706433, and not alike. */
static int parse_ipv4(const char *s, size_t n, unsigned char b[4])
{
    size_t i = 0;
    for (int part = 0; part < 4; part++) {
        if (part > 0) {
            if (i >= n || s[i] != '.')
                return 0;
            i++;
        }
        size_t start = i;
        unsigned v = 0;
        while (i < n && i - start < 3 && is_digit(s[i]))
            v = v * 10 + (unsigned)(s[i++] - '0');
        size_t len = i - start;
        if (len == 0 || v > 255 || (len > 1 && s[start] == '0'))
            return 0;
        b[part] = (unsigned char)v;
    }
    return i == n;
}

/* 1 if s[0..n) is an IPv6 address (no brackets, no zone id). */
static int parse_ipv6(const char *s, size_t n, unsigned char b[16])
{
    char text[INET6_ADDRSTRLEN];
    if (n == 0 || n >= sizeof text)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_hex(s[i]) && s[i] != ':' && s[i] != '.')
            return 0;
    }
    memcpy(text, s, n);
    text[n] = '\0';
    return inet_pton(AF_INET6, text, b) == 1;
}

/* 1 if the last label of s[0..n) is a number (decimal digits, or 0x and hex
 * digits): the WHATWG URL standard then reads the whole host as IPv4, and
 * so do resolvers; such a host is either a.b.c.d or refused. */
static int ends_in_number(const char *s, size_t n)
{
    if (n > 0 && s[n - 1] == '.')
        n--;
    size_t start = n;
    while (start > 0 && s[start - 1] != '.')
        start--;
    const char *l = s + start;
    size_t ln = n - start;
    if (ln == 0)
        return 0;
    size_t i = 0;
    int hex = ln >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X');
    if (hex)
        i = 2;
    for (; i < ln; i++) {
        if (hex ? !is_hex(l[i]) : !is_digit(l[i]))
            return 0;
    }
    return 1;
}

/* 1 if s[0..n) is a DNS host name: labels of 1-63 letters, digits and '-',
 * not starting or ending with '-', at most GUARD_HOST_MAX bytes, no final
 * '.' (so one name has one spelling for the allow list). */
static int name_valid(const char *s, size_t n)
{
    if (n == 0 || n > GUARD_HOST_MAX)
        return 0;
    size_t label = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || s[i] == '.') {
            if (label == 0 || label > 63 || s[i - 1] == '-' || s[i - label] == '-')
                return 0;
            label = 0;
        } else if (is_alpha(s[i]) || is_digit(s[i]) || s[i] == '-') {
            label++;
        } else {
            return 0;
        }
    }
    return 1;
}

/* 1 if the first prefix bits of a and net agree. */
static int prefix_match(const unsigned char *a, const unsigned char *net, int prefix)
{
    int full = prefix / 8, rest = prefix % 8;
    if (memcmp(a, net, (size_t)full) != 0)
        return 0;
    if (rest == 0)
        return 1;
    unsigned char mask = (unsigned char)(0xff << (8 - rest));
    return (a[full] & mask) == (net[full] & mask);
}

/* An IPv4-mapped, IPv4-compatible or NAT64 (64:ff9b::/96) address becomes
 * the IPv4 address in it: that is where such a connection ends up. */
static void unmap(ipaddr *a)
{
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const unsigned char nat64[12] = {0x00, 0x64, 0xff, 0x9b};
    static const unsigned char zero[12] = {0};
    if (a->family != AF_INET6)
        return;
    int embedded = memcmp(a->b, mapped, 12) == 0 || memcmp(a->b, nat64, 12) == 0;
    /* IPv4-compatible (::a.b.c.d, deprecated), but for :: and ::1 */
    if (!embedded && memcmp(a->b, zero, 12) == 0)
        embedded = a->b[12] || a->b[13] || a->b[14] || a->b[15] > 1;
    if (embedded) {
        a->family = AF_INET;
        memmove(a->b, a->b + 12, 4);
        memset(a->b + 4, 0, 12);
    }
}

typedef struct {
    unsigned char net[16];
    int prefix;
    dq_addr_class cls;
} special_block;

/* The IANA special-purpose registries, and multicast, as they bear on
 * where a callback may go; first match wins. */
static const special_block SPECIAL_V4[] = {
    {{0, 0, 0, 0}, 8, GUARD_ADDR_REFUSED},         /* "this network", 0.0.0.0 */
    {{127, 0, 0, 0}, 8, GUARD_ADDR_LOOPBACK},      /* loopback */
    {{10, 0, 0, 0}, 8, GUARD_ADDR_PRIVATE},        /* private-use */
    {{172, 16, 0, 0}, 12, GUARD_ADDR_PRIVATE},     /* private-use */
    {{192, 168, 0, 0}, 16, GUARD_ADDR_PRIVATE},    /* private-use */
    {{100, 64, 0, 0}, 10, GUARD_ADDR_PRIVATE},     /* shared address space (carrier NAT) */
    {{169, 254, 0, 0}, 16, GUARD_ADDR_LINK_LOCAL}, /* link-local, cloud metadata too */
    {{192, 0, 0, 0}, 24, GUARD_ADDR_REFUSED},      /* IETF protocol assignments */
    {{192, 0, 2, 0}, 24, GUARD_ADDR_REFUSED},      /* documentation (TEST-NET-1) */
    {{198, 51, 100, 0}, 24, GUARD_ADDR_REFUSED},   /* documentation (TEST-NET-2) */
    {{203, 0, 113, 0}, 24, GUARD_ADDR_REFUSED},    /* documentation (TEST-NET-3) */
    {{198, 18, 0, 0}, 15, GUARD_ADDR_REFUSED},     /* benchmarking */
    {{192, 88, 99, 0}, 24, GUARD_ADDR_REFUSED},    /* 6to4 relay anycast (deprecated) */
    {{224, 0, 0, 0}, 4, GUARD_ADDR_REFUSED},       /* multicast */
    {{240, 0, 0, 0}, 4, GUARD_ADDR_REFUSED},       /* reserved; 255.255.255.255 broadcast */
};

static const special_block SPECIAL_V6[] = {
    {{0}, 128, GUARD_ADDR_REFUSED},                                   /* :: unspecified */
    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 128, GUARD_ADDR_LOOPBACK}, /* ::1 */
    {{0xfe, 0x80}, 10, GUARD_ADDR_LINK_LOCAL},                        /* link-local */
    {{0xfc}, 7, GUARD_ADDR_PRIVATE},                                  /* unique-local */
    {{0xfe, 0xc0}, 10, GUARD_ADDR_PRIVATE},                           /* site-local (deprecated) */
    {{0x00, 0x64, 0xff, 0x9b, 0x00, 0x01}, 48, GUARD_ADDR_PRIVATE},   /* local-use NAT64 */
    {{0xff}, 8, GUARD_ADDR_REFUSED},                                  /* multicast */
    {{0x20, 0x01, 0x00}, 23, GUARD_ADDR_REFUSED},   /* IETF protocol assignments, Teredo */
    {{0x20, 0x01, 0x0d, 0xb8}, 32, GUARD_ADDR_REFUSED}, /* documentation */
    {{0x3f, 0xff, 0x00}, 20, GUARD_ADDR_REFUSED},   /* documentation */
    {{0x20, 0x02}, 16, GUARD_ADDR_REFUSED},         /* 6to4 */
};

/* The class of an address already unmapped. */
static dq_addr_class classify(const ipaddr *a)
{
    const special_block *t = a->family == AF_INET ? SPECIAL_V4 : SPECIAL_V6;
    size_t n = a->family == AF_INET ? sizeof SPECIAL_V4 / sizeof SPECIAL_V4[0]
                                    : sizeof SPECIAL_V6 / sizeof SPECIAL_V6[0];
    for (size_t i = 0; i < n; i++) {
        if (prefix_match(a->b, t[i].net, t[i].prefix))
            return t[i].cls;
    }
    /* IPv6 global unicast is 2000::/3; the rest is unassigned or special
     * (100::/64 discard, 5f00::/16 SRv6 and so on). */
    static const unsigned char global6[1] = {0x20};
    if (a->family == AF_INET6 && !prefix_match(a->b, global6, 3))
        return GUARD_ADDR_REFUSED;
    return GUARD_ADDR_PUBLIC;
}

static int from_sockaddr(const struct sockaddr *sa, ipaddr *a)
{
    memset(a, 0, sizeof *a);
    if (!sa)
        return -1;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        memcpy(a->b, &in->sin_addr, 4);
        a->family = AF_INET;
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        memcpy(a->b, &in6->sin6_addr, 16);
        a->family = AF_INET6;
        return 0;
    }
    return -1;
}

dq_addr_class guard_addr_class(const struct sockaddr *sa)
{
    ipaddr a;
    if (from_sockaddr(sa, &a) < 0)
        return GUARD_ADDR_REFUSED;
    unmap(&a);
    return classify(&a);
}

const char *guard_addr_class_name(dq_addr_class c)
{
    switch (c) {
    case GUARD_ADDR_PUBLIC:
        return "public";
    case GUARD_ADDR_LOOPBACK:
        return "loopback";
    case GUARD_ADDR_PRIVATE:
        return "private";
    case GUARD_ADDR_LINK_LOCAL:
        return "link-local";
    case GUARD_ADDR_REFUSED:
        break;
    }
    return "reserved";
}

/* ---------------------------------------------------------------- allow list */

typedef struct {
    ipaddr net;
    int prefix;
} cidr_entry;

typedef struct {
    char name[GUARD_HOST_MAX + 1]; /* lower case; for *.example.com, example.com */
    int subdomains;
} name_entry;

struct dq_allow {
    int any;
    int loopback, private_nets, link_local; /* the class words */
    cidr_entry *cidrs;
    size_t ncidrs;
    name_entry *names;
    size_t nnames;
};

void guard_allow_free(dq_allow *a)
{
    if (!a)
        return;
    free(a->cidrs);
    free(a->names);
    free(a);
}

static int is_localhost(const char *name, size_t n)
{
    return strcmp(name, "localhost") == 0 || (n > 10 && strcmp(name + n - 10, ".localhost") == 0);
}

/* 1 if the bits of a past prefix are all zero (bytes: 4 or 16). */
static int host_bits_zero(const unsigned char *a, size_t bytes, int prefix)
{
    for (size_t i = 0; i < bytes; i++) {
        int keep = prefix - (int)i * 8;
        unsigned mask = keep >= 8 ? 0xffu : keep <= 0 ? 0u : (0xffu << (8 - keep)) & 0xffu;
        if (a[i] & ~mask)
            return 0;
    }
    return 1;
}

/* Parses an address or CIDR entry (lower-cased, NUL-terminated) into c.
 * Returns 0, or -1 with err. */
static int parse_cidr(const char *e, const char *where, cidr_entry *c, char *err, size_t errlen)
{
    size_t n = strlen(e);
    const char *slash = memchr(e, '/', n);
    const char *addr = e;
    size_t alen = slash ? (size_t)(slash - e) : n;
    if (alen >= 2 && addr[0] == '[' && addr[alen - 1] == ']') {
        addr++;
        alen -= 2;
    }
    memset(c, 0, sizeof *c);
    int max;
    if (memchr(addr, ':', alen)) {
        if (!parse_ipv6(addr, alen, c->net.b)) {
            snprintf(err, errlen, "%s is not a valid IPv6 address", where);
            return -1;
        }
        c->net.family = AF_INET6;
        max = 128;
    } else {
        if (!parse_ipv4(addr, alen, c->net.b)) {
            snprintf(err, errlen,
                     "%s is not an IPv4 address written as a.b.c.d (four numbers 0-255, no "
                     "leading zeros)",
                     where);
            return -1;
        }
        c->net.family = AF_INET;
        max = 32;
    }
    c->prefix = max;
    if (slash) {
        const char *d = slash + 1;
        size_t dn = n - alen - 1 - (addr != e ? 2 : 0);
        int v = 0;
        int ok = dn >= 1 && dn <= 3 && !(dn > 1 && d[0] == '0');
        for (size_t i = 0; ok && i < dn; i++) {
            ok = is_digit(d[i]);
            v = v * 10 + (d[i] - '0');
        }
        if (!ok || v > max) {
            snprintf(err, errlen, "%s has a prefix length that is not a number from 0 to %d", where, max);
            return -1;
        }
        c->prefix = v;
    }
    if (!host_bits_zero(c->net.b, max / 8, c->prefix)) {
        snprintf(err, errlen, "%s has address bits set past /%d (write the network address)", where,
                 c->prefix);
        return -1;
    }
    ipaddr probe = c->net;
    unmap(&probe);
    if (probe.family != c->net.family && c->prefix >= 96) {
        snprintf(err, errlen,
                 "%s is an IPv4 address in IPv6 form (::ffff:a.b.c.d, ::a.b.c.d or "
                 "64:ff9b::a.b.c.d), which is judged as IPv4: write it as IPv4",
                 where);
        return -1;
    }
    return 0;
}

static void add_name(dq_allow *a, const char *name, int subdomains)
{
    name_entry *grown = util_xrealloc(a->names, (a->nnames + 1) * sizeof *grown);
    a->names = grown;
    memset(&a->names[a->nnames], 0, sizeof a->names[a->nnames]);
    strcpy(a->names[a->nnames].name, name); /* name_valid: at most GUARD_HOST_MAX */
    a->names[a->nnames].subdomains = subdomains;
    a->nnames++;
}

/* One entry, s[0..n). Returns 0, or -1 with err naming it by position. */
static int parse_entry(dq_allow *a, const char *s, size_t n, size_t pos, char *err, size_t errlen)
{
    char where[128];
    snprintf(where, sizeof where, ALLOW_KEY ": entry %zu '%.*s'", pos, (int)(n > 64 ? 64 : n), s);
    char e[GUARD_HOST_MAX + 3]; /* "*." and a name */
    if (n >= sizeof e) {
        snprintf(err, errlen, "%s is longer than %d bytes", where, GUARD_HOST_MAX);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        e[i] = to_lower(s[i]);
    e[n] = '\0';

    if (strcmp(e, "*") == 0) {
        a->any = 1;
        return 0;
    }
    if (strcmp(e, "loopback") == 0) {
        a->loopback = 1;
        return 0;
    }
    if (strcmp(e, "private") == 0) {
        a->private_nets = 1;
        return 0;
    }
    if (strcmp(e, "link-local") == 0) {
        a->link_local = 1;
        return 0;
    }
    unsigned char v4[4];
    if (strchr(e, '/') || strchr(e, ':') || parse_ipv4(e, n, v4) || (ends_in_number(e, n) && !strchr(e, '*'))) {
        cidr_entry c;
        if (parse_cidr(e, where, &c, err, errlen) < 0)
            return -1;
        cidr_entry *grown = util_xrealloc(a->cidrs, (a->ncidrs + 1) * sizeof *grown);
        a->cidrs = grown;
        a->cidrs[a->ncidrs++] = c;
        return 0;
    }
    int subdomains = strncmp(e, "*.", 2) == 0;
    const char *name = e + (subdomains ? 2 : 0);
    size_t nn = n - (subdomains ? 2 : 0);
    if (!name_valid(name, nn) || ends_in_number(name, nn)) {
        snprintf(err, errlen,
                 "%s is not a host name, *.domain, IP address, CIDR block, '*', loopback, private "
                 "or link-local",
                 where);
        return -1;
    }
    if (is_localhost(name, nn)) {
        snprintf(err, errlen, "%s: localhost always means loopback; write loopback instead", where);
        return -1;
    }
    add_name(a, name, subdomains);
    return 0;
}

dq_allow *guard_allow_parse(const char *spec, char *err, size_t errlen)
{
    dq_allow *a = util_xcalloc(1, sizeof *a);
    const char *p = spec ? spec : "", *word;
    size_t pos = 0, len;
    while (util_next_word(&p, &word, &len)) {
        if (parse_entry(a, word, len, ++pos, err, errlen) < 0) {
            guard_allow_free(a);
            return NULL;
        }
    }
    return a;
}

static int covered(const dq_allow *a, const ipaddr *x)
{
    for (size_t i = 0; i < a->ncidrs; i++) {
        if (a->cidrs[i].net.family == x->family && prefix_match(x->b, a->cidrs[i].net.b, a->cidrs[i].prefix))
            return 1;
    }
    return 0;
}

/* The address rule; by_name: whether name entries admit public addresses
 * (at connect time they do, for a URL's address literal they do not). */
static int addr_allowed(const dq_allow *a, ipaddr x, int by_name)
{
    unmap(&x);
    dq_addr_class c = classify(&x);
    if (c == GUARD_ADDR_REFUSED)
        return 0;
    if (covered(a, &x))
        return 1;
    switch (c) {
    case GUARD_ADDR_LOOPBACK:
        return a->loopback;
    case GUARD_ADDR_PRIVATE:
        return a->private_nets;
    case GUARD_ADDR_LINK_LOCAL:
        return a->link_local;
    case GUARD_ADDR_PUBLIC:
        return a->any || (by_name && a->nnames > 0);
    case GUARD_ADDR_REFUSED:
        break;
    }
    return 0;
}

int guard_addr_allowed(const dq_allow *a, const struct sockaddr *sa)
{
    ipaddr x;
    if (!a || from_sockaddr(sa, &x) < 0)
        return 0;
    return addr_allowed(a, x, 1);
}

static int name_matches(const name_entry *e, const char *name, size_t n)
{
    if (!e->subdomains)
        return strcmp(e->name, name) == 0;
    size_t en = strlen(e->name);
    return n > en + 1 && name[n - en - 1] == '.' && strcmp(name + n - en, e->name) == 0;
}

int guard_host_allowed(const dq_allow *a, const char *host)
{
    if (!a || !host)
        return 0;
    size_t n = strlen(host);
    ipaddr x;
    memset(&x, 0, sizeof x);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
        host++;
        n -= 2;
        if (!parse_ipv6(host, n, x.b))
            return 0;
        x.family = AF_INET6;
        return addr_allowed(a, x, 0);
    }
    if (memchr(host, ':', n)) {
        if (!parse_ipv6(host, n, x.b))
            return 0;
        x.family = AF_INET6;
        return addr_allowed(a, x, 0);
    }
    if (parse_ipv4(host, n, x.b)) {
        x.family = AF_INET;
        return addr_allowed(a, x, 0);
    }
    if (!name_valid(host, n) || ends_in_number(host, n))
        return 0;
    char name[GUARD_HOST_MAX + 1];
    for (size_t i = 0; i <= n; i++)
        name[i] = to_lower(host[i]);
    if (is_localhost(name, n)) {
        ipaddr lo4 = {AF_INET, {127, 0, 0, 1}};
        ipaddr lo6 = {AF_INET6, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}};
        return addr_allowed(a, lo4, 0) || addr_allowed(a, lo6, 0);
    }
    if (a->any)
        return 1;
    for (size_t i = 0; i < a->nnames; i++) {
        if (name_matches(&a->names[i], name, n))
            return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- URLs */

/* RFC 3986 characters of a path or query besides '%' escapes: unreserved,
 * sub-delims, ':', '@', '/', '?'. */
static int path_char(char c)
{
    return is_alpha(c) || is_digit(c) || (c && strchr("-._~!$&'()*+,;=:@/?", c));
}

/* Where the parts of a URL are: scheme [0, scheme_len), the authority
 * [auth, auth_end) with its host [hs, he) and what follows the host
 * (`after`: a port), then the path and query up to the end. */
typedef struct {
    size_t scheme_len, auth, auth_end, hs, he, after;
    char scheme[8]; /* lower case */
} url_parts;

/* ASCII only, no spaces, control characters or fragment. */
static int url_chars_ok(const char *url, size_t len, char *err, size_t errlen)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)url[i];
        if (c >= 0x80) {
            snprintf(err, errlen,
                     URL_FIELD " must be ASCII (percent-encode other bytes; write an "
                               "internationalized host name in its xn-- form)");
            return -1;
        }
        if (c <= ' ' || c == 0x7f) {
            snprintf(err, errlen, URL_FIELD " must not contain spaces or control characters");
            return -1;
        }
        if (c == '#') {
            snprintf(err, errlen, URL_FIELD " must not have a fragment ('#')");
            return -1;
        }
    }
    return 0;
}

/* scheme ":" "//": http or https. */
static int url_scheme(const char *url, size_t len, url_parts *u, char *err, size_t errlen)
{
    size_t i = 0;
    while (i < len && (is_alpha(url[i]) || (i > 0 && (is_digit(url[i]) || strchr("+-.", url[i])))))
        i++;
    if (i == 0 || i == len || url[i] != ':') {
        snprintf(err, errlen, URL_FIELD " must be an absolute URL such as https://example.com/hook");
        return -1;
    }
    u->scheme_len = i;
    for (size_t j = 0; j < i && j < sizeof u->scheme - 1; j++)
        u->scheme[j] = to_lower(url[j]);
    if (i >= sizeof u->scheme ||
        (strcmp(u->scheme, "http") != 0 && strcmp(u->scheme, "https") != 0)) {
        snprintf(err, errlen, URL_FIELD " must use http or https");
        return -1;
    }
    if (len - i < 3 || url[i + 1] != '/' || url[i + 2] != '/') {
        snprintf(err, errlen, URL_FIELD " must be an absolute URL such as %s://example.com/hook",
                 u->scheme);
        return -1;
    }
    u->auth = i + 3;
    return 0;
}

/* A host name or IPv4 address, up to a ':' or the authority's end. */
static int url_plain_host(const char *url, url_parts *u, dq_url *out, char *err, size_t errlen)
{
    unsigned char addr[16];
    u->hs = u->auth;
    const char *colon = memchr(url + u->auth, ':', u->auth_end - u->auth);
    u->he = colon ? (size_t)(colon - url) : u->auth_end;
    u->after = u->he;
    size_t hn = u->he - u->hs;
    if (hn == 0) {
        snprintf(err, errlen, URL_FIELD " must have a host");
        return -1;
    }
    if (hn > GUARD_HOST_MAX) {
        snprintf(err, errlen, URL_FIELD " must have a host of at most %d bytes", GUARD_HOST_MAX);
        return -1;
    }
    if (parse_ipv4(url + u->hs, hn, addr)) {
        out->host_kind = GUARD_HOST_IPV4;
    } else if (ends_in_number(url + u->hs, hn)) {
        snprintf(err, errlen,
                 URL_FIELD " has a numeric host that is not an IPv4 address written as a.b.c.d "
                           "(four numbers 0-255, no leading zeros); other spellings such as "
                           "0177.0.0.1 or 2130706433 are refused, as resolvers read them "
                           "differently");
        return -1;
    } else if (!name_valid(url + u->hs, hn)) {
        snprintf(err, errlen,
                 URL_FIELD " must have a host that is a DNS name (letters, digits, '-' and "
                           "'.'), an IPv4 address or an IPv6 address in [ ]");
        return -1;
    } else {
        out->host_kind = GUARD_HOST_NAME;
    }
    return 0;
}

/* authority: host [":" port], up to the path or query; no user info. */
static int url_host(const char *url, size_t len, url_parts *u, dq_url *out, char *err,
                    size_t errlen)
{
    size_t auth = u->auth;
    u->auth_end = auth;
    while (u->auth_end < len && url[u->auth_end] != '/' && url[u->auth_end] != '?')
        u->auth_end++;
    if (memchr(url + auth, '@', u->auth_end - auth)) {
        snprintf(err, errlen, URL_FIELD " must not contain a user name or password (user:pass@)");
        return -1;
    }
    if (!(auth < u->auth_end && url[auth] == '['))
        return url_plain_host(url, u, out, err, errlen);
    unsigned char addr[16];
    const char *close = memchr(url + auth, ']', u->auth_end - auth);
    u->hs = auth + 1;
    u->he = close ? (size_t)(close - url) : u->auth_end;
    if (!close || !parse_ipv6(url + u->hs, u->he - u->hs, addr)) {
        snprintf(err, errlen,
                 URL_FIELD " must have a valid IPv6 address between [ and ] (without a zone id)");
        return -1;
    }
    out->host_kind = GUARD_HOST_IPV6;
    u->after = u->he + 1;
    return 0;
}

/* After the host: nothing (the scheme's port), or ":" and 1 to 5 digits. */
static int url_port(const char *url, const url_parts *u, dq_url *out, char *err, size_t errlen)
{
    out->port = strcmp(u->scheme, "https") == 0 ? 443 : 80;
    if (u->after >= u->auth_end)
        return 0;
    size_t ps = u->after + 1, pn = u->auth_end - ps;
    unsigned v = 0;
    int ok = url[u->after] == ':' && pn >= 1 && pn <= 5;
    for (size_t j = 0; ok && j < pn; j++) {
        ok = is_digit(url[ps + j]);
        v = v * 10 + (unsigned)(url[ps + j] - '0');
    }
    if (!ok || v < 1 || v > 65535) {
        snprintf(err, errlen, URL_FIELD " must have a port from 1 to 65535 after the host, if any");
        return -1;
    }
    out->port = v;
    out->port_given = 1;
    return 0;
}

/* Path and query: RFC 3986 characters and well-formed '%' escapes. */
static int url_path_ok(const char *url, size_t from, size_t len, char *err, size_t errlen)
{
    for (size_t j = from; j < len; j++) {
        if (url[j] == '%') {
            if (j + 2 >= len || !is_hex(url[j + 1]) || !is_hex(url[j + 2])) {
                snprintf(err, errlen, URL_FIELD " has a '%%' not followed by two hex digits");
                return -1;
            }
            j += 2;
        } else if (!path_char(url[j])) {
            snprintf(err, errlen,
                     URL_FIELD " must percent-encode the character '%c' in its path or query",
                     url[j]);
            return -1;
        }
    }
    return 0;
}

/* The checked URL into out: scheme and host in lower case, "/" for an
 * empty path. */
static void url_store(const char *url, size_t len, const url_parts *u, dq_url *out)
{
    memcpy(out->url, url, len);
    out->url[len] = '\0';
    for (size_t j = 0; j < u->scheme_len; j++)
        out->url[j] = to_lower(url[j]);
    for (size_t j = u->hs; j < u->he; j++)
        out->url[j] = to_lower(url[j]);
    memcpy(out->scheme, u->scheme, u->scheme_len + 1);
    memcpy(out->host, out->url + u->hs, u->he - u->hs);
    out->host[u->he - u->hs] = '\0';
    size_t pl = len - u->auth_end;
    size_t o = 0;
    if (pl == 0 || url[u->auth_end] != '/')
        out->path[o++] = '/';
    memcpy(out->path + o, url + u->auth_end, pl);
    out->path[o + pl] = '\0';
}

int guard_parse_url(const char *url, size_t len, dq_url *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!url || len == 0) {
        snprintf(err, errlen, URL_FIELD " must not be empty");
        return -1;
    }
    if (len > GUARD_URL_MAX) {
        snprintf(err, errlen, URL_FIELD " must be at most %d bytes", GUARD_URL_MAX);
        return -1;
    }
    url_parts u;
    memset(&u, 0, sizeof u);
    if (url_chars_ok(url, len, err, errlen) < 0 || url_scheme(url, len, &u, err, errlen) < 0 ||
        url_host(url, len, &u, out, err, errlen) < 0 || url_port(url, &u, out, err, errlen) < 0 ||
        url_path_ok(url, u.auth_end, len, err, errlen) < 0)
        return -1;
    url_store(url, len, &u, out);
    return 0;
}

/* ---------------------------------------------------------------- Retry-After */

typedef struct {
    const char *p, *end;
} cursor;

static int take(cursor *c, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, lit, n) != 0)
        return 0;
    c->p += n;
    return 1;
}

/* Exactly digits decimal digits into *v. */
static int take_num(cursor *c, int digits, int *v)
{
    if (c->end - c->p < digits)
        return 0;
    *v = 0;
    for (int i = 0; i < digits; i++) {
        if (!is_digit(c->p[i]))
            return 0;
        *v = *v * 10 + (c->p[i] - '0');
    }
    c->p += digits;
    return 1;
}

/* One of n words (case-sensitive, as RFC 9110's grammar has it); *idx its index. */
static int take_word(cursor *c, const char *const *words, int n, int *idx)
{
    for (int i = 0; i < n; i++) {
        if (take(c, words[i])) {
            *idx = i;
            return 1;
        }
    }
    return 0;
}

static const char *const DAY_NAMES[] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
static const char *const DAY_NAMES_LONG[] = {"Monday", "Tuesday", "Wednesday", "Thursday",
                                             "Friday", "Saturday", "Sunday"};
static const char *const MONTHS[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                     "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

typedef struct {
    int year, month, day, hour, min, sec; /* month 0-11 */
} civil_time;

static int take_time(cursor *c, civil_time *t)
{
    return take_num(c, 2, &t->hour) && take(c, ":") && take_num(c, 2, &t->min) && take(c, ":") &&
           take_num(c, 2, &t->sec);
}

/* "Sun, 06 Nov 1994 08:49:37 GMT" */
static int parse_imf_fixdate(cursor c, civil_time *t)
{
    int ignored;
    return take_word(&c, DAY_NAMES, 7, &ignored) && take(&c, ", ") && take_num(&c, 2, &t->day) &&
           take(&c, " ") && take_word(&c, MONTHS, 12, &t->month) && take(&c, " ") &&
           take_num(&c, 4, &t->year) && take(&c, " ") && take_time(&c, t) && take(&c, " GMT") &&
           c.p == c.end;
}

/* "Sunday, 06-Nov-94 08:49:37 GMT"; the year is two digits, placed by
 * guard_retry_after. */
static int parse_rfc850(cursor c, civil_time *t)
{
    int ignored;
    return take_word(&c, DAY_NAMES_LONG, 7, &ignored) && take(&c, ", ") && take_num(&c, 2, &t->day) &&
           take(&c, "-") && take_word(&c, MONTHS, 12, &t->month) && take(&c, "-") &&
           take_num(&c, 2, &t->year) && take(&c, " ") && take_time(&c, t) && take(&c, " GMT") &&
           c.p == c.end;
}

/* "Sun Nov  6 08:49:37 1994" (the day as 2DIGIT or SP DIGIT) */
static int parse_asctime(cursor c, civil_time *t)
{
    int ignored;
    return take_word(&c, DAY_NAMES, 7, &ignored) && take(&c, " ") && take_word(&c, MONTHS, 12, &t->month) &&
           take(&c, " ") && ((take(&c, " ") && take_num(&c, 1, &t->day)) || take_num(&c, 2, &t->day)) &&
           take(&c, " ") && take_time(&c, t) && take(&c, " ") && take_num(&c, 4, &t->year) &&
           c.p == c.end;
}

static int days_in_month(int year, int month)
{
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    return days[month] + (month == 1 && leap);
}

int guard_retry_after(const char *value, int64_t now_s, int64_t *seconds)
{
    if (!value)
        return -1;
    const char *s = value, *e = value + strlen(value);
    while (s < e && (*s == ' ' || *s == '\t'))
        s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    if (s == e)
        return -1;

    if (is_digit(*s)) {
        int64_t v = 0;
        for (const char *p = s; p < e; p++) {
            if (!is_digit(*p))
                return -1;
            int d = *p - '0';
            v = v > (INT64_MAX - d) / 10 ? INT64_MAX : v * 10 + d;
        }
        *seconds = v;
        return 0;
    }

    cursor c = {s, e};
    civil_time t;
    memset(&t, 0, sizeof t);
    if (parse_rfc850(c, &t)) {
        /* RFC 9110 5.6.7: a two-digit year more than 50 years ahead is the
         * most recent past year with those digits. */
        struct tm now_tm;
        time_t now_t = (time_t)now_s;
        if (!gmtime_r(&now_t, &now_tm))
            return -1;
        int this_year = now_tm.tm_year + 1900;
        int year = this_year - this_year % 100 + t.year;
        if (year > this_year + 50)
            year -= 100;
        t.year = year;
    } else if (!parse_imf_fixdate(c, &t) && !parse_asctime(c, &t)) {
        return -1;
    }
    if (t.day < 1 || t.day > days_in_month(t.year, t.month) || t.hour > 23 || t.min > 59 || t.sec > 60)
        return -1;

    struct tm tm;
    memset(&tm, 0, sizeof tm);
    tm.tm_year = t.year - 1900;
    tm.tm_mon = t.month;
    tm.tm_mday = t.day;
    tm.tm_hour = t.hour;
    tm.tm_min = t.min;
    tm.tm_sec = t.sec; /* a leap second, 60, is the next minute's first */
    int64_t when = (int64_t)timegm(&tm);
    *seconds = when > now_s ? when - now_s : 0;
    return 0;
}
