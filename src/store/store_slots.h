/* store_slots: the pure core of delayq's Redis Cluster client. Key hash
 * slots (CRC16-XMODEM with hash tags), a map from slot to node built from
 * CLUSTER SHARDS or CLUSTER SLOTS, and parsing of the MOVED/ASK redirections
 * and other cluster errors. No I/O and no global mutable state: each thread
 * keeps its own slots_map; the connection code (store.c) feeds it replies.
 *
 * Hosts: a node's host is what Redis calls its endpoint (an IP address or a
 * hostname, IPv6 without brackets). An empty host means "the host of the
 * node this answer came from" (cluster-preferred-endpoint-type
 * unknown-endpoint: Redis then sends "" or nil, and "MOVED 3999 :6381"); the
 * caller substitutes the host it sent the command to. */
#ifndef DQ_STORE_SLOTS_H
#define DQ_STORE_SLOTS_H

#include <stddef.h>

/* Only a pointer crosses this interface, so callers of the map need not
 * include hiredis. */
struct redisReply;

#define SLOTS_COUNT 16384
#define SLOTS_HOST_MAX 255 /* longest host (a DNS name is at most 253) */
#define SLOTS_ID_LEN 40    /* a node id: 40 lowercase hex digits */

/* The hash slot of a key: CRC16-XMODEM of the key mod 16384; when the key
 * holds a non-empty "{tag}" (the first '{' and the next '}'), of the tag. */
unsigned slots_keyslot(const char *key, size_t len);

/* ------------------------------------------------------------------------ */
/* Slot map                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct slots_map slots_map;

typedef struct {
    char host[SLOTS_HOST_MAX + 1]; /* "" means the host that answered */
    int port;
    char id[SLOTS_ID_LEN + 1]; /* "" for a node learnt from a MOVED */
    int is_master;
    int master; /* a replica: index of its master; a master: -1 */
} slots_node;

/* An empty map (no slot covered). NULL when out of memory. Owned by the
 * caller: slots_map_free it (NULL is fine). */
slots_map *slots_map_new(void);
void slots_map_free(slots_map *m);

/* Replace the map's contents with a CLUSTER SHARDS reply (Redis 7, RESP2).
 * Each shard's master is its node with role "master"; shards without a
 * master whose health is "online", or without slots, are left out (their
 * slots stay uncovered). Replicas that are online are recorded too. The
 * address is "endpoint"; when that is "?" (no hostname announced) or
 * missing, "ip". Returns 0, or -1 with err for a malformed reply or one that
 * covers no slot; on -1 the map is left as it was. */
int slots_map_from_shards(slots_map *m, const struct redisReply *r, char *err, size_t errlen);

/* Same from a CLUSTER SLOTS reply (for servers without CLUSTER SHARDS):
 * ranges [start, end, master, replica...], each node [endpoint, port, id,
 * metadata]; an endpoint "?" falls back to the metadata's "ip". CLUSTER
 * SLOTS does not tell a node's health, so a failed master still covers its
 * slots here. */
int slots_map_from_slots(slots_map *m, const struct redisReply *r, char *err, size_t errlen);

/* Index of the master serving slot, or -1 when the slot is not covered (or
 * slot >= SLOTS_COUNT). Indices stay valid until the next from_shards or
 * from_slots; slots_map_set only appends nodes. */
int slots_map_node_of(const slots_map *m, unsigned slot);
size_t slots_map_nodes(const slots_map *m);
/* Node i, or NULL when i is out of range. Lent: valid until the map
 * changes. */
const slots_node *slots_map_node(const slots_map *m, size_t i);
/* Index of the node at host:port (host compared without case), or -1. */
int slots_map_find(const slots_map *m, const char *host, int port);
/* 1 when every slot has a master, else 0. */
int slots_map_covers_all(const slots_map *m);

/* How many masters (nodes that serve a slot) serve at least one of a
 * deployment's shards, whose tags are "{prefix}" (one shard) or
 * "{prefix:i}"; *masters gets the number of masters. */
int slots_masters_used(const slots_map *m, const char *prefix, int shards, int *masters);
/* The shard count a new deployment of prefix spreads over the map's
 * masters with, leaving room for the cluster to grow: the smallest
 * n >= per_master * masters (and >= 2) at which every master serves at
 * least per_master / 2 (at least 1) of the n shards; max when no n below
 * it does. 0 when the map has no master. */
int slots_pick_shards(const slots_map *m, const char *prefix, int per_master, int max);

/* Records a MOVED answer: slot is now served by host:port, a master, added
 * to the nodes if new (a known replica is marked master). Requires
 * slot < SLOTS_COUNT, a host such as slots_parse_redirect gives (at most
 * SLOTS_HOST_MAX bytes of [A-Za-z0-9._-], or an IPv6 address) and
 * 0 < port < 65536: a redirect it returned 1 for always qualifies. Aborts
 * otherwise, and when out of memory. A host "?" (a node Redis knows no
 * endpoint for) changes nothing: refresh the map instead. */
void slots_map_set(slots_map *m, unsigned slot, const char *host, int port);

/* ------------------------------------------------------------------------ */
/* Cluster errors                                                            */
/* ------------------------------------------------------------------------ */

/* The cluster errors a caller must treat specially, by their first word. */
typedef enum {
    SLOTS_ERR_OTHER = 0,
    SLOTS_ERR_MOVED,       /* slot served elsewhere: update the map, retry there */
    SLOTS_ERR_ASK,         /* slot migrating: ASKING then retry there, once */
    SLOTS_ERR_TRYAGAIN,    /* multi-key command during a migration: retry later */
    SLOTS_ERR_CLUSTERDOWN, /* some slot uncovered: no effect, retry later */
    SLOTS_ERR_CROSSSLOT,   /* keys in different slots: a delayq bug */
    SLOTS_ERR_READONLY,    /* wrote to a replica: the map is stale */
    SLOTS_ERR_MASTERDOWN,  /* replica lost its master */
    SLOTS_ERR_LOADING,     /* node loading its data set: retry later */
} slots_error;

/* The slots_error of an error reply's text (as hiredis gives it, without
 * the leading '-'). */
int slots_error_kind(const char *errstr, size_t len);

typedef struct {
    int kind; /* SLOTS_ERR_MOVED or SLOTS_ERR_ASK */
    unsigned slot;
    /* "" for "MOVED 3999 :6381": the host that answered. "?" when Redis
     * knows no endpoint for the node: refresh the map instead. */
    char host[SLOTS_HOST_MAX + 1];
    int port;
} slots_redirect;

/* Parses "MOVED <slot> <host>:<port>" or "ASK ..." (host may be "",
 * "[v6addr]" or a bare IPv6 address, as Redis 7 sends "::1:6381").
 * Returns 1 and fills *out for a redirection, 0 when errstr is not a
 * redirection, -1 for a malformed one (bad slot, port, host or trailing
 * bytes). */
int slots_parse_redirect(const char *errstr, size_t len, slots_redirect *out);

#endif
