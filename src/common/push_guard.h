/* push_guard: where delayq-push may deliver a callback, and when to try
 * again. Pure: parsing and checks only, no DNS, no sockets, no global state.
 *
 * A callback URL is checked twice, and must pass both:
 *   1. at add time, guard_parse_url and then guard_host_allowed on its host
 *      (the name check): may a callback name this host at all?
 *   2. at connect time, guard_addr_allowed on each address libcurl is about
 *      to connect to (from CURLOPT_OPENSOCKETFUNCTION; the address check):
 *      may delayq-push open a connection there? This is the check that
 *      counts, since a name can resolve to anything, differently each time.
 *
 * The push_allow list (guard_allow_parse) feeds both:
 *   *                 any public name at add time, any public address at
 *                     connect time.
 *   example.com       that name exactly; *.example.com: names under it (not
 *                     example.com itself). A name entry admits the name at
 *                     add time and public addresses at connect time, never
 *                     a loopback, private or link-local one: a name that
 *                     resolves inward is refused unless the class is let in
 *                     below.
 *   10.1.0.0/16       these addresses (a bare address is a /32 or /128), of
 *   fd00::/8          whatever class, at connect time; and a URL whose host
 *                     is such an address literal at add time. Names are not
 *                     admitted by an address entry.
 *   loopback          the class of addresses, like a block covering them
 *   private           all (private takes in 100.64.0.0/10, the shared
 *   link-local        address space, and IPv6 unique-local and site-local).
 * Never admitted, whatever the list says: unspecified (0.0.0.0/8, ::),
 * multicast, broadcast and reserved (240.0.0.0/4), documentation and
 * benchmarking ranges, IETF protocol assignments (192.0.0.0/24, 2001::/23,
 * Teredo among them), 6to4 (2002::/16), and IPv6 outside 2000::/3 but for the
 * special blocks named here. An IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible
 * (::a.b.c.d) or NAT64 (64:ff9b::a.b.c.d) address is judged as the IPv4
 * address in it, against the IPv4 entries. Names "localhost" and
 * "*.localhost" always mean loopback (RFC 6761): they pass the name check
 * exactly when 127.0.0.1 or ::1 would pass the address check. An empty list
 * admits nothing. Ports are not restricted. */
#ifndef DQ_PUSH_GUARD_H
#define DQ_PUSH_GUARD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define GUARD_URL_MAX 2048
#define GUARD_HOST_MAX 253

typedef enum {
    GUARD_HOST_NAME, /* a DNS name */
    GUARD_HOST_IPV4, /* a dotted-decimal literal */
    GUARD_HOST_IPV6, /* a bracketed literal (host holds it without brackets) */
} dq_host_kind;

/* A parsed callback URL. Self-contained (no pointers), so it may be copied. */
typedef struct {
    char url[GUARD_URL_MAX + 1];   /* the URL, scheme and host lower-cased */
    char scheme[6];                /* "http" or "https" */
    char host[GUARD_HOST_MAX + 1]; /* lower-cased; an IPv6 literal without [] */
    dq_host_kind host_kind;
    unsigned port;                 /* as written, else 80 or 443 */
    int port_given;                /* 1 if the URL names a port */
    char path[GUARD_URL_MAX + 2];  /* path and query as written; "/" first */
} dq_url;

/* Parses a callback URL of len bytes (need not be NUL-terminated). Accepts
 * only absolute http:// and https:// URLs with a host: a DNS name (letters,
 * digits, '-', '.'), a dotted-decimal IPv4 address or a bracketed IPv6
 * address; an optional port 1-65535; a path and query of RFC 3986
 * characters (others percent-encoded). Refuses user:pass@, fragments,
 * whitespace, control and non-ASCII bytes, more than GUARD_URL_MAX bytes,
 * IPv6 zone ids, and IPv4 written any other way than a.b.c.d (0177.0.0.1,
 * 127.1, 0x7f.0.0.1, 2130706433), which resolvers read differently. Returns
 * 0, or -1 with err a sentence naming field 'callback.url' and the rule. */
int guard_parse_url(const char *url, size_t len, dq_url *out, char *err, size_t errlen);

typedef struct dq_allow dq_allow;

/* Parses the push_allow config value: entries separated by commas or
 * spaces, as the header comment lists. Returns NULL with err naming config
 * key 'push_allow', the entry and the rule (a malformed name or address, a
 * CIDR block with bits set past its prefix, an IPv4 address written as
 * IPv6, an unknown word, "localhost" as a name entry). An empty or NULL
 * spec gives a list that admits nothing. Owned by the caller:
 * guard_allow_free it. */
dq_allow *guard_allow_parse(const char *spec, char *err, size_t errlen);
void guard_allow_free(dq_allow *a);

/* The name check done at add time, on dq_url.host (an IPv6 literal with or
 * without brackets): 1 allowed, 0 not. A name passes by '*' or a name entry
 * ("localhost" excepted, as above). An address literal is judged as
 * guard_addr_allowed would judge it, except that name entries do not admit
 * it: a list of names admits no public address literal, only '*' or an
 * address entry covering it does. */
int guard_host_allowed(const dq_allow *a, const char *host);

/* The address check done on the address about to be connected to (AF_INET
 * or AF_INET6; anything else is refused): 1 allowed, 0 not. */
int guard_addr_allowed(const dq_allow *a, const struct sockaddr *sa);

typedef enum {
    GUARD_ADDR_PUBLIC,
    GUARD_ADDR_LOOPBACK,
    GUARD_ADDR_PRIVATE,
    GUARD_ADDR_LINK_LOCAL,
    GUARD_ADDR_REFUSED, /* never admitted: unspecified, multicast, reserved... */
} dq_addr_class;

/* The class guard_addr_allowed puts an address in (embedded IPv4 forms
 * judged as their IPv4 address), and its name for logs ("private"). */
dq_addr_class guard_addr_class(const struct sockaddr *sa);
const char *guard_addr_class_name(dq_addr_class c);

/* Parses a Retry-After header value: delay-seconds, or an HTTP-date in the
 * IMF-fixdate form ("Sun, 06 Nov 1994 08:49:37 GMT") or either obsolete one
 * (RFC 850 "Sunday, 06-Nov-94 08:49:37 GMT", asctime "Sun Nov  6 08:49:37
 * 1994"), with spaces or tabs around it. Sets *seconds to the wait from
 * now_s (Unix seconds): 0 for a date in the past, delay-seconds too large
 * for int64_t saturate. Returns 0, or -1 if the value is none of these. */
int guard_retry_after(const char *value, int64_t now_s, int64_t *seconds);

#endif
