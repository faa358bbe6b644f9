/* store_slots: hash slots, the slot map and cluster error parsing (see
 * store_slots.h). It reads hiredis replies but never talks to Redis. */
#include "store/store_slots.h"

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct slots_map {
    slots_node *nodes; /* owned; n used of cap */
    size_t n, cap;
    size_t covered;         /* slots with a master */
    int owner[SLOTS_COUNT]; /* index into nodes of the slot's master, -1 if none */
};

/* ------------------------------------------------------------------------ */
/* Key slots                                                                 */
/* ------------------------------------------------------------------------ */

/* CRC16-XMODEM (polynomial 0x1021, initial value 0, no reflection), one
 * entry per value of the top byte. */
static const uint16_t crc16_table[256] = {
    0x0000, 0x1021, 0x2042, 0x3063, 0x4084, 0x50a5, 0x60c6, 0x70e7,
    0x8108, 0x9129, 0xa14a, 0xb16b, 0xc18c, 0xd1ad, 0xe1ce, 0xf1ef,
    0x1231, 0x0210, 0x3273, 0x2252, 0x52b5, 0x4294, 0x72f7, 0x62d6,
    0x9339, 0x8318, 0xb37b, 0xa35a, 0xd3bd, 0xc39c, 0xf3ff, 0xe3de,
    0x2462, 0x3443, 0x0420, 0x1401, 0x64e6, 0x74c7, 0x44a4, 0x5485,
    0xa56a, 0xb54b, 0x8528, 0x9509, 0xe5ee, 0xf5cf, 0xc5ac, 0xd58d,
    0x3653, 0x2672, 0x1611, 0x0630, 0x76d7, 0x66f6, 0x5695, 0x46b4,
    0xb75b, 0xa77a, 0x9719, 0x8738, 0xf7df, 0xe7fe, 0xd79d, 0xc7bc,
    0x48c4, 0x58e5, 0x6886, 0x78a7, 0x0840, 0x1861, 0x2802, 0x3823,
    0xc9cc, 0xd9ed, 0xe98e, 0xf9af, 0x8948, 0x9969, 0xa90a, 0xb92b,
    0x5af5, 0x4ad4, 0x7ab7, 0x6a96, 0x1a71, 0x0a50, 0x3a33, 0x2a12,
    0xdbfd, 0xcbdc, 0xfbbf, 0xeb9e, 0x9b79, 0x8b58, 0xbb3b, 0xab1a,
    0x6ca6, 0x7c87, 0x4ce4, 0x5cc5, 0x2c22, 0x3c03, 0x0c60, 0x1c41,
    0xedae, 0xfd8f, 0xcdec, 0xddcd, 0xad2a, 0xbd0b, 0x8d68, 0x9d49,
    0x7e97, 0x6eb6, 0x5ed5, 0x4ef4, 0x3e13, 0x2e32, 0x1e51, 0x0e70,
    0xff9f, 0xefbe, 0xdfdd, 0xcffc, 0xbf1b, 0xaf3a, 0x9f59, 0x8f78,
    0x9188, 0x81a9, 0xb1ca, 0xa1eb, 0xd10c, 0xc12d, 0xf14e, 0xe16f,
    0x1080, 0x00a1, 0x30c2, 0x20e3, 0x5004, 0x4025, 0x7046, 0x6067,
    0x83b9, 0x9398, 0xa3fb, 0xb3da, 0xc33d, 0xd31c, 0xe37f, 0xf35e,
    0x02b1, 0x1290, 0x22f3, 0x32d2, 0x4235, 0x5214, 0x6277, 0x7256,
    0xb5ea, 0xa5cb, 0x95a8, 0x8589, 0xf56e, 0xe54f, 0xd52c, 0xc50d,
    0x34e2, 0x24c3, 0x14a0, 0x0481, 0x7466, 0x6447, 0x5424, 0x4405,
    0xa7db, 0xb7fa, 0x8799, 0x97b8, 0xe75f, 0xf77e, 0xc71d, 0xd73c,
    0x26d3, 0x36f2, 0x0691, 0x16b0, 0x6657, 0x7676, 0x4615, 0x5634,
    0xd94c, 0xc96d, 0xf90e, 0xe92f, 0x99c8, 0x89e9, 0xb98a, 0xa9ab,
    0x5844, 0x4865, 0x7806, 0x6827, 0x18c0, 0x08e1, 0x3882, 0x28a3,
    0xcb7d, 0xdb5c, 0xeb3f, 0xfb1e, 0x8bf9, 0x9bd8, 0xabbb, 0xbb9a,
    0x4a75, 0x5a54, 0x6a37, 0x7a16, 0x0af1, 0x1ad0, 0x2ab3, 0x3a92,
    0xfd2e, 0xed0f, 0xdd6c, 0xcd4d, 0xbdaa, 0xad8b, 0x9de8, 0x8dc9,
    0x7c26, 0x6c07, 0x5c64, 0x4c45, 0x3ca2, 0x2c83, 0x1ce0, 0x0cc1,
    0xef1f, 0xff3e, 0xcf5d, 0xdf7c, 0xaf9b, 0xbfba, 0x8fd9, 0x9ff8,
    0x6e17, 0x7e36, 0x4e55, 0x5e74, 0x2e93, 0x3eb2, 0x0ed1, 0x1ef0,
};

static unsigned crc16(const char *buf, size_t len)
{
    unsigned crc = 0;
    for (size_t i = 0; i < len; i++)
        crc = ((crc << 8) ^ crc16_table[((crc >> 8) ^ (unsigned char)buf[i]) & 0xff]) & 0xffff;
    return crc;
}

unsigned slots_keyslot(const char *key, size_t len)
{
    if (len == 0)
        return 0;
    const char *open = memchr(key, '{', len);
    if (open) {
        const char *tag = open + 1;
        size_t rest = len - (size_t)(tag - key);
        const char *close = rest ? memchr(tag, '}', rest) : NULL;
        if (close && close > tag)
            return crc16(tag, (size_t)(close - tag)) & (SLOTS_COUNT - 1);
    }
    return crc16(key, len) & (SLOTS_COUNT - 1);
}

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

__attribute__((format(printf, 3, 4))) static int map_error(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int is_type(const redisReply *r, int type)
{
    return r && r->type == type;
}

static int str_is(const redisReply *r, const char *s)
{
    size_t n = strlen(s);
    return is_type(r, REDIS_REPLY_STRING) && r->len == n && memcmp(r->str, s, n) == 0;
}

/* A host as delayq will pass it to getaddrinfo: a hostname or IPv4 address
 * ([A-Za-z0-9._-]), or an IPv6 address (with an optional %zone). "" is fine
 * (the host that answered); "?" is not a host. */
static int host_ok(const char *h, size_t len)
{
    if (len > SLOTS_HOST_MAX)
        return 0;
    int colons = 0;
    size_t zone = len;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)h[i];
        if (c == ':' && zone == len)
            colons++;
        else if (c == '%' && zone == len)
            zone = i;
        else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '.' || c == '-' || c == '_'))
            return 0;
    }
    if (!colons)
        return zone == len;
    char addr[SLOTS_HOST_MAX + 1];
    struct in6_addr a6;
    memcpy(addr, h, zone);
    addr[zone] = '\0';
    return inet_pton(AF_INET6, addr, &a6) == 1 && zone + 1 != len;
}

static int id_ok(const redisReply *r)
{
    if (!is_type(r, REDIS_REPLY_STRING) || r->len != SLOTS_ID_LEN)
        return 0;
    for (size_t i = 0; i < SLOTS_ID_LEN; i++) {
        char c = r->str[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return 0;
    }
    return 1;
}

static int slot_value(const redisReply *r, unsigned *slot)
{
    if (!is_type(r, REDIS_REPLY_INTEGER) || r->integer < 0 || r->integer >= SLOTS_COUNT)
        return -1;
    *slot = (unsigned)r->integer;
    return 0;
}

/* The error for a reply that should have been an array: Redis' own words
 * when it is an error reply (for the log; never for a client). */
static int not_array(const redisReply *r, const char *what, char *err, size_t errlen)
{
    if (!r)
        return map_error(err, errlen, "%s: no reply", what);
    if (r->type == REDIS_REPLY_ERROR)
        return map_error(err, errlen, "%s: %.120s", what, r->str);
    return map_error(err, errlen, "%s: reply of type %d, not an array", what, r->type);
}

/* ------------------------------------------------------------------------ */
/* Map                                                                       */
/* ------------------------------------------------------------------------ */

slots_map *slots_map_new(void)
{
    slots_map *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    for (size_t i = 0; i < SLOTS_COUNT; i++)
        m->owner[i] = -1;
    return m;
}

void slots_map_free(slots_map *m)
{
    if (!m)
        return;
    free(m->nodes);
    free(m);
}

/* Moves t's contents into m; t is left holding m's old nodes, to be freed. */
static void map_take(slots_map *m, slots_map *t)
{
    slots_node *old = m->nodes;
    size_t oldcap = m->cap;
    m->nodes = t->nodes;
    m->n = t->n;
    m->cap = t->cap;
    m->covered = t->covered;
    memcpy(m->owner, t->owner, sizeof m->owner);
    t->nodes = old;
    t->cap = oldcap;
    t->n = 0;
}

/* A new zeroed node at the end; NULL when out of memory. */
static slots_node *node_append(slots_map *m)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 8;
        if (cap > INT32_MAX)
            return NULL;
        slots_node *grown = realloc(m->nodes, cap * sizeof *grown);
        if (!grown)
            return NULL;
        m->nodes = grown;
        m->cap = cap;
    }
    slots_node *nd = &m->nodes[m->n++];
    memset(nd, 0, sizeof *nd);
    return nd;
}

/* Index of the node host:port with that id and role, added if new. A reply
 * that names one node twice must say the same of it both times (CLUSTER
 * SLOTS repeats a node for each of its ranges); -1 with err if not. */
static int node_intern(slots_map *m, const char *host, int port, const char *id, int master,
                       const char *where, char *err, size_t errlen)
{
    for (size_t i = 0; i < m->n; i++) {
        slots_node *nd = &m->nodes[i];
        int same_addr = nd->port == port && strcasecmp(nd->host, host) == 0;
        int same_id = id[0] && strcmp(nd->id, id) == 0;
        if (!same_addr && !same_id)
            continue;
        if (!same_addr || strcmp(nd->id, id) != 0 || nd->master != master)
            return map_error(err, errlen, "%s: node %s:%d (%s) contradicts an earlier entry", where, host,
                        port, id[0] ? id : "no id");
        return (int)i;
    }
    slots_node *nd = node_append(m);
    if (!nd)
        return map_error(err, errlen, "%s: out of memory", where);
    snprintf(nd->host, sizeof nd->host, "%s", host);
    nd->port = port;
    snprintf(nd->id, sizeof nd->id, "%s", id);
    nd->is_master = master < 0;
    nd->master = master;
    return (int)(m->n - 1);
}

static int assign_range(slots_map *m, unsigned start, unsigned end, int node, const char *where,
                        char *err, size_t errlen)
{
    for (unsigned s = start; s <= end; s++) {
        if (m->owner[s] >= 0)
            return map_error(err, errlen, "%s: slot %u is assigned twice", where, s);
        m->owner[s] = node;
        m->covered++;
    }
    return 0;
}

int slots_map_node_of(const slots_map *m, unsigned slot)
{
    return slot < SLOTS_COUNT ? m->owner[slot] : -1;
}

size_t slots_map_nodes(const slots_map *m)
{
    return m->n;
}

const slots_node *slots_map_node(const slots_map *m, size_t i)
{
    return i < m->n ? &m->nodes[i] : NULL;
}

int slots_map_find(const slots_map *m, const char *host, int port)
{
    if (!host)
        return -1;
    for (size_t i = 0; i < m->n; i++) {
        if (m->nodes[i].port == port && strcasecmp(m->nodes[i].host, host) == 0)
            return (int)i;
    }
    return -1;
}

int slots_map_covers_all(const slots_map *m)
{
    return m->covered == SLOTS_COUNT;
}

/* ------------------------------------------------------------------------ */
/* Spreading shards                                                          */
/* ------------------------------------------------------------------------ */

/* The hash slot of shard i's tag: "{prefix}" with one shard, else
 * "{prefix:i}" (as store.c names them). */
static unsigned shard_slot(const char *prefix, int shards, int i)
{
    char tag[128];
    int n = shards == 1 ? snprintf(tag, sizeof tag, "{%s}", prefix)
                        : snprintf(tag, sizeof tag, "{%s:%d}", prefix, i);
    return slots_keyslot(tag, (size_t)n < sizeof tag ? (size_t)n : sizeof tag - 1);
}

/* How the shards spread over the map's masters (nodes that serve a slot):
 * returns the number of masters, with how many serve at least one shard
 * in *used and the fewest shards any master serves in *fewest. */
static int spread(const slots_map *m, const char *prefix, int shards, int *used, int *fewest)
{
    int *per = calloc(m->n ? m->n : 1, sizeof *per); /* -1: serves no slot */
    if (!per)
        abort();
    for (size_t k = 0; k < m->n; k++)
        per[k] = -1;
    for (unsigned slot = 0; slot < SLOTS_COUNT; slot++) {
        if (m->owner[slot] >= 0)
            per[m->owner[slot]] = 0;
    }
    for (int i = 0; i < shards; i++) {
        int k = m->owner[shard_slot(prefix, shards, i)];
        if (k >= 0)
            per[k]++;
    }
    int masters = 0;
    *used = 0;
    *fewest = -1;
    for (size_t k = 0; k < m->n; k++) {
        if (per[k] < 0)
            continue;
        masters++;
        *used += per[k] > 0;
        if (*fewest < 0 || per[k] < *fewest)
            *fewest = per[k];
    }
    free(per);
    if (*fewest < 0)
        *fewest = 0;
    return masters;
}

int slots_masters_used(const slots_map *m, const char *prefix, int shards, int *masters)
{
    int used, fewest;
    *masters = spread(m, prefix, shards, &used, &fewest);
    return used;
}

int slots_pick_shards(const slots_map *m, const char *prefix, int per_master, int max)
{
    int used, fewest, masters = spread(m, prefix, 1, &used, &fewest);
    if (masters == 0)
        return 0;
    int each = per_master / 2 > 0 ? per_master / 2 : 1;
    int n = masters * per_master > 2 ? masters * per_master : 2;
    for (; n < max; n++) {
        spread(m, prefix, n, &used, &fewest);
        if (fewest >= each)
            return n;
    }
    return max;
}

void slots_map_set(slots_map *m, unsigned slot, const char *host, int port)
{
    if (!m || slot >= SLOTS_COUNT || !host || port <= 0 || port > 65535)
        abort();
    size_t len = strlen(host);
    if (len == 1 && host[0] == '?')
        return;
    if (!host_ok(host, len))
        abort();
    int i = slots_map_find(m, host, port);
    if (i < 0) {
        slots_node *nd = node_append(m);
        if (!nd)
            abort();
        memcpy(nd->host, host, len + 1);
        nd->port = port;
        i = (int)(m->n - 1);
    }
    /* A replica named in a MOVED has been promoted. Its old master keeps
     * whatever other slots it has until the next refresh. */
    m->nodes[i].is_master = 1;
    m->nodes[i].master = -1;
    if (m->owner[slot] < 0)
        m->covered++;
    m->owner[slot] = i;
}

/* ------------------------------------------------------------------------ */
/* CLUSTER SHARDS                                                            */
/* ------------------------------------------------------------------------ */

/* A field of a CLUSTER SHARDS map that delayq reads: its name, the type
 * its value must have, and where it goes (the offset of a
 * `const redisReply *` in the caller's struct of fields). */
typedef struct {
    const char *name;
    int type;
    size_t offset;
} reply_field;

/* Reads r, a list of field/value pairs, into out (a struct of
 * `const redisReply *` that fields[0..n) place; values lent from r, the
 * others NULL): each field at most once, with its type. Unknown fields are
 * skipped, so a newer Redis can add some. */
static int read_fields(const redisReply *r, const reply_field *fields, size_t n, void *out,
                       const char *where, char *err, size_t errlen)
{
    if (!is_type(r, REDIS_REPLY_ARRAY) || r->elements % 2)
        return map_error(err, errlen, "%s: not a list of field/value pairs", where);
    for (size_t i = 0; i < r->elements; i += 2) {
        const redisReply *k = r->element[i], *v = r->element[i + 1];
        if (!is_type(k, REDIS_REPLY_STRING))
            return map_error(err, errlen, "%s: a field name is not a string", where);
        for (size_t j = 0; j < n; j++) {
            if (!str_is(k, fields[j].name))
                continue;
            const redisReply **slot = (const redisReply **)((char *)out + fields[j].offset);
            if (!is_type(v, fields[j].type))
                return map_error(err, errlen, "%s: '%s' has the wrong type", where, fields[j].name);
            if (*slot)
                return map_error(err, errlen, "%s: '%s' appears twice", where, fields[j].name);
            *slot = v;
        }
    }
    return 0;
}

/* The fields of one node in a CLUSTER SHARDS reply that delayq reads; lent
 * from the reply. */
typedef struct {
    const redisReply *id, *port, *tls_port, *ip, *endpoint, *hostname, *role, *offset, *health;
} shard_node;

static const reply_field SHARD_NODE_FIELDS[] = {
    {"id", REDIS_REPLY_STRING, offsetof(shard_node, id)},
    {"port", REDIS_REPLY_INTEGER, offsetof(shard_node, port)},
    {"tls-port", REDIS_REPLY_INTEGER, offsetof(shard_node, tls_port)},
    {"ip", REDIS_REPLY_STRING, offsetof(shard_node, ip)},
    {"endpoint", REDIS_REPLY_STRING, offsetof(shard_node, endpoint)},
    {"hostname", REDIS_REPLY_STRING, offsetof(shard_node, hostname)},
    {"role", REDIS_REPLY_STRING, offsetof(shard_node, role)},
    {"replication-offset", REDIS_REPLY_INTEGER, offsetof(shard_node, offset)},
    {"health", REDIS_REPLY_STRING, offsetof(shard_node, health)},
};

/* The fields of one shard in a CLUSTER SHARDS reply that delayq reads. */
typedef struct {
    const redisReply *slots, *nodes;
} shard_fields;

static const reply_field SHARD_FIELDS[] = {
    {"slots", REDIS_REPLY_ARRAY, offsetof(shard_fields, slots)},
    {"nodes", REDIS_REPLY_ARRAY, offsetof(shard_fields, nodes)},
};

/* Reads and checks one node's field/value pairs. */
static int shard_node_parse(const redisReply *r, shard_node *f, const char *where, char *err,
                            size_t errlen)
{
    memset(f, 0, sizeof *f);
    if (read_fields(r, SHARD_NODE_FIELDS, sizeof SHARD_NODE_FIELDS / sizeof SHARD_NODE_FIELDS[0], f,
                    where, err, errlen) < 0)
        return -1;
    if (!f->id || !f->ip || !f->role || !f->health || (!f->port && !f->tls_port))
        return map_error(err, errlen, "%s: needs id, ip, role, health and port or tls-port", where);
    if (!id_ok(f->id))
        return map_error(err, errlen, "%s: bad node id", where);
    if (!str_is(f->role, "master") && !str_is(f->role, "replica"))
        return map_error(err, errlen, "%s: unknown role", where);
    if ((f->port && (f->port->integer < 0 || f->port->integer > 65535)) ||
        (f->tls_port && (f->tls_port->integer < 0 || f->tls_port->integer > 65535)))
        return map_error(err, errlen, "%s: port out of range", where);
    return 0;
}

/* Adds one node of a shard (master < 0: the master). The plain port wins:
 * hiredis 0.14 speaks no TLS. */
static int shard_node_add(slots_map *m, const shard_node *f, int master, const char *where,
                          char *err, size_t errlen)
{
    const redisReply *addr = f->endpoint;
    if (!addr || str_is(addr, "?"))
        addr = f->ip;
    if (!host_ok(addr->str, addr->len))
        return map_error(err, errlen, "%s: no usable address", where);
    long long port = f->port && f->port->integer ? f->port->integer
                                                 : (f->tls_port ? f->tls_port->integer : 0);
    if (port <= 0)
        return map_error(err, errlen, "%s: no port", where);
    char host[SLOTS_HOST_MAX + 1];
    memcpy(host, addr->str, addr->len);
    host[addr->len] = '\0';
    char id[SLOTS_ID_LEN + 1];
    memcpy(id, f->id->str, SLOTS_ID_LEN);
    id[SLOTS_ID_LEN] = '\0';
    return node_intern(m, host, (int)port, id, master, where, err, errlen);
}

static int shard_add(slots_map *m, const redisReply *r, size_t si, char *err, size_t errlen)
{
    char where[80];
    snprintf(where, sizeof where, "CLUSTER SHARDS: shard %zu", si);
    shard_fields fields = {NULL, NULL};
    if (read_fields(r, SHARD_FIELDS, sizeof SHARD_FIELDS / sizeof SHARD_FIELDS[0], &fields, where,
                    err, errlen) < 0)
        return -1;
    const redisReply *slots = fields.slots, *nodes = fields.nodes;
    if (!slots || !nodes)
        return map_error(err, errlen, "%s: needs 'slots' and 'nodes'", where);
    if (slots->elements % 2)
        return map_error(err, errlen, "%s: 'slots' is not a list of ranges", where);
    for (size_t i = 0; i < slots->elements; i += 2) {
        unsigned start, end;
        if (slot_value(slots->element[i], &start) < 0 || slot_value(slots->element[i + 1], &end) < 0 ||
            start > end)
            return map_error(err, errlen, "%s: bad slot range", where);
    }

    /* Check every node first, then take the one online master. */
    shard_node stack[8], *f = stack;
    if (nodes->elements > sizeof stack / sizeof stack[0] &&
        !(f = calloc(nodes->elements, sizeof *f)))
        return map_error(err, errlen, "%s: out of memory", where);
    int rc = -1;
    size_t master = nodes->elements;
    for (size_t i = 0; i < nodes->elements; i++) {
        char wn[120];
        snprintf(wn, sizeof wn, "%s node %zu", where, i);
        if (shard_node_parse(nodes->element[i], &f[i], wn, err, errlen) < 0)
            goto out;
        if (str_is(f[i].role, "master") && str_is(f[i].health, "online")) {
            if (master != nodes->elements) {
                map_error(err, errlen, "%s: two online masters", where);
                goto out;
            }
            master = i;
        }
    }
    rc = 0;
    if (master == nodes->elements || slots->elements == 0)
        goto out; /* nobody to send these slots to (yet): leave them uncovered */
    int mi = shard_node_add(m, &f[master], -1, where, err, errlen);
    if (mi < 0) {
        rc = -1;
        goto out;
    }
    for (size_t i = 0; i < slots->elements; i += 2) {
        if (assign_range(m, (unsigned)slots->element[i]->integer,
                         (unsigned)slots->element[i + 1]->integer, mi, where, err, errlen) < 0) {
            rc = -1;
            goto out;
        }
    }
    for (size_t i = 0; i < nodes->elements; i++) {
        if (str_is(f[i].role, "replica") && str_is(f[i].health, "online") &&
            shard_node_add(m, &f[i], mi, where, err, errlen) < 0) {
            rc = -1;
            goto out;
        }
    }
out:
    if (f != stack)
        free(f);
    return rc;
}

/* Fills a new map from r and, when it serves some slot, puts it in m's
 * place; otherwise m stays as it was and err says why (`what` names the
 * reply, `empty` what a map serving no slot lacks). */
static int map_build(slots_map *m, const redisReply *r, const char *what, const char *empty,
                     int (*fill)(slots_map *, const redisReply *, char *, size_t), char *err,
                     size_t errlen)
{
    if (!is_type(r, REDIS_REPLY_ARRAY))
        return not_array(r, what, err, errlen);
    slots_map *t = slots_map_new();
    if (!t)
        return map_error(err, errlen, "%s: out of memory", what);
    int rc = fill(t, r, err, errlen);
    if (rc == 0 && t->covered == 0)
        rc = map_error(err, errlen, "%s: %s", what, empty);
    if (rc == 0)
        map_take(m, t);
    slots_map_free(t);
    return rc;
}

static int fill_from_shards(slots_map *t, const redisReply *r, char *err, size_t errlen)
{
    for (size_t i = 0; i < r->elements; i++) {
        if (shard_add(t, r->element[i], i, err, errlen) < 0)
            return -1;
    }
    return 0;
}

int slots_map_from_shards(slots_map *m, const redisReply *r, char *err, size_t errlen)
{
    return map_build(m, r, "CLUSTER SHARDS", "no shard has slots and an online master",
                     fill_from_shards, err, errlen);
}

/* ------------------------------------------------------------------------ */
/* CLUSTER SLOTS                                                             */
/* ------------------------------------------------------------------------ */

/* Adds one node entry [endpoint, port, id, metadata] (Redis before 7 sends
 * fewer; more is ignored). */
static int slots_node_add(slots_map *m, const redisReply *r, int master, const char *where,
                          char *err, size_t errlen)
{
    if (!is_type(r, REDIS_REPLY_ARRAY) || r->elements < 2)
        return map_error(err, errlen, "%s: a node is not [endpoint, port, ...]", where);
    const redisReply *addr = r->element[0], *port = r->element[1];
    const redisReply *id = r->elements > 2 ? r->element[2] : NULL;
    const redisReply *meta = r->elements > 3 ? r->element[3] : NULL;
    if (!is_type(port, REDIS_REPLY_INTEGER) || port->integer <= 0 || port->integer > 65535)
        return map_error(err, errlen, "%s: bad port", where);
    if (id && !id_ok(id))
        return map_error(err, errlen, "%s: bad node id", where);
    const redisReply *meta_ip = NULL;
    if (meta) {
        if (!is_type(meta, REDIS_REPLY_ARRAY) || meta->elements % 2)
            return map_error(err, errlen, "%s: metadata is not a list of field/value pairs", where);
        for (size_t i = 0; i < meta->elements; i += 2) {
            if (!is_type(meta->element[i], REDIS_REPLY_STRING))
                return map_error(err, errlen, "%s: a metadata name is not a string", where);
            if (str_is(meta->element[i], "ip")) {
                if (!is_type(meta->element[i + 1], REDIS_REPLY_STRING))
                    return map_error(err, errlen, "%s: metadata ip is not a string", where);
                meta_ip = meta->element[i + 1];
            }
        }
    }
    /* nil: unknown endpoint, the host that answered, as is "". */
    const char *h = "";
    size_t hlen = 0;
    if (str_is(addr, "?"))
        addr = meta_ip;
    if (is_type(addr, REDIS_REPLY_STRING)) {
        h = addr->str;
        hlen = addr->len;
    } else if (!is_type(addr, REDIS_REPLY_NIL)) {
        return map_error(err, errlen, "%s: no usable address", where);
    }
    if (!host_ok(h, hlen))
        return map_error(err, errlen, "%s: no usable address", where);
    char host[SLOTS_HOST_MAX + 1];
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    char nid[SLOTS_ID_LEN + 1] = "";
    if (id) {
        memcpy(nid, id->str, SLOTS_ID_LEN);
        nid[SLOTS_ID_LEN] = '\0';
    }
    return node_intern(m, host, (int)port->integer, nid, master, where, err, errlen);
}

static int fill_from_slots(slots_map *t, const redisReply *r, char *err, size_t errlen)
{
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *range = r->element[i];
        char where[80];
        snprintf(where, sizeof where, "CLUSTER SLOTS: range %zu", i);
        unsigned start, end;
        if (!is_type(range, REDIS_REPLY_ARRAY) || range->elements < 3 ||
            slot_value(range->element[0], &start) < 0 || slot_value(range->element[1], &end) < 0 ||
            start > end)
            return map_error(err, errlen, "%s: not [start, end, master, replicas...]", where);
        int mi = slots_node_add(t, range->element[2], -1, where, err, errlen);
        if (mi < 0 || assign_range(t, start, end, mi, where, err, errlen) < 0)
            return -1;
        for (size_t j = 3; j < range->elements; j++) {
            if (slots_node_add(t, range->element[j], mi, where, err, errlen) < 0)
                return -1;
        }
    }
    return 0;
}

int slots_map_from_slots(slots_map *m, const redisReply *r, char *err, size_t errlen)
{
    return map_build(m, r, "CLUSTER SLOTS", "no slot is assigned", fill_from_slots, err, errlen);
}

/* ------------------------------------------------------------------------ */
/* Errors and redirections                                                   */
/* ------------------------------------------------------------------------ */

static const struct {
    const char *code;
    slots_error kind;
} ERROR_CODES[] = {
    {"MOVED", SLOTS_ERR_MOVED},
    {"ASK", SLOTS_ERR_ASK},
    {"TRYAGAIN", SLOTS_ERR_TRYAGAIN},
    {"CLUSTERDOWN", SLOTS_ERR_CLUSTERDOWN},
    {"CROSSSLOT", SLOTS_ERR_CROSSSLOT},
    {"READONLY", SLOTS_ERR_READONLY},
    {"MASTERDOWN", SLOTS_ERR_MASTERDOWN},
    {"LOADING", SLOTS_ERR_LOADING},
};

int slots_error_kind(const char *errstr, size_t len)
{
    if (!errstr)
        return SLOTS_ERR_OTHER;
    size_t w = 0;
    while (w < len && errstr[w] != ' ')
        w++;
    for (size_t i = 0; i < sizeof ERROR_CODES / sizeof ERROR_CODES[0]; i++) {
        if (strlen(ERROR_CODES[i].code) == w && memcmp(errstr, ERROR_CODES[i].code, w) == 0)
            return ERROR_CODES[i].kind;
    }
    return SLOTS_ERR_OTHER;
}

/* Decimal digits s[*i..] up to a non-digit, at most maxdigits of them;
 * -1 if there are none or too many. */
static int parse_digits(const char *s, size_t len, size_t *i, int maxdigits, long *out)
{
    long v = 0;
    size_t start = *i;
    while (*i < len && s[*i] >= '0' && s[*i] <= '9') {
        if ((int)(*i - start) == maxdigits)
            return -1;
        v = v * 10 + (s[*i] - '0');
        (*i)++;
    }
    if (*i == start)
        return -1;
    *out = v;
    return 0;
}

int slots_parse_redirect(const char *errstr, size_t len, slots_redirect *out)
{
    int kind = slots_error_kind(errstr, len);
    if (kind != SLOTS_ERR_MOVED && kind != SLOTS_ERR_ASK)
        return 0;
    const char *s = errstr;
    size_t i = strlen(kind == SLOTS_ERR_MOVED ? "MOVED" : "ASK");
    long slot, port;
    if (i >= len || s[i++] != ' ' || parse_digits(s, len, &i, 5, &slot) < 0 || slot >= SLOTS_COUNT ||
        i >= len || s[i++] != ' ')
        return -1;

    /* host:port, the host bracketed or not: Redis 7 sends an IPv6 address
     * bare ("::1:6381"), so the port follows the last ':'. */
    const char *addr = s + i, *end = s + len, *host, *hend, *p;
    if (addr < end && *addr == '[') {
        host = addr + 1;
        hend = memchr(host, ']', (size_t)(end - host));
        if (!hend || hend == host || hend + 1 == end || hend[1] != ':')
            return -1;
        p = hend + 2;
    } else {
        hend = NULL;
        for (const char *c = addr; c < end; c++) {
            if (*c == ':')
                hend = c;
        }
        if (!hend)
            return -1;
        host = addr;
        p = hend + 1;
    }
    size_t hlen = (size_t)(hend - host);
    size_t pi = (size_t)(p - s);
    if (parse_digits(s, len, &pi, 5, &port) < 0 || pi != len || port <= 0 || port > 65535)
        return -1;
    if (!(hlen == 1 && host[0] == '?') && !host_ok(host, hlen))
        return -1;
    out->kind = kind;
    out->slot = (unsigned)slot;
    memcpy(out->host, host, hlen);
    out->host[hlen] = '\0';
    out->port = (int)port;
    return 1;
}
