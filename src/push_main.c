/* delayq-push: delivers the jobs that have a callback URL by POSTing them.
 * Run one or more, on any hosts: each reserves the jobs it sends. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "store_ops.h"
#include "push.h"

/* A process laid out unlike its deployment (buckets, shards) would put
 * jobs where no other process looks: it does not start. */
static int layout_refused(const dq_config *cfg)
{
    char why[512];
    if (store_layout_check(cfg, why, sizeof why) != DQ_MISCONFIGURED)
        return 0; /* fine, or Redis is not there yet: the functions check on use */
    log_error("%s; not starting", why);
    return 1;
}

int main(int argc, char **argv)
{
    static dq_config cfg;
    char err[512];
    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        printf("usage: delayq-push [-c delayq.conf] [--key=value ...]\n"
               "Every key of delayq.conf can also be set as DELAYQ_<KEY> or --key=value.\n");
        return 0;
    }
    if (config_init(&cfg, argc, argv, err, sizeof err) < 0) {
        fprintf(stderr, "delayq-push: %s\n", err);
        return 2;
    }
    log_init("delayq-push", cfg.log_level);
    if (layout_refused(&cfg))
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
    int code = push_run(&cfg, stop_fd);
    close(stop_fd);
    return code;
}
