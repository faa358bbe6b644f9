/* config: the table of keys and the three sources that set them. */
#include "common/config.h"
#include "common/util.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { KEY_INT, KEY_STRING } key_type;

typedef struct {
    const char *name;
    key_type type;
    const char *def;
    size_t offset;
    size_t size; /* string capacity */
    long min, max;
} key_spec;

#define INT_KEY(n, d, lo, hi) {#n, KEY_INT, d, offsetof(dq_config, n), 0, lo, hi}
#define STR_KEY(n, d) {#n, KEY_STRING, d, offsetof(dq_config, n), sizeof(((dq_config *)0)->n), 0, 0}

static const key_spec keys[] = {
    STR_KEY(listen, "127.0.0.1:9000"),
    INT_KEY(workers, "4", 1, 256),
    INT_KEY(threads, "32", 1, 1024),
    INT_KEY(group_commit, "64", 1, 1000),
    INT_KEY(longpoll_recheck_ms, "1000", 50, 600000),
    INT_KEY(max_connections, "10000", 1, 1000000),
    INT_KEY(backlog, "1024", 1, 65535),
    STR_KEY(redis_host, "127.0.0.1"),
    INT_KEY(redis_port, "6379", 1, 65535),
    STR_KEY(redis_socket, ""),
    STR_KEY(redis_username, ""),
    STR_KEY(redis_password, ""),
    INT_KEY(redis_db, "0", 0, 1000),
    INT_KEY(redis_connect_timeout_ms, "500", 1, 60000),
    INT_KEY(redis_timeout_ms, "2000", 1, 60000),
    STR_KEY(redis_cluster, ""),
    STR_KEY(redis_sentinels, ""),
    STR_KEY(redis_sentinel_master, ""),
    STR_KEY(redis_sentinel_username, ""),
    STR_KEY(redis_sentinel_password, ""),
    INT_KEY(redis_wait_replicas, "0", 0, 64),
    INT_KEY(redis_wait_timeout_ms, "1000", 1, 60000),
    STR_KEY(prefix, "dq"),
    INT_KEY(buckets, "16", 1, 4096),
    INT_KEY(shards, "0", 0, DQ_SHARDS_MAX), /* 0: chosen at start (daemon.c) */
    INT_KEY(max_body, "65536", 1, 16 * 1024 * 1024),
    INT_KEY(max_request, "1048576", 1024, 64 * 1024 * 1024),
    INT_KEY(default_ttr, "60", 1, 86400),
    INT_KEY(timer_lease_ms, "5000", 300, DQ_TIMER_LEASE_MAX_MS),
    INT_KEY(timer_batch, "1000", 1, 100000),
    STR_KEY(timer_id, ""),
    INT_KEY(topic_retention_s, "3600", 0, 31536000),
    INT_KEY(metrics_max_topics, "1000", 0, 100000),
    STR_KEY(log_level, "info"),
    STR_KEY(auth_file, ""),
    STR_KEY(push_secret, ""),
    STR_KEY(push_allow, "*"),
    INT_KEY(push_concurrency, "64", 1, 4096),
    INT_KEY(push_per_host, "8", 1, 1024),
    INT_KEY(push_response_max, "16384", 0, 1048576),
    INT_KEY(push_grace_ms, "30000", 100, 600000),
};

#define NKEYS (sizeof keys / sizeof keys[0])

const char *config_key_name(size_t i)
{
    return i < NKEYS ? keys[i].name : NULL;
}

const char *config_key_default(size_t i)
{
    return i < NKEYS ? keys[i].def : NULL;
}

static const key_spec *find_key(const char *name)
{
    for (size_t i = 0; i < NKEYS; i++) {
        if (strcmp(keys[i].name, name) == 0)
            return &keys[i];
    }
    return NULL;
}

/* Rules beyond type and range, checked as each value is set. */
static int check_string(const key_spec *k, const char *value, char *err, size_t errlen)
{
    if (strcmp(k->name, "prefix") == 0) {
        size_t n = strlen(value);
        if (n == 0 || strspn(value, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-") != n) {
            snprintf(err, errlen, "config key 'prefix': must be 1 to 63 characters of A-Z a-z 0-9 _ . : -");
            return -1;
        }
    }
    if (strcmp(k->name, "log_level") == 0 && strcmp(value, "debug") != 0 &&
        strcmp(value, "info") != 0 && strcmp(value, "warn") != 0 && strcmp(value, "error") != 0) {
        snprintf(err, errlen, "config key 'log_level': must be debug, info, warn or error, not '%s'",
                 value);
        return -1;
    }
    if (strcmp(k->name, "timer_id") == 0 &&
        strspn(value, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:@-") !=
            strlen(value)) {
        snprintf(err, errlen, "config key 'timer_id': must be empty or 1 to 63 characters of "
                              "A-Z a-z 0-9 _ . : @ -");
        return -1;
    }
    if (strcmp(k->name, "listen") == 0 && value[0] == '\0') {
        snprintf(err, errlen, "config key 'listen': must be host:port, :port or a socket path");
        return -1;
    }
    if (strcmp(k->name, "redis_cluster") == 0 || strcmp(k->name, "redis_sentinels") == 0) {
        dq_addr addrs[CONFIG_MAX_ADDRS];
        if (config_addr_list(k->name, value, addrs, CONFIG_MAX_ADDRS, err, errlen) < 0)
            return -1;
    }
    return 0;
}

/* "host:port" or "[v6]:port" of n bytes into a. Returns 0 or -1. */
static int parse_addr(const char *s, size_t n, dq_addr *a)
{
    const char *colon = NULL;
    size_t hlen;
    const char *host = s;
    if (n > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close || close + 1 >= s + n || close[1] != ':')
            return -1;
        host = s + 1;
        hlen = (size_t)(close - host);
        colon = close + 1;
    } else {
        for (size_t i = 0; i < n; i++)
            if (s[i] == ':')
                colon = s + i;
        if (!colon)
            return -1;
        hlen = (size_t)(colon - s);
    }
    if (hlen == 0 || hlen >= sizeof a->host)
        return -1;
    for (size_t i = 0; i < hlen; i++) {
        if (!isalnum((unsigned char)host[i]) && !strchr(".-_:", host[i]))
            return -1;
    }
    size_t plen = (size_t)(s + n - colon - 1);
    if (plen == 0 || plen > 5)
        return -1;
    long port = 0;
    for (size_t i = 0; i < plen; i++) {
        if (!isdigit((unsigned char)colon[1 + i]))
            return -1;
        port = port * 10 + (colon[1 + i] - '0');
    }
    if (port < 1 || port > 65535)
        return -1;
    memcpy(a->host, host, hlen);
    a->host[hlen] = '\0';
    a->port = (int)port;
    return 0;
}

int config_addr_list(const char *key, const char *value, dq_addr *out, int max, char *err,
                     size_t errlen)
{
    int n = 0;
    const char *p = value, *word;
    size_t len;
    while (util_next_word(&p, &word, &len)) {
        if (n == max) {
            snprintf(err, errlen, "config key '%s': at most %d addresses", key, max);
            return -1;
        }
        if (parse_addr(word, len, &out[n]) < 0) {
            snprintf(err, errlen, "config key '%s': '%.*s' is not host:port (or [ipv6]:port)", key,
                     (int)(len > 80 ? 80 : len), word);
            return -1;
        }
        n++;
    }
    return n;
}

/* Rules between keys, checked once all sources are read. */
static int check_together(const dq_config *cfg, char *err, size_t errlen)
{
    if (cfg->redis_cluster[0] && cfg->redis_sentinels[0]) {
        snprintf(err, errlen, "config keys 'redis_cluster' and 'redis_sentinels' cannot both be "
                              "set: delayq talks to a Redis Cluster or to a Sentinel-watched primary");
        return -1;
    }
    if (cfg->redis_sentinels[0] && !cfg->redis_sentinel_master[0]) {
        snprintf(err, errlen, "config key 'redis_sentinel_master' is required with "
                              "'redis_sentinels' (the name the sentinels monitor)");
        return -1;
    }
    if (cfg->redis_cluster[0] && cfg->redis_db != 0) {
        snprintf(err, errlen, "config key 'redis_db' must be 0 with 'redis_cluster' (a Redis "
                              "Cluster has one database)");
        return -1;
    }
    return 0;
}

int config_set(dq_config *cfg, const char *key, const char *value, char *err, size_t errlen)
{
    const key_spec *k = find_key(key);
    if (!k) {
        snprintf(err, errlen, "unknown config key '%s'", key);
        return -1;
    }
    char *field = (char *)cfg + k->offset;
    if (k->type == KEY_STRING) {
        if (strlen(value) >= k->size) {
            snprintf(err, errlen, "config key '%s': value longer than %zu characters", key, k->size - 1);
            return -1;
        }
        if (check_string(k, value, err, errlen) < 0)
            return -1;
        strcpy(field, value);
        return 0;
    }
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (errno || end == value || *end != '\0' || v < k->min || v > k->max) {
        snprintf(err, errlen, "config key '%s': '%s' is not an integer from %ld to %ld", key, value,
                 k->min, k->max);
        return -1;
    }
    *(int *)(void *)field = (int)v;
    return 0;
}

void config_defaults(dq_config *cfg)
{
    char err[256];
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < NKEYS; i++) {
        if (config_set(cfg, keys[i].name, keys[i].def, err, sizeof err) < 0)
            abort(); /* a default that breaks its own rule is a bug */
    }
}

int config_load_file(dq_config *cfg, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot open config file %s: %s", path, strerror(errno));
        return -1;
    }
    char line[1024], msg[512];
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        /* Only whole lines are comments, so values (passwords) may hold '#'. */
        char *s = util_trim(line);
        if (*s == '\0' || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(err, errlen, "%s:%d: expected 'key = value'", path, lineno);
            rc = -1;
            break;
        }
        *eq = '\0';
        if (config_set(cfg, util_trim(s), util_trim(eq + 1), msg, sizeof msg) < 0) {
            snprintf(err, errlen, "%s:%d: %s", path, lineno, msg);
            rc = -1;
            break;
        }
    }
    fclose(f);
    return rc;
}

int config_load_env(dq_config *cfg, char *err, size_t errlen)
{
    char var[96], msg[512];
    for (size_t i = 0; i < NKEYS; i++) {
        snprintf(var, sizeof var, "DELAYQ_%s", keys[i].name);
        for (char *p = var; *p; p++)
            *p = (char)toupper((unsigned char)*p);
        const char *v = getenv(var);
        if (v && config_set(cfg, keys[i].name, v, msg, sizeof msg) < 0) {
            snprintf(err, errlen, "environment %s: %s", var, msg);
            return -1;
        }
    }
    return 0;
}

int config_init(dq_config *cfg, int argc, char **argv, char *err, size_t errlen)
{
    const char *path = getenv("DELAYQ_CONFIG");
    config_defaults(cfg);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-c") != 0)
            continue;
        if (i + 1 >= argc) {
            snprintf(err, errlen, "-c needs a config file path");
            return -1;
        }
        path = argv[++i];
    }
    if (path && *path && config_load_file(cfg, path, err, errlen) < 0)
        return -1;
    if (config_load_env(cfg, err, errlen) < 0)
        return -1;
    char key[128];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-c") == 0) {
            i++;
            continue;
        }
        const char *eq = strchr(argv[i], '=');
        if (strncmp(argv[i], "--", 2) != 0 || !eq || (size_t)(eq - argv[i] - 2) >= sizeof key) {
            snprintf(err, errlen, "unknown argument '%s' (use -c FILE or --key=value)", argv[i]);
            return -1;
        }
        memcpy(key, argv[i] + 2, (size_t)(eq - argv[i] - 2));
        key[eq - argv[i] - 2] = '\0';
        for (char *p = key; *p; p++) {
            if (*p == '-')
                *p = '_';
        }
        if (config_set(cfg, key, eq + 1, err, errlen) < 0)
            return -1;
    }
    return check_together(cfg, err, errlen);
}
