/* config: delayq.conf, DELAYQ_<KEY> environment overrides and --key=value
 * flags, in that order of precedence (flags win). One table describes every
 * key; the shipped delayq.conf is checked against it by the unit tests. */
#ifndef DQ_CONFIG_H
#define DQ_CONFIG_H

#include <stddef.h>

/* The most shards a deployment may have (config key 'shards'). */
#define DQ_SHARDS_MAX 1024

/* The longest timer_lease_ms (delayq-timer relies on it: src/timer/timer.c). */
#define DQ_TIMER_LEASE_MAX_MS 600000

typedef struct {
    char listen[256];
    int workers;
    int threads;
    int group_commit; /* single-job requests per grouped call (1: none) */
    int longpoll_recheck_ms; /* a parked long-poll pops again at least this often */
    int max_connections;
    int backlog;
    char redis_host[256];
    int redis_port;
    char redis_socket[256];
    char redis_username[128];
    char redis_password[256];
    int redis_db;
    int redis_connect_timeout_ms;
    int redis_timeout_ms;
    char redis_cluster[1024];
    char redis_sentinels[1024];
    char redis_sentinel_master[128];
    char redis_sentinel_username[128];
    char redis_sentinel_password[256];
    int redis_wait_replicas;
    int redis_wait_timeout_ms;
    char prefix[64];
    int buckets;
    int shards;
    int max_body;
    int max_request;
    int default_ttr;
    int timer_lease_ms; /* at most DQ_TIMER_LEASE_MAX_MS */
    int timer_batch;
    char timer_id[64];
    int topic_retention_s;
    int metrics_max_topics;
    char log_level[16];
    char auth_file[256];
    char push_secret[1024];
    char push_allow[1024];
    int push_concurrency;
    int push_per_host;
    int push_response_max;
    int push_grace_ms;
} dq_config;

#define CONFIG_MAX_ADDRS 16

/* A host and port from redis_cluster or redis_sentinels. */
typedef struct {
    char host[256];
    int port;
} dq_addr;

/* Parses "host:port,host:port" (also "[ipv6]:port"; commas or spaces) into
 * out. Returns how many, or -1 with err naming key and the bad entry. */
int config_addr_list(const char *key, const char *value, dq_addr *out, int max, char *err,
                     size_t errlen);

/* Fills cfg with the defaults. */
void config_defaults(dq_config *cfg);
/* Sets one key from its text value. Returns 0, or -1 with err naming the key
 * and the rule. */
int config_set(dq_config *cfg, const char *key, const char *value, char *err, size_t errlen);
/* Reads a delayq.conf file. Returns 0, or -1 with err naming file, line and key. */
int config_load_file(dq_config *cfg, const char *path, char *err, size_t errlen);
/* Applies DELAYQ_<KEY> variables from the environment. */
int config_load_env(dq_config *cfg, char *err, size_t errlen);
/* The whole sequence for a binary: defaults, the file (-c PATH, else
 * DELAYQ_CONFIG, else none), environment, then --key=value flags. */
int config_init(dq_config *cfg, int argc, char **argv, char *err, size_t errlen);

/* Iterates the documented keys: returns the name of key i, or NULL past the end. */
const char *config_key_name(size_t i);
const char *config_key_default(size_t i);

#endif
