/* daemon: shared start-up of the delayq processes (see daemon.h). */
#include "daemon/daemon.h"

#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "common/log.h"
#include "store/store.h"
#include "store/store_migrate.h"
#include "store/store_ops.h"

/* Seconds between attempts to learn the shard count while Redis is away. */
#define CHOOSE_RETRY_S 1

static void choose_shards(dq_config *cfg)
{
    char why[256];
    int waited = 0;
    while (store_layout_choose_shards(cfg, why, sizeof why) != DQ_OK) {
        if (!waited++)
            log_warn("shards is unset and %s; waiting for Redis to learn the shard count", why);
        sleep(CHOOSE_RETRY_S);
    }
    log_info("shards = %d (%s)", cfg->shards, why);
}

/* A Cluster master that serves none of the shards holds none of the jobs:
 * said at every start (and by /health and /metrics). */
static void warn_spread(const dq_config *cfg)
{
    dq_store *s = store_new(cfg);
    if (!s)
        abort();
    int masters, used = store_cluster_spread(s, &masters);
    if (used < masters)
        log_warn("this deployment's %d shards use %d of the Redis Cluster's %d masters: the "
                 "others hold none of its jobs (docs/OPERATIONS.md, \"Spreading over a Cluster\")",
                 cfg->shards, used, masters);
    store_free(s);
}

int daemon_layout_settle(dq_config *cfg)
{
    if (cfg->shards == 0)
        choose_shards(cfg);
    char why[512];
    if (store_layout_check(cfg, why, sizeof why) == DQ_MISCONFIGURED) {
        log_error("%s; not starting", why);
        return 1;
    }
    warn_spread(cfg);
    return store_layout_refused(cfg);
}

int daemon_main(const char *name, int argc, char **argv,
                int (*run)(const dq_config *cfg, int stop_fd))
{
    static dq_config cfg;
    char err[512];
    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        printf("usage: %s [-c delayq.conf] [--key=value ...]\n"
               "Every key of delayq.conf can also be set as DELAYQ_<KEY> or --key=value.\n",
               name);
        return 0;
    }
    if (config_init(&cfg, argc, argv, err, sizeof err) < 0) {
        fprintf(stderr, "%s: %s\n", name, err);
        return 2;
    }
    log_init(name, cfg.log_level);
    if (daemon_layout_settle(&cfg))
        return 1;
    signal(SIGPIPE, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    int stop_fd = signalfd(-1, &set, SFD_CLOEXEC);
    if (stop_fd < 0) {
        log_error("signalfd failed");
        return 1;
    }
    int code = run(&cfg, stop_fd);
    close(stop_fd);
    return code;
}
