/* Unit tests for src/store/store_slots.c: key slots, the slot map built from real
 * CLUSTER SHARDS / CLUSTER SLOTS replies, MOVED updates, redirection and
 * cluster error parsing, and malformed replies. Replies are made the way
 * store.c gets them: RESP bytes through a hiredis reader. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "store/store_slots.h"
#include "test_slots_replies.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

/* One reply parsed from RESP bytes; the caller frees it with
 * freeReplyObject. Fails the test unless the bytes hold exactly one. */
static redisReply *reply_from(const char *resp, size_t len)
{
    redisReader *rd = redisReaderCreate();
    assert_non_null(rd);
    assert_int_equal(redisReaderFeed(rd, resp, len), REDIS_OK);
    void *r = NULL;
    if (redisReaderGetReply(rd, &r) != REDIS_OK || !r)
        fail_msg("hiredis reads no reply (%s) from: %.*s", rd->errstr, (int)len, resp);
    void *more = NULL;
    assert_int_equal(redisReaderGetReply(rd, &more), REDIS_OK);
    assert_null(more);
    redisReaderFree(rd);
    return r;
}

#define REPLY(lit) reply_from((lit), sizeof(lit) - 1)

static slots_map *map_ok(int (*load)(slots_map *, const struct redisReply *, char *, size_t),
                         const char *resp, size_t len)
{
    slots_map *m = slots_map_new();
    assert_non_null(m);
    redisReply *r = reply_from(resp, len);
    char err[256] = "";
    if (load(m, r, err, sizeof err) != 0)
        fail_msg("unexpected error: %s", err);
    freeReplyObject(r);
    return m;
}

#define SHARDS(lit) map_ok(slots_map_from_shards, (lit), sizeof(lit) - 1)
#define SLOTS(lit) map_ok(slots_map_from_slots, (lit), sizeof(lit) - 1)

/* The node serving slot; fails the test when the slot is uncovered. */
static const slots_node *owner(const slots_map *m, unsigned slot)
{
    int i = slots_map_node_of(m, slot);
    if (i < 0)
        fail_msg("slot %u not covered", slot);
    const slots_node *n = slots_map_node(m, (size_t)i);
    assert_non_null(n);
    assert_true(n->is_master);
    return n;
}

static void assert_owner(const slots_map *m, unsigned slot, const char *host, int port)
{
    const slots_node *n = owner(m, slot);
    if (strcmp(n->host, host) != 0 || n->port != port)
        fail_msg("slot %u: %s:%d, expected %s:%d", slot, n->host, n->port, host, port);
}

static const slots_node *node_at(const slots_map *m, const char *host, int port)
{
    int i = slots_map_find(m, host, port);
    if (i < 0)
        fail_msg("no node %s:%d", host, port);
    return slots_map_node(m, (size_t)i);
}

/* host:port is a replica of mhost:mport. */
static void assert_replica(const slots_map *m, const char *host, int port, const char *mhost, int mport)
{
    const slots_node *n = node_at(m, host, port);
    assert_false(n->is_master);
    assert_int_equal(n->master, slots_map_find(m, mhost, mport));
}

/* Every slot in [start, end] is served by host:port. */
static void assert_range(const slots_map *m, unsigned start, unsigned end, const char *host, int port)
{
    for (unsigned s = start; s <= end; s++)
        assert_owner(m, s, host, port);
}

/* Same nodes in the same order and the same owner for every slot. */
static int map_equal(const slots_map *a, const slots_map *b)
{
    if (slots_map_nodes(a) != slots_map_nodes(b))
        return 0;
    for (size_t i = 0; i < slots_map_nodes(a); i++) {
        const slots_node *x = slots_map_node(a, i), *y = slots_map_node(b, i);
        if (strcmp(x->host, y->host) || x->port != y->port || strcmp(x->id, y->id) ||
            x->is_master != y->is_master || x->master != y->master)
            return 0;
    }
    for (unsigned s = 0; s < SLOTS_COUNT; s++) {
        if (slots_map_node_of(a, s) != slots_map_node_of(b, s))
            return 0;
    }
    return 1;
}

/* Both maps send every slot to the same host:port (node order may differ). */
static void assert_same_routing(const slots_map *a, const slots_map *b)
{
    for (unsigned s = 0; s < SLOTS_COUNT; s++) {
        int i = slots_map_node_of(a, s), j = slots_map_node_of(b, s);
        assert_int_equal(i < 0, j < 0);
        if (i < 0)
            continue;
        const slots_node *x = slots_map_node(a, (size_t)i), *y = slots_map_node(b, (size_t)j);
        assert_string_equal(x->host, y->host);
        assert_int_equal(x->port, y->port);
        assert_string_equal(x->id, y->id);
    }
}

/* What a map must be whatever reply it came from. */
static void assert_consistent(const slots_map *m)
{
    size_t n = slots_map_nodes(m);
    assert_null(slots_map_node(m, n));
    for (size_t i = 0; i < n; i++) {
        const slots_node *nd = slots_map_node(m, i);
        assert_true(nd->port > 0 && nd->port <= 65535);
        assert_true(strlen(nd->host) <= SLOTS_HOST_MAX);
        assert_int_equal(slots_map_find(m, nd->host, nd->port), (int)i);
        if (nd->is_master) {
            assert_int_equal(nd->master, -1);
        } else {
            assert_true(nd->master >= 0 && (size_t)nd->master < n);
            assert_true(slots_map_node(m, (size_t)nd->master)->is_master);
        }
    }
    int all = 1;
    for (unsigned s = 0; s < SLOTS_COUNT; s++) {
        int i = slots_map_node_of(m, s);
        if (i < 0) {
            all = 0;
            continue;
        }
        assert_true((size_t)i < n);
        assert_true(slots_map_node(m, (size_t)i)->is_master);
    }
    assert_int_equal(slots_map_covers_all(m), all);
}

/* ------------------------------------------------------------------------ */
/* Key slots                                                                 */
/* ------------------------------------------------------------------------ */

/* Bit by bit, as the CRC16-XMODEM definition reads. */
static unsigned crc16_reference(const unsigned char *p, size_t len)
{
    unsigned crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (unsigned)p[i] << 8;
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    return crc;
}

#define KS(lit) slots_keyslot((lit), sizeof(lit) - 1)

static void test_keyslot_vectors(void **state)
{
    (void)state;
    /* Each value is what CLUSTER KEYSLOT answered on Redis 7.0.15. */
    assert_int_equal(KS("foo"), 12182);
    assert_int_equal(KS("bar"), 5061);
    assert_int_equal(KS("x"), 16287);
    assert_int_equal(KS("123456789"), 12739);
    assert_int_equal(crc16_reference((const unsigned char *)"123456789", 9), 0x31C3);
    assert_int_equal(KS(""), 0);
    assert_int_equal(slots_keyslot(NULL, 0), 0);
    assert_int_equal(KS("a\0b"), 8383);
    assert_int_equal(KS("\0"), 0);
    assert_int_equal(KS("{delayq}:ready"), 1534);
    assert_int_equal(KS("delayq"), 1534);
}

static void test_keyslot_hash_tags(void **state)
{
    (void)state;
    /* CLUSTER KEYSLOT on Redis 7.0.15 again. */
    assert_int_equal(KS("{user1000}.following"), 3443);
    assert_int_equal(KS("{user1000}.followers"), 3443);
    assert_int_equal(KS("user1000"), 3443);
    assert_int_equal(KS("foo{}{bar}"), 8363); /* empty first tag: the whole key */
    assert_int_equal(crc16_reference((const unsigned char *)"foo{}{bar}", 10) & 16383, 8363);
    assert_int_equal(KS("foo{{bar}}zap"), 4015); /* the tag is "{bar" */
    assert_int_equal(KS("{bar"), 4015);
    assert_int_equal(KS("foo{bar}{zap}"), 5061); /* the first tag: "bar" */
    assert_int_equal(KS("a{b}c"), 3300);
    assert_int_equal(KS("b"), 3300);
    assert_int_equal(KS("{"), 4092);  /* no closing brace */
    assert_int_equal(KS("}"), 12090);
    assert_int_equal(KS("{}"), 15257);
    assert_int_equal(KS("}{"), 12793);
    assert_int_equal(KS("{}{x}"), 3257);
    assert_int_equal(KS("x}{y}"), 12222);      /* a '}' before the '{' does not count */
    assert_int_equal(KS("\xff\xfe{\0}"), 0);    /* the tag is one NUL byte */
    assert_int_equal(KS("abc{"), KS("abc{")); /* a '{' at the very end */
    assert_int_equal(KS("abc{"), crc16_reference((const unsigned char *)"abc{", 4) & 16383);
}

static void test_keyslot_matches_reference(void **state)
{
    (void)state;
    /* Random keys (no braces) of every length up to 64 against the
     * bit-by-bit CRC: catches a wrong table entry. */
    unsigned seed = 12345;
    unsigned char key[64];
    for (int n = 0; n < 20000; n++) {
        size_t len = (size_t)n % (sizeof key + 1);
        for (size_t i = 0; i < len; i++) {
            seed = seed * 1103515245u + 12345u;
            unsigned char c = (unsigned char)(seed >> 16);
            key[i] = c == '{' ? 'x' : c;
        }
        assert_int_equal(slots_keyslot((const char *)key, len), crc16_reference(key, len) & 16383);
    }
    /* Every byte value once, through the whole table. */
    for (unsigned c = 0; c < 256; c++) {
        unsigned char k[2] = {(unsigned char)c, (unsigned char)(255 - c)};
        if (c == '{' || 255 - c == '{')
            continue;
        assert_int_equal(slots_keyslot((const char *)k, 2), crc16_reference(k, 2) & 16383);
    }
}

/* ------------------------------------------------------------------------ */
/* Maps from a real cluster                                                  */
/* ------------------------------------------------------------------------ */

#define ID7301 "606802917a1d078b8babfc0647e6bf5bb3ec07e1"
#define ID7302 "971a8ba1648384a4d896a956de9e83a4606d18db"
#define ID7303 "0c2503c6a13b6db6580603fc424609c1944e08ba"
#define ID7306 "a5dfa3a702364010f13cd6ed4e25856283bca2fa"

static void assert_healthy(const slots_map *m)
{
    assert_consistent(m);
    assert_true(slots_map_covers_all(m));
    assert_int_equal(slots_map_nodes(m), 6);
    assert_range(m, 0, 5460, "127.0.0.1", 7301);
    assert_range(m, 5461, 10922, "127.0.0.1", 7302);
    assert_range(m, 10923, 16383, "127.0.0.1", 7303);
    assert_string_equal(owner(m, 0)->id, ID7301);
    assert_string_equal(owner(m, 5461)->id, ID7302);
    assert_string_equal(owner(m, 16383)->id, ID7303);
    assert_replica(m, "127.0.0.1", 7305, "127.0.0.1", 7301);
    assert_replica(m, "127.0.0.1", 7306, "127.0.0.1", 7302);
    assert_replica(m, "127.0.0.1", 7304, "127.0.0.1", 7303);
    assert_string_equal(node_at(m, "127.0.0.1", 7306)->id, ID7306);
    assert_int_equal(slots_map_node_of(m, SLOTS_COUNT), -1);
    assert_int_equal(slots_map_find(m, "127.0.0.1", 7399), -1);
    assert_int_equal(slots_map_find(m, "127.0.0.2", 7301), -1);
    assert_int_equal(slots_map_find(m, NULL, 7301), -1);
}

static void test_healthy_cluster(void **state)
{
    (void)state;
    slots_map *sh = SHARDS(HEALTHY_SHARDS), *sl = SLOTS(HEALTHY_SLOTS);
    assert_healthy(sh);
    assert_healthy(sl);
    assert_same_routing(sh, sl);

    /* The MOVED that cluster sent for "foo" agrees with the map. */
    redisReply *e = REPLY(ERR_MOVED);
    slots_redirect rd;
    assert_int_equal(slots_parse_redirect(e->str, e->len, &rd), 1);
    assert_int_equal(rd.slot, KS("foo"));
    assert_owner(sh, rd.slot, rd.host, rd.port);
    freeReplyObject(e);
    slots_map_free(sh);
    slots_map_free(sl);
}

static void test_failover_master_down(void **state)
{
    (void)state;
    slots_map *sh = SHARDS(FAILOVER_DOWN_SHARDS), *sl = SLOTS(FAILOVER_DOWN_SLOTS);
    for (int k = 0; k < 2; k++) {
        slots_map *m = k ? sl : sh;
        assert_consistent(m);
        assert_true(slots_map_covers_all(m));
        assert_range(m, 0, 5460, "127.0.0.1", 7301);
        assert_range(m, 5461, 10922, "127.0.0.1", 7306); /* the former replica */
        assert_range(m, 10923, 16383, "127.0.0.1", 7303);
        assert_string_equal(owner(m, 5461)->id, ID7306);
        /* The failed former master is in neither map. */
        assert_int_equal(slots_map_find(m, "127.0.0.1", 7302), -1);
        assert_int_equal(slots_map_nodes(m), 5);
    }
    assert_same_routing(sh, sl);
    slots_map_free(sh);
    slots_map_free(sl);
}

static void test_failover_master_back(void **state)
{
    (void)state;
    slots_map *sh = SHARDS(FAILOVER_BACK_SHARDS), *sl = SLOTS(FAILOVER_BACK_SLOTS);
    for (int k = 0; k < 2; k++) {
        slots_map *m = k ? sl : sh;
        assert_consistent(m);
        assert_true(slots_map_covers_all(m));
        assert_int_equal(slots_map_nodes(m), 6);
        assert_range(m, 5461, 10922, "127.0.0.1", 7306);
        assert_replica(m, "127.0.0.1", 7302, "127.0.0.1", 7306);
        assert_string_equal(node_at(m, "127.0.0.1", 7302)->id, ID7302);
    }
    assert_same_routing(sh, sl);
    slots_map_free(sh);
    slots_map_free(sl);
}

static void test_master_down_without_failover(void **state)
{
    (void)state;
    /* CLUSTER SHARDS tells 7303 has failed: its shard is left out. */
    slots_map *sh = SHARDS(NOFAILOVER_SHARDS);
    assert_consistent(sh);
    assert_false(slots_map_covers_all(sh));
    assert_range(sh, 0, 5460, "127.0.0.1", 7301);
    assert_range(sh, 5461, 10922, "127.0.0.1", 7306);
    for (unsigned s = 10923; s < SLOTS_COUNT; s++)
        assert_int_equal(slots_map_node_of(sh, s), -1);
    assert_int_equal(slots_map_node_of(sh, KS("foo")), -1);
    assert_int_equal(slots_map_find(sh, "127.0.0.1", 7303), -1);
    assert_int_equal(slots_map_find(sh, "127.0.0.1", 7304), -1);
    assert_int_equal(slots_map_nodes(sh), 4);

    /* CLUSTER SLOTS has no health: 7303 still covers its slots. */
    slots_map *sl = SLOTS(NOFAILOVER_SLOTS);
    assert_consistent(sl);
    assert_true(slots_map_covers_all(sl));
    assert_range(sl, 10923, 16383, "127.0.0.1", 7303);

    /* What that cluster answered meanwhile. */
    redisReply *e = REPLY(ERR_CLUSTERDOWN);
    assert_int_equal(slots_error_kind(e->str, e->len), SLOTS_ERR_CLUSTERDOWN);
    slots_redirect rd;
    assert_int_equal(slots_parse_redirect(e->str, e->len, &rd), 0);
    freeReplyObject(e);
    slots_map_free(sh);
    slots_map_free(sl);
}

static void test_hostname_endpoints(void **state)
{
    (void)state;
    slots_map *sh = SHARDS(HOSTNAME_SHARDS), *sl = SLOTS(HOSTNAME_SLOTS);
    for (int k = 0; k < 2; k++) {
        slots_map *m = k ? sl : sh;
        assert_consistent(m);
        assert_true(slots_map_covers_all(m));
        /* "?" (no hostname announced) falls back to the IP address. */
        assert_range(m, 0, 5460, "127.0.0.1", 7301);
        assert_range(m, 5461, 10922, "localhost", 7302);
        assert_range(m, 10923, 16383, "127.0.0.1", 7303);
        assert_replica(m, "localhost", 7306, "localhost", 7302);
        assert_replica(m, "127.0.0.1", 7304, "127.0.0.1", 7303);
        assert_int_equal(slots_map_find(m, "LOCALHOST", 7302), slots_map_find(m, "localhost", 7302));
    }
    assert_same_routing(sh, sl);

    /* That node's MOVED names "?": not a node to follow. */
    redisReply *e = REPLY(ERR_MOVED_HOSTNAME);
    slots_redirect rd;
    assert_int_equal(slots_parse_redirect(e->str, e->len, &rd), 1);
    assert_string_equal(rd.host, "?");
    assert_int_equal(rd.port, 7303);
    slots_map_set(sh, rd.slot, rd.host, rd.port); /* changes nothing */
    assert_owner(sh, rd.slot, "127.0.0.1", 7303);
    assert_int_equal(slots_map_nodes(sh), 6);
    freeReplyObject(e);
    slots_map_free(sh);
    slots_map_free(sl);
}

static void test_unknown_endpoints(void **state)
{
    (void)state;
    /* Endpoint "" (SHARDS) or nil (SLOTS): the host that answered, "". */
    slots_map *sh = SHARDS(UNKNOWN_SHARDS), *sl = SLOTS(UNKNOWN_SLOTS);
    for (int k = 0; k < 2; k++) {
        slots_map *m = k ? sl : sh;
        assert_consistent(m);
        assert_true(slots_map_covers_all(m));
        assert_int_equal(slots_map_nodes(m), 6);
        assert_range(m, 0, 5460, "", 7301);
        assert_range(m, 5461, 10922, "", 7302);
        assert_range(m, 10923, 16383, "", 7303);
        assert_replica(m, "", 7305, "", 7301);
    }
    assert_same_routing(sh, sl);

    /* ... as the MOVED that node sent says it. */
    redisReply *e = REPLY(ERR_MOVED_UNKNOWN);
    slots_redirect rd;
    assert_int_equal(slots_parse_redirect(e->str, e->len, &rd), 1);
    assert_int_equal(rd.kind, SLOTS_ERR_MOVED);
    assert_string_equal(rd.host, "");
    assert_owner(sh, rd.slot, rd.host, rd.port);
    freeReplyObject(e);
    slots_map_free(sh);
    slots_map_free(sl);
}

static void test_resharded(void **state)
{
    (void)state;
    slots_map *sh = SHARDS(RESHARDED_SHARDS), *sl = SLOTS(RESHARDED_SLOTS);
    for (int k = 0; k < 2; k++) {
        slots_map *m = k ? sl : sh;
        assert_consistent(m);
        assert_true(slots_map_covers_all(m));
        /* CLUSTER SLOTS lists 7303 and 7304 twice: still one node each. */
        assert_int_equal(slots_map_nodes(m), 6);
        assert_range(m, 0, 99, "127.0.0.1", 7303);
        assert_range(m, 100, 5460, "127.0.0.1", 7301);
        assert_range(m, 10923, 16383, "127.0.0.1", 7303);
        assert_replica(m, "127.0.0.1", 7304, "127.0.0.1", 7303);
    }
    assert_same_routing(sh, sl);
    slots_map_free(sh);
    slots_map_free(sl);
}

static void test_ipv6(void **state)
{
    (void)state;
    slots_map *sh = SHARDS(IPV6_SHARDS), *sl = SLOTS(IPV6_SLOTS);
    for (int k = 0; k < 2; k++) {
        slots_map *m = k ? sl : sh;
        assert_consistent(m);
        assert_true(slots_map_covers_all(m));
        assert_int_equal(slots_map_nodes(m), 3);
        assert_range(m, 0, 5460, "::1", 7311);
        assert_range(m, 10923, 16383, "::1", 7313);
    }
    /* Redis 7 writes the address bare: "MOVED 12182 ::1:7313". */
    redisReply *e = REPLY(ERR_MOVED_IPV6);
    slots_redirect rd;
    assert_int_equal(slots_parse_redirect(e->str, e->len, &rd), 1);
    assert_string_equal(rd.host, "::1");
    assert_int_equal(rd.port, 7313);
    assert_int_equal(rd.slot, KS("foo"));
    assert_owner(sh, rd.slot, rd.host, rd.port);
    freeReplyObject(e);
    slots_map_free(sh);
    slots_map_free(sl);
}

/* ------------------------------------------------------------------------ */
/* MOVED updates and refreshes                                               */
/* ------------------------------------------------------------------------ */

static void test_set_moved(void **state)
{
    (void)state;
    slots_map *m = SHARDS(HEALTHY_SHARDS);
    int i7301 = slots_map_find(m, "127.0.0.1", 7301);
    int i7304 = slots_map_find(m, "127.0.0.1", 7304);

    /* A replica named by a MOVED has been promoted. */
    slots_map_set(m, 12182, "127.0.0.1", 7304);
    assert_owner(m, 12182, "127.0.0.1", 7304);
    assert_true(node_at(m, "127.0.0.1", 7304)->is_master);
    assert_int_equal(slots_map_find(m, "127.0.0.1", 7304), i7304);
    assert_owner(m, 12181, "127.0.0.1", 7303);
    assert_owner(m, 12183, "127.0.0.1", 7303);
    assert_int_equal(slots_map_nodes(m), 6);
    assert_true(slots_map_covers_all(m));

    /* A node never seen: added at the end, indices unchanged. */
    slots_map_set(m, 0, "10.0.0.9", 6390);
    assert_int_equal(slots_map_nodes(m), 7);
    assert_int_equal(slots_map_find(m, "10.0.0.9", 6390), 6);
    assert_int_equal(slots_map_find(m, "127.0.0.1", 7301), i7301);
    const slots_node *n = node_at(m, "10.0.0.9", 6390);
    assert_true(n->is_master);
    assert_int_equal(n->master, -1);
    assert_string_equal(n->id, "");
    assert_owner(m, 0, "10.0.0.9", 6390);
    assert_owner(m, 1, "127.0.0.1", 7301);
    /* Again: no second node. */
    slots_map_set(m, 1, "10.0.0.9", 6390);
    assert_int_equal(slots_map_nodes(m), 7);
    slots_map_set(m, 2, "::1", 6390);
    assert_int_equal(slots_map_nodes(m), 8);
    assert_consistent(m);

    /* A refresh replaces everything the MOVEDs taught. */
    redisReply *r = REPLY(HEALTHY_SLOTS);
    char err[256] = "";
    assert_int_equal(slots_map_from_slots(m, r, err, sizeof err), 0);
    freeReplyObject(r);
    assert_healthy(m);
    slots_map_free(m);
}

static void test_set_builds_partial_map(void **state)
{
    (void)state;
    slots_map *m = slots_map_new();
    assert_non_null(m);
    assert_int_equal(slots_map_nodes(m), 0);
    assert_null(slots_map_node(m, 0));
    assert_false(slots_map_covers_all(m));
    for (unsigned s = 0; s < SLOTS_COUNT; s += 1000)
        assert_int_equal(slots_map_node_of(m, s), -1);

    slots_map_set(m, 16383, "", 7001);
    assert_owner(m, 16383, "", 7001);
    assert_false(slots_map_covers_all(m));
    for (unsigned s = 0; s < SLOTS_COUNT - 1; s++)
        slots_map_set(m, s, s < 8192 ? "a.example" : "", s < 8192 ? 7000 : 7001);
    assert_true(slots_map_covers_all(m));
    assert_int_equal(slots_map_nodes(m), 2);
    assert_consistent(m);
    slots_map_free(m);
    slots_map_free(NULL);
}

static void test_failed_refresh_keeps_map(void **state)
{
    (void)state;
    slots_map *m = SHARDS(HEALTHY_SHARDS);
    slots_map *before = SHARDS(HEALTHY_SHARDS);
    char err[256] = "";
    redisReply *r = REPLY("*0\r\n");
    assert_int_equal(slots_map_from_shards(m, r, err, sizeof err), -1);
    assert_int_equal(slots_map_from_slots(m, r, err, sizeof err), -1);
    freeReplyObject(r);
    /* A shard list in which no master is online covers nothing. */
    r = REPLY("*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n"
              "*10\r\n$2\r\nid\r\n$40\r\n" ID7301 "\r\n$4\r\nport\r\n:7301\r\n$2\r\nip\r\n"
              "$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$6\r\nhealth\r\n$4\r\nfail\r\n");
    err[0] = '\0';
    assert_int_equal(slots_map_from_shards(m, r, err, sizeof err), -1);
    assert_non_null(strstr(err, "online master"));
    freeReplyObject(r);
    assert_true(map_equal(m, before));
    slots_map_free(m);
    slots_map_free(before);
}

/* ------------------------------------------------------------------------ */
/* Redirections and cluster errors                                           */
/* ------------------------------------------------------------------------ */

static int redirect(const char *s, slots_redirect *rd)
{
    return slots_parse_redirect(s, strlen(s), rd);
}

static void assert_redirect(const char *s, int kind, unsigned slot, const char *host, int port)
{
    slots_redirect rd;
    memset(&rd, 0x55, sizeof rd);
    if (redirect(s, &rd) != 1)
        fail_msg("not parsed: %s", s);
    assert_int_equal(rd.kind, kind);
    assert_int_equal(rd.slot, slot);
    assert_string_equal(rd.host, host);
    assert_int_equal(rd.port, port);
}

static void test_redirect_valid(void **state)
{
    (void)state;
    redisReply *e = REPLY(ERR_ASK);
    slots_redirect rd;
    assert_int_equal(slots_parse_redirect(e->str, e->len, &rd), 1);
    assert_int_equal(rd.kind, SLOTS_ERR_ASK);
    assert_int_equal(rd.slot, 12182);
    assert_string_equal(rd.host, "127.0.0.1");
    assert_int_equal(rd.port, 7302);
    freeReplyObject(e);

    assert_redirect("MOVED 3999 127.0.0.1:6381", SLOTS_ERR_MOVED, 3999, "127.0.0.1", 6381);
    assert_redirect("ASK 3999 127.0.0.1:6381", SLOTS_ERR_ASK, 3999, "127.0.0.1", 6381);
    assert_redirect("MOVED 3999 [::1]:6381", SLOTS_ERR_MOVED, 3999, "::1", 6381);
    assert_redirect("MOVED 3999 ::1:6381", SLOTS_ERR_MOVED, 3999, "::1", 6381);
    assert_redirect("ASK 1 [2001:db8::7]:7000", SLOTS_ERR_ASK, 1, "2001:db8::7", 7000);
    assert_redirect("ASK 1 2001:db8::7:7000", SLOTS_ERR_ASK, 1, "2001:db8::7", 7000);
    assert_redirect("MOVED 1 fe80::1%eth0:7000", SLOTS_ERR_MOVED, 1, "fe80::1%eth0", 7000);
    assert_redirect("MOVED 1 ::ffff:10.0.0.1:7000", SLOTS_ERR_MOVED, 1, "::ffff:10.0.0.1", 7000);
    assert_redirect("MOVED 3999 :6381", SLOTS_ERR_MOVED, 3999, "", 6381);
    assert_redirect("MOVED 3999 redis-2.cache.internal:6381", SLOTS_ERR_MOVED, 3999,
                    "redis-2.cache.internal", 6381);
    assert_redirect("MOVED 0 h:1", SLOTS_ERR_MOVED, 0, "h", 1);
    assert_redirect("MOVED 16383 h:65535", SLOTS_ERR_MOVED, 16383, "h", 65535);

    /* Only len bytes are read. */
    slots_redirect r2;
    assert_int_equal(slots_parse_redirect("MOVED 12 h:7000 trailing", 15, &r2), 1);
    assert_int_equal(r2.port, 7000);

    /* A host of exactly SLOTS_HOST_MAX bytes fits. */
    char buf[400];
    int n = snprintf(buf, sizeof buf, "MOVED 5 ");
    memset(buf + n, 'a', SLOTS_HOST_MAX);
    snprintf(buf + n + SLOTS_HOST_MAX, sizeof buf - (size_t)n - SLOTS_HOST_MAX, ":7000");
    assert_int_equal(redirect(buf, &r2), 1);
    assert_int_equal(strlen(r2.host), SLOTS_HOST_MAX);
}

static void test_redirect_not_redirect(void **state)
{
    (void)state;
    static const char *const others[] = {
        "CLUSTERDOWN The cluster is down", "ERR unknown command 'FOO'", "", "MOVEDX 1 h:1",
        "moved 1 h:1", "ASKING", "TRYAGAIN Multiple keys request during rehashing of slot",
        " MOVED 1 h:1", "MOVE 1 h:1",
    };
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        slots_redirect rd;
        if (redirect(others[i], &rd) != 0)
            fail_msg("taken for a redirection: '%s'", others[i]);
    }
    slots_redirect rd;
    assert_int_equal(slots_parse_redirect(NULL, 0, &rd), 0);
}

static void test_redirect_malformed(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "MOVED", "MOVED ", "ASK", "ASK ", "MOVED 3999", "MOVED 3999 ",
        "MOVED 16384 127.0.0.1:6381", /* slot out of range */
        "MOVED 99999 h:1", "MOVED 163840 h:1", "MOVED 99999999999999999999 h:1",
        "MOVED -1 h:1", "MOVED +1 h:1", "MOVED x h:1", "MOVED 1x h:1", "MOVED  1 h:1",
        "MOVED 1  h:1", "MOVED 1\th:1",
        "MOVED 3999 127.0.0.1",  /* no port */
        "MOVED 3999 127.0.0.1:", /* empty port */
        "MOVED 1 h:0", "MOVED 1 h:65536", "MOVED 1 h:99999", "MOVED 1 h:123456", "MOVED 1 h:-1",
        "MOVED 1 h:+1", "MOVED 1 h:12a", "MOVED 1 h:1 ", "MOVED 1 h:1\r\n", "MOVED 1 h :1",
        "MOVED 1 h\x01:1", "MOVED 1 [::1]6381", "MOVED 1 []:1", "MOVED 1 [::1:1", "MOVED 1 [::1]:",
        "MOVED 1 [::1]", "MOVED 1 ::1", /* bare IPv6 without port: ":" is no host */
        "MOVED 1 2001:db8::", "MOVED 1 ::zz:1", "MOVED 1 fe80::1%:1", "MOVED 1 a%b:1",
        "MOVED 1 ??:1", "MOVED 1 a/b:1", "ASK garbage", "ASK 1 2 3", "MOVED 3999 127.0.0.1:6381:",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        slots_redirect rd;
        memset(&rd, 0x55, sizeof rd);
        slots_redirect before = rd;
        if (redirect(bad[i], &rd) != -1)
            fail_msg("accepted: '%s'", bad[i]);
        assert_memory_equal(&rd, &before, sizeof rd); /* untouched */
    }
    /* A NUL byte inside the given length. */
    slots_redirect rd;
    assert_int_equal(slots_parse_redirect("MOVED 1 h\0x:1", 13, &rd), -1);
    assert_int_equal(slots_parse_redirect("MOVED 1 h:1\0", 12, &rd), -1);
    /* A host one byte too long. */
    char buf[400];
    int n = snprintf(buf, sizeof buf, "MOVED 5 ");
    memset(buf + n, 'a', SLOTS_HOST_MAX + 1);
    snprintf(buf + n + SLOTS_HOST_MAX + 1, sizeof buf - (size_t)n - SLOTS_HOST_MAX - 1, ":7000");
    assert_int_equal(redirect(buf, &rd), -1);
}

static void test_error_kinds(void **state)
{
    (void)state;
    static const struct {
        const char *resp;
        size_t len;
        int kind;
    } captured[] = {
        {ERR_MOVED, sizeof ERR_MOVED - 1, SLOTS_ERR_MOVED},
        {ERR_ASK, sizeof ERR_ASK - 1, SLOTS_ERR_ASK},
        {ERR_TRYAGAIN, sizeof ERR_TRYAGAIN - 1, SLOTS_ERR_TRYAGAIN},
        {ERR_CROSSSLOT, sizeof ERR_CROSSSLOT - 1, SLOTS_ERR_CROSSSLOT},
        {ERR_CLUSTERDOWN, sizeof ERR_CLUSTERDOWN - 1, SLOTS_ERR_CLUSTERDOWN},
        {ERR_MOVED_UNKNOWN, sizeof ERR_MOVED_UNKNOWN - 1, SLOTS_ERR_MOVED},
        {ERR_MOVED_HOSTNAME, sizeof ERR_MOVED_HOSTNAME - 1, SLOTS_ERR_MOVED},
        {ERR_MOVED_IPV6, sizeof ERR_MOVED_IPV6 - 1, SLOTS_ERR_MOVED},
        /* Redis 7.0's wording of the ones not captured. */
        {"-READONLY You can't write against a read only replica.\r\n", 0, SLOTS_ERR_READONLY},
        {"-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.\r\n", 0,
         SLOTS_ERR_MASTERDOWN},
        {"-LOADING Redis is loading the dataset in memory\r\n", 0, SLOTS_ERR_LOADING},
        {"-CLUSTERDOWN Hash slot not served\r\n", 0, SLOTS_ERR_CLUSTERDOWN},
        {"-ERR unknown subcommand 'SHARDS'. Try CLUSTER HELP.\r\n", 0, SLOTS_ERR_OTHER},
        {"-NOSCRIPT No matching script. Please use EVAL.\r\n", 0, SLOTS_ERR_OTHER},
    };
    for (size_t i = 0; i < sizeof captured / sizeof captured[0]; i++) {
        size_t len = captured[i].len ? captured[i].len : strlen(captured[i].resp);
        redisReply *e = reply_from(captured[i].resp, len);
        assert_int_equal(e->type, REDIS_REPLY_ERROR);
        if (slots_error_kind(e->str, e->len) != captured[i].kind)
            fail_msg("'%s' classified %d", e->str, slots_error_kind(e->str, e->len));
        freeReplyObject(e);
    }
    assert_int_equal(slots_error_kind("LOADING", 7), SLOTS_ERR_LOADING);
    assert_int_equal(slots_error_kind("LOADINGX", 8), SLOTS_ERR_OTHER);
    assert_int_equal(slots_error_kind("LOAD", 4), SLOTS_ERR_OTHER);
    assert_int_equal(slots_error_kind("loading x", 9), SLOTS_ERR_OTHER);
    assert_int_equal(slots_error_kind("READONLY x", 7), SLOTS_ERR_OTHER); /* len cuts the word */
    assert_int_equal(slots_error_kind("", 0), SLOTS_ERR_OTHER);
    assert_int_equal(slots_error_kind(NULL, 0), SLOTS_ERR_OTHER);
}

/* ------------------------------------------------------------------------ */
/* Malformed replies                                                         */
/* ------------------------------------------------------------------------ */

typedef int (*loader)(slots_map *, const struct redisReply *, char *, size_t);

/* The reply is rejected with a message containing needle, and the map is
 * left as it was. */
static void load_bad(loader load, const char *resp, size_t len, const char *needle)
{
    slots_map *m = SHARDS(HEALTHY_SHARDS), *before = SHARDS(HEALTHY_SHARDS);
    redisReply *r = reply_from(resp, len);
    char err[256] = "";
    if (load(m, r, err, sizeof err) != -1)
        fail_msg("accepted: %.*s", (int)len, resp);
    if (!strstr(err, needle))
        fail_msg("error '%s' does not mention '%s'", err, needle);
    assert_true(map_equal(m, before));
    freeReplyObject(r);
    slots_map_free(m);
    slots_map_free(before);
}

#define SHARDS_BAD(lit, needle) load_bad(slots_map_from_shards, (lit), sizeof(lit) - 1, (needle))
#define SLOTS_BAD(lit, needle) load_bad(slots_map_from_slots, (lit), sizeof(lit) - 1, (needle))

/* One shard with one node, its parts given. */
#define SHARD1(slots, node) "*1\r\n*4\r\n$5\r\nslots\r\n" slots "$5\r\nnodes\r\n*1\r\n" node
#define RANGE_ALL "*2\r\n:0\r\n:16383\r\n"
#define F_ID "$2\r\nid\r\n$40\r\n" ID7301 "\r\n"
#define F_PORT "$4\r\nport\r\n:7301\r\n"
#define F_IP "$2\r\nip\r\n$9\r\n127.0.0.1\r\n"
#define F_MASTER "$4\r\nrole\r\n$6\r\nmaster\r\n"
#define F_ONLINE "$6\r\nhealth\r\n$6\r\nonline\r\n"
#define NODE_OK "*10\r\n" F_ID F_PORT F_IP F_MASTER F_ONLINE
/* The shard above, and a master (just added to the cluster) with no slots. */
#define TWO_SHARDS                                                                                 \
    "*2\r\n*4\r\n$5\r\nslots\r\n" RANGE_ALL "$5\r\nnodes\r\n*1\r\n" NODE_OK                         \
    "*4\r\n$5\r\nslots\r\n*0\r\n$5\r\nnodes\r\n*1\r\n*10\r\n$2\r\nid\r\n$40\r\n" ID7302 "\r\n"     \
    "$4\r\nport\r\n:7302\r\n" F_IP F_MASTER F_ONLINE

static void test_shards_minimal(void **state)
{
    (void)state;
    /* The smallest reply the parser takes, so the bad ones below differ
     * from a good one in one thing only. */
    slots_map *m = map_ok(slots_map_from_shards, SHARD1(RANGE_ALL, NODE_OK),
                          sizeof(SHARD1(RANGE_ALL, NODE_OK)) - 1);
    assert_true(slots_map_covers_all(m));
    assert_owner(m, 9, "127.0.0.1", 7301);
    slots_map_free(m);
    /* Unknown fields are skipped; tls-port alone will do. */
    m = map_ok(slots_map_from_shards,
               SHARD1(RANGE_ALL, "*12\r\n" F_ID "$8\r\ntls-port\r\n:7401\r\n" F_IP F_MASTER F_ONLINE
                                 "$6\r\nfuture\r\n*1\r\n:1\r\n"),
               sizeof(SHARD1(RANGE_ALL, "*12\r\n" F_ID "$8\r\ntls-port\r\n:7401\r\n" F_IP F_MASTER
                                        F_ONLINE "$6\r\nfuture\r\n*1\r\n:1\r\n")) -
                   1);
    assert_owner(m, 0, "127.0.0.1", 7401);
    slots_map_free(m);
    /* A master without slots serves nothing, so it is not a node of the map. */
    m = map_ok(slots_map_from_shards, TWO_SHARDS, sizeof(TWO_SHARDS) - 1);
    assert_int_equal(slots_map_nodes(m), 1);
    assert_int_equal(slots_map_find(m, "127.0.0.1", 7302), -1);
    slots_map_free(m);
}

static void test_shards_malformed(void **state)
{
    (void)state;
    SHARDS_BAD("*0\r\n", "no shard");
    SHARDS_BAD("$-1\r\n", "not an array");
    SHARDS_BAD("+OK\r\n", "not an array");
    SHARDS_BAD(":3\r\n", "not an array");
    SHARDS_BAD("$6\r\nshards\r\n", "not an array");
    SHARDS_BAD("-ERR unknown subcommand 'SHARDS'. Try CLUSTER HELP.\r\n", "unknown subcommand");
    SHARDS_BAD("*1\r\n:1\r\n", "field/value");
    SHARDS_BAD("*1\r\n*3\r\n$5\r\nslots\r\n" RANGE_ALL "$5\r\nnodes\r\n", "field/value");
    SHARDS_BAD("*1\r\n*2\r\n$5\r\nslots\r\n" RANGE_ALL, "needs 'slots' and 'nodes'");
    SHARDS_BAD("*1\r\n*2\r\n$5\r\nnodes\r\n*1\r\n" NODE_OK, "needs 'slots' and 'nodes'");
    SHARDS_BAD("*1\r\n*4\r\n:1\r\n" RANGE_ALL "$5\r\nnodes\r\n*1\r\n" NODE_OK, "not a string");
    SHARDS_BAD("*1\r\n*4\r\n$5\r\nslots\r\n$3\r\n0-9\r\n$5\r\nnodes\r\n*1\r\n" NODE_OK,
               "'slots' has the wrong type");
    SHARDS_BAD("*1\r\n*6\r\n$5\r\nslots\r\n" RANGE_ALL "$5\r\nslots\r\n" RANGE_ALL
               "$5\r\nnodes\r\n*1\r\n" NODE_OK,
               "'slots' appears twice");

    /* Slot ranges. */
    SHARDS_BAD(SHARD1("*2\r\n:0\r\n:16384\r\n", NODE_OK), "bad slot range");
    SHARDS_BAD(SHARD1("*2\r\n:-1\r\n:10\r\n", NODE_OK), "bad slot range");
    SHARDS_BAD(SHARD1("*2\r\n:10\r\n:9\r\n", NODE_OK), "bad slot range");
    SHARDS_BAD(SHARD1("*1\r\n:10\r\n", NODE_OK), "list of ranges");
    SHARDS_BAD(SHARD1("*3\r\n:0\r\n:10\r\n:11\r\n", NODE_OK), "list of ranges");
    SHARDS_BAD(SHARD1("*2\r\n$1\r\n0\r\n:10\r\n", NODE_OK), "bad slot range");
    SHARDS_BAD(SHARD1("*2\r\n:0\r\n$-1\r\n", NODE_OK), "bad slot range");
    SHARDS_BAD(SHARD1("*2\r\n:0\r\n:9223372036854775807\r\n", NODE_OK), "bad slot range");
    SHARDS_BAD(SHARD1("*4\r\n:0\r\n:10\r\n:10\r\n:20\r\n", NODE_OK), "slot 10 is assigned twice");
    SHARDS_BAD("*2\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:100\r\n$5\r\nnodes\r\n*1\r\n" NODE_OK
               "*4\r\n$5\r\nslots\r\n*2\r\n:100\r\n:200\r\n$5\r\nnodes\r\n*1\r\n"
               "*10\r\n$2\r\nid\r\n$40\r\n" ID7302 "\r\n$4\r\nport\r\n:7302\r\n" F_IP F_MASTER F_ONLINE,
               "slot 100 is assigned twice");

    /* Nodes: missing fields. */
    SHARDS_BAD(SHARD1(RANGE_ALL, "*8\r\n" F_PORT F_IP F_MASTER F_ONLINE), "needs id");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*8\r\n" F_ID F_IP F_MASTER F_ONLINE), "needs id");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*8\r\n" F_ID F_PORT F_MASTER F_ONLINE), "needs id");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*8\r\n" F_ID F_PORT F_IP F_ONLINE), "needs id");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*8\r\n" F_ID F_PORT F_IP F_MASTER), "needs id");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*0\r\n"), "needs id");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*9\r\n" F_ID F_PORT F_IP F_MASTER "$6\r\nhealth\r\n"), "field/value");
    SHARDS_BAD(SHARD1(RANGE_ALL, "$4\r\nnode\r\n"), "field/value");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*12\r\n" F_ID F_ID F_PORT F_IP F_MASTER F_ONLINE), "twice");

    /* Nodes: wrong types and values. */
    SHARDS_BAD(SHARD1(RANGE_ALL, "*10\r\n" F_ID "$4\r\nport\r\n$4\r\n7301\r\n" F_IP F_MASTER F_ONLINE),
               "'port' has the wrong type");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*10\r\n" F_ID "$4\r\nport\r\n:70000\r\n" F_IP F_MASTER F_ONLINE),
               "port out of range");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*10\r\n" F_ID "$4\r\nport\r\n:-1\r\n" F_IP F_MASTER F_ONLINE),
               "port out of range");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*10\r\n" F_ID "$4\r\nport\r\n:0\r\n" F_IP F_MASTER F_ONLINE),
               "no port");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*10\r\n$2\r\nid\r\n:1\r\n" F_PORT F_IP F_MASTER F_ONLINE),
               "'id' has the wrong type");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*10\r\n$2\r\nid\r\n$3\r\nabc\r\n" F_PORT F_IP F_MASTER F_ONLINE),
               "bad node id");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*10\r\n$2\r\nid\r\n$40\r\n606802917A1D078B8BABFC0647E6BF5BB3EC07E1\r\n" F_PORT
                                 F_IP F_MASTER F_ONLINE),
               "bad node id");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*10\r\n" F_ID F_PORT F_IP "$4\r\nrole\r\n$4\r\nboss\r\n" F_ONLINE),
               "unknown role");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*10\r\n" F_ID F_PORT F_IP "$4\r\nrole\r\n$-1\r\n" F_ONLINE),
               "'role' has the wrong type");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*10\r\n" F_ID F_PORT "$2\r\nip\r\n*0\r\n" F_MASTER F_ONLINE),
               "'ip' has the wrong type");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*12\r\n" F_ID F_PORT F_IP F_MASTER F_ONLINE
                                 "$18\r\nreplication-offset\r\n$2\r\n14\r\n"),
               "'replication-offset' has the wrong type");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*10\r\n" F_ID F_PORT "$2\r\nip\r\n$1\r\n?\r\n" F_MASTER F_ONLINE),
               "no usable address");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*12\r\n" F_ID F_PORT F_IP "$8\r\nendpoint\r\n$8\r\nbad host\r\n" F_MASTER
                                 F_ONLINE),
               "no usable address");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*12\r\n" F_ID F_PORT F_IP "$8\r\nendpoint\r\n$3\r\na\0b\r\n" F_MASTER
                                 F_ONLINE),
               "no usable address");
    SHARDS_BAD(SHARD1(RANGE_ALL, "*12\r\n" F_ID F_PORT F_IP "$8\r\nendpoint\r\n$256\r\n"
                                 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                                 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                                 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                                 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                                 "\r\n" F_MASTER F_ONLINE),
               "no usable address");
    /* Two online masters in one shard; one node as master and replica. */
    SHARDS_BAD("*1\r\n*4\r\n$5\r\nslots\r\n" RANGE_ALL "$5\r\nnodes\r\n*2\r\n" NODE_OK
               "*10\r\n$2\r\nid\r\n$40\r\n" ID7302 "\r\n$4\r\nport\r\n:7302\r\n" F_IP F_MASTER F_ONLINE,
               "two online masters");
    SHARDS_BAD("*1\r\n*4\r\n$5\r\nslots\r\n" RANGE_ALL "$5\r\nnodes\r\n*2\r\n" NODE_OK
               "*10\r\n" F_ID F_PORT F_IP "$4\r\nrole\r\n$7\r\nreplica\r\n" F_ONLINE,
               "contradicts");
}

/* One range [0, 16383] with the given master entry. */
#define RANGE1(node) "*1\r\n*3\r\n:0\r\n:16383\r\n" node

static void test_slots_malformed(void **state)
{
    (void)state;
    /* Accepted: the Redis 3 form [ip, port] and a nil endpoint. */
    slots_map *m = map_ok(slots_map_from_slots, RANGE1("*2\r\n$4\r\nhost\r\n:7000\r\n"),
                          sizeof(RANGE1("*2\r\n$4\r\nhost\r\n:7000\r\n")) - 1);
    assert_owner(m, 77, "host", 7000);
    assert_string_equal(owner(m, 77)->id, "");
    slots_map_free(m);

    SLOTS_BAD("*0\r\n", "no slot");
    SLOTS_BAD("$-1\r\n", "not an array");
    SLOTS_BAD("-ERR This instance has cluster support disabled\r\n", "cluster support disabled");
    SLOTS_BAD("*1\r\n:1\r\n", "not [start, end");
    SLOTS_BAD("*1\r\n*2\r\n:0\r\n:10\r\n", "not [start, end");
    SLOTS_BAD("*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n", "not [start, end");
    SLOTS_BAD("*1\r\n*3\r\n:10\r\n:9\r\n*2\r\n$1\r\nh\r\n:1\r\n", "not [start, end");
    SLOTS_BAD("*1\r\n*3\r\n$1\r\n0\r\n:9\r\n*2\r\n$1\r\nh\r\n:1\r\n", "not [start, end");
    SLOTS_BAD(RANGE1("*1\r\n$1\r\nh\r\n"), "not [endpoint, port");
    SLOTS_BAD(RANGE1("$1\r\nh\r\n"), "not [endpoint, port");
    SLOTS_BAD(RANGE1("*2\r\n:1\r\n:7000\r\n"), "no usable address");
    SLOTS_BAD(RANGE1("*2\r\n$1\r\n?\r\n:7000\r\n"), "no usable address");
    SLOTS_BAD(RANGE1("*4\r\n$1\r\n?\r\n:7000\r\n$40\r\n" ID7301 "\r\n*0\r\n"), "no usable address");
    SLOTS_BAD(RANGE1("*4\r\n$1\r\n?\r\n:7000\r\n$40\r\n" ID7301 "\r\n*2\r\n$2\r\nip\r\n:1\r\n"),
              "metadata ip");
    SLOTS_BAD(RANGE1("*4\r\n$1\r\nh\r\n:7000\r\n$40\r\n" ID7301 "\r\n*1\r\n$2\r\nip\r\n"), "metadata");
    SLOTS_BAD(RANGE1("*4\r\n$1\r\nh\r\n:7000\r\n$40\r\n" ID7301 "\r\n$2\r\nip\r\n"), "metadata");
    SLOTS_BAD(RANGE1("*4\r\n$1\r\nh\r\n:7000\r\n$40\r\n" ID7301 "\r\n*2\r\n:1\r\n:2\r\n"), "metadata");
    SLOTS_BAD(RANGE1("*2\r\n$1\r\nh\r\n$4\r\n7000\r\n"), "bad port");
    SLOTS_BAD(RANGE1("*2\r\n$1\r\nh\r\n:0\r\n"), "bad port");
    SLOTS_BAD(RANGE1("*2\r\n$1\r\nh\r\n:65536\r\n"), "bad port");
    SLOTS_BAD(RANGE1("*3\r\n$1\r\nh\r\n:7000\r\n$3\r\nabc\r\n"), "bad node id");
    SLOTS_BAD(RANGE1("*3\r\n$1\r\nh\r\n:7000\r\n$-1\r\n"), "bad node id");
    SLOTS_BAD(RANGE1("*2\r\n$3\r\nh h\r\n:7000\r\n"), "no usable address");
    /* Overlapping ranges; a node named as master and as replica. */
    SLOTS_BAD("*2\r\n*3\r\n:0\r\n:10\r\n*2\r\n$1\r\na\r\n:1\r\n*3\r\n:10\r\n:20\r\n*2\r\n$1\r\nb\r\n:1\r\n",
              "slot 10 is assigned twice");
    SLOTS_BAD("*2\r\n*3\r\n:0\r\n:10\r\n*2\r\n$1\r\na\r\n:1\r\n*4\r\n:11\r\n:20\r\n*2\r\n$1\r\nb\r\n:1\r\n"
              "*2\r\n$1\r\na\r\n:1\r\n",
              "contradicts");
    /* One id at two addresses. */
    SLOTS_BAD("*2\r\n*3\r\n:0\r\n:10\r\n*3\r\n$1\r\na\r\n:1\r\n$40\r\n" ID7301 "\r\n"
              "*3\r\n:11\r\n:20\r\n*3\r\n$1\r\nb\r\n:1\r\n$40\r\n" ID7301 "\r\n",
              "contradicts");
}

/* ------------------------------------------------------------------------ */
/* Mutated real replies                                                      */
/* ------------------------------------------------------------------------ */

/* Every array in a reply tree, depth first. */
static void collect_arrays(redisReply *r, redisReply ***out, size_t *n, size_t *cap)
{
    if (r->type != REDIS_REPLY_ARRAY)
        return;
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        *out = realloc(*out, *cap * sizeof **out);
        assert_non_null(*out);
    }
    (*out)[(*n)++] = r;
    for (size_t i = 0; i < r->elements; i++)
        collect_arrays(r->element[i], out, n, cap);
}

/* Loads the mutated reply into a map that holds a known state: it must
 * either succeed with a consistent map or fail, say why and leave the map
 * alone. */
static void try_mutant(loader load, const redisReply *r, slots_map *m, const slots_map *ref,
                       size_t *ok, size_t *bad)
{
    char err[256] = "";
    int rc = load(m, r, err, sizeof err);
    if (rc == 0) {
        assert_consistent(m);
        (*ok)++;
        /* Back to the known state for the next mutant. */
        redisReply *h = REPLY(HEALTHY_SLOTS);
        assert_int_equal(slots_map_from_slots(m, h, err, sizeof err), 0);
        freeReplyObject(h);
    } else {
        assert_int_equal(rc, -1);
        assert_true(err[0] != '\0');
        assert_true(map_equal(m, ref));
        (*bad)++;
    }
}

/* Each element of each array replaced by each of a set of wrong values, and
 * each array cut short at every length. */
static void mutate(loader load, const char *resp, size_t len, size_t *ok, size_t *bad)
{
    static const char *const subs[] = {
        ":0\r\n", ":-1\r\n", ":16383\r\n", ":16384\r\n", ":65536\r\n", ":7301\r\n",
        ":9223372036854775807\r\n", "$0\r\n\r\n", "$1\r\n?\r\n", "$6\r\nmaster\r\n",
        "$7\r\nreplica\r\n", "$6\r\nonline\r\n", "$5\r\nslots\r\n", "$5\r\nnodes\r\n",
        "$40\r\n" ID7303 "\r\n", "$-1\r\n", "*-1\r\n", "*0\r\n", "*1\r\n$1\r\nx\r\n",
        "*2\r\n:0\r\n:16383\r\n", "+OK\r\n", "-ERR x\r\n",
    };
    redisReply *sub[sizeof subs / sizeof subs[0]];
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        sub[i] = reply_from(subs[i], strlen(subs[i]));
    redisReply *r = reply_from(resp, len);
    slots_map *m = SLOTS(HEALTHY_SLOTS), *ref = SLOTS(HEALTHY_SLOTS);
    redisReply **arrays = NULL;
    size_t n = 0, cap = 0;
    collect_arrays(r, &arrays, &n, &cap);
    for (size_t a = 0; a < n; a++) {
        redisReply *arr = arrays[a];
        for (size_t i = 0; i < arr->elements; i++) {
            redisReply *orig = arr->element[i];
            for (size_t s = 0; s < sizeof sub / sizeof sub[0]; s++) {
                arr->element[i] = sub[s];
                try_mutant(load, r, m, ref, ok, bad);
            }
            arr->element[i] = orig;
        }
        size_t full = arr->elements;
        for (size_t k = 0; k < full; k++) {
            arr->elements = k;
            try_mutant(load, r, m, ref, ok, bad);
        }
        arr->elements = full;
    }
    /* Restored: the reply loads as before. */
    try_mutant(load, r, m, ref, ok, bad);
    free(arrays);
    freeReplyObject(r);
    for (size_t i = 0; i < sizeof sub / sizeof sub[0]; i++)
        freeReplyObject(sub[i]);
    slots_map_free(m);
    slots_map_free(ref);
}

static void test_mutated_replies(void **state)
{
    (void)state;
    static const struct {
        loader load;
        const char *resp;
        size_t len;
    } cases[] = {
        {slots_map_from_shards, HEALTHY_SHARDS, sizeof HEALTHY_SHARDS - 1},
        {slots_map_from_slots, HEALTHY_SLOTS, sizeof HEALTHY_SLOTS - 1},
        {slots_map_from_shards, FAILOVER_DOWN_SHARDS, sizeof FAILOVER_DOWN_SHARDS - 1},
        {slots_map_from_shards, HOSTNAME_SHARDS, sizeof HOSTNAME_SHARDS - 1},
        {slots_map_from_slots, HOSTNAME_SLOTS, sizeof HOSTNAME_SLOTS - 1},
        {slots_map_from_slots, UNKNOWN_SLOTS, sizeof UNKNOWN_SLOTS - 1},
        {slots_map_from_slots, RESHARDED_SLOTS, sizeof RESHARDED_SLOTS - 1},
        /* Each parser given the other's reply. */
        {slots_map_from_slots, HEALTHY_SHARDS, sizeof HEALTHY_SHARDS - 1},
        {slots_map_from_shards, HEALTHY_SLOTS, sizeof HEALTHY_SLOTS - 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t ok = 0, bad = 0;
        mutate(cases[c].load, cases[c].resp, cases[c].len, &ok, &bad);
        /* Most mutants must be refused, and some harmless ones taken. */
        assert_true(bad > 0);
        if (c < 7)
            assert_true(ok > 0);
    }

    /* A reply cut short at any byte never reaches the parser as a reply:
     * store.c hands over NULL, which is an error too. */
    for (size_t cut = 0; cut < sizeof HEALTHY_SHARDS - 1; cut++) {
        redisReader *rd = redisReaderCreate();
        assert_int_equal(redisReaderFeed(rd, HEALTHY_SHARDS, cut), REDIS_OK);
        void *r = NULL;
        assert_int_equal(redisReaderGetReply(rd, &r), REDIS_OK);
        assert_null(r);
        slots_map *m = slots_map_new();
        char err[256] = "";
        assert_int_equal(slots_map_from_shards(m, r, err, sizeof err), -1);
        assert_int_equal(slots_map_from_slots(m, r, err, sizeof err), -1);
        assert_int_equal(slots_map_nodes(m), 0);
        slots_map_free(m);
        redisReaderFree(rd);
    }
}

/* ------------------------------------------------------------------------ */
/* Spreading a deployment's shards                                           */
/* ------------------------------------------------------------------------ */

/* The fewest of n shards "{dq:i}" any of the map's masters serves, counted
 * here from the map's owners rather than by the code under test. */
static int fewest_served(const slots_map *m, int n, int *masters)
{
    int per[16] = {0}, is_master[16] = {0};
    assert_true(slots_map_nodes(m) <= 16);
    for (unsigned slot = 0; slot < SLOTS_COUNT; slot++) {
        int k = slots_map_node_of(m, slot);
        if (k >= 0)
            is_master[k] = 1;
    }
    for (int i = 0; i < n; i++) {
        char tag[32];
        int len = snprintf(tag, sizeof tag, "{dq:%d}", i);
        int k = slots_map_node_of(m, slots_keyslot(tag, (size_t)len));
        if (k >= 0)
            per[k]++;
    }
    int fewest = -1;
    *masters = 0;
    for (size_t k = 0; k < slots_map_nodes(m); k++) {
        if (!is_master[k])
            continue;
        (*masters)++;
        if (fewest < 0 || per[k] < fewest)
            fewest = per[k];
    }
    return fewest;
}

/* The pick is the smallest count from per_master * masters on at which
 * every master serves per_master / 2 shards or more. */
static void assert_pick(const slots_map *m, int per_master, int want_masters)
{
    int n = slots_pick_shards(m, "dq", per_master, 1024), masters;
    assert_true(n >= per_master * want_masters);
    assert_true(fewest_served(m, n, &masters) >= per_master / 2);
    assert_int_equal(masters, want_masters);
    for (int smaller = per_master * want_masters; smaller < n; smaller++)
        assert_true(fewest_served(m, smaller, &masters) < per_master / 2);
    int counted;
    assert_int_equal(slots_masters_used(m, "dq", n, &counted), want_masters);
    assert_int_equal(counted, want_masters);
}

static void test_pick_shards(void **state)
{
    (void)state;
    slots_map *m = SHARDS(HEALTHY_SHARDS);
    assert_pick(m, 4, 3);
    assert_pick(m, 2, 3);
    /* One shard ("{dq}") leaves two of the three masters without jobs. */
    int masters;
    assert_int_equal(slots_masters_used(m, "dq", 1, &masters), 1);
    assert_int_equal(masters, 3);
    slots_map_free(m);

    /* A failed master without a failover: its slots are uncovered, and the
     * two masters left are spread over. */
    m = SHARDS(NOFAILOVER_SHARDS);
    assert_pick(m, 4, 2);
    slots_map_free(m);

    /* One master for every slot. */
    m = slots_map_new();
    assert_int_equal(slots_pick_shards(m, "dq", 4, 1024), 0); /* no master yet */
    for (unsigned s = 0; s < SLOTS_COUNT; s++)
        slots_map_set(m, s, "a.example", 7000);
    assert_int_equal(slots_pick_shards(m, "dq", 4, 1024), 4);
    assert_int_equal(slots_masters_used(m, "dq", 4, &masters), 1);
    /* The cap holds when no count below it qualifies. */
    assert_int_equal(slots_pick_shards(m, "dq", 4, 3), 3);
    slots_map_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keyslot_vectors),
        cmocka_unit_test(test_keyslot_hash_tags),
        cmocka_unit_test(test_keyslot_matches_reference),
        cmocka_unit_test(test_healthy_cluster),
        cmocka_unit_test(test_failover_master_down),
        cmocka_unit_test(test_failover_master_back),
        cmocka_unit_test(test_master_down_without_failover),
        cmocka_unit_test(test_hostname_endpoints),
        cmocka_unit_test(test_unknown_endpoints),
        cmocka_unit_test(test_resharded),
        cmocka_unit_test(test_ipv6),
        cmocka_unit_test(test_set_moved),
        cmocka_unit_test(test_set_builds_partial_map),
        cmocka_unit_test(test_failed_refresh_keeps_map),
        cmocka_unit_test(test_redirect_valid),
        cmocka_unit_test(test_redirect_not_redirect),
        cmocka_unit_test(test_redirect_malformed),
        cmocka_unit_test(test_error_kinds),
        cmocka_unit_test(test_shards_minimal),
        cmocka_unit_test(test_shards_malformed),
        cmocka_unit_test(test_slots_malformed),
        cmocka_unit_test(test_mutated_replies),
        cmocka_unit_test(test_pick_shards),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
