/* daemon: the start-up the delayq processes share: --help, the
 * configuration (file, environment, flags), logging, and refusing to run
 * laid out unlike the deployment. */
#ifndef DQ_DAEMON_H
#define DQ_DAEMON_H

#include "common/config.h"

/* Settles the layout before a process starts: with shards unset (0), sets
 * cfg->shards to the deployment's count (store_layout_choose_shards),
 * waiting for Redis if it must. Then 1 (logged) when Redis records another
 * bucket or shard layout than cfg: such a process would put jobs where no
 * other process looks, or when its data is of a newer stored layout than
 * this delayq knows (store_layout_refused). 0 when the layouts agree, or
 * Redis is not there yet (the functions check on use). Logs a warning when
 * the shards leave a Cluster master without jobs. */
int daemon_layout_settle(dq_config *cfg);

/* main() of delayq-timer and delayq-push: parses the configuration into a
 * static dq_config, checks the layout, blocks SIGTERM and SIGINT and hands
 * a signalfd for them to run(), whose result is the exit status (2 for a
 * bad setting, 1 for another failure at start). */
int daemon_main(const char *name, int argc, char **argv,
                int (*run)(const dq_config *cfg, int stop_fd));

#endif
