/* daemon: shared start-up of the delayq processes (see daemon.h). */
#include "daemon.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "log.h"
#include "store_ops.h"

int daemon_layout_refused(const dq_config *cfg)
{
    char why[512];
    if (store_layout_check(cfg, why, sizeof why) != DQ_MISCONFIGURED)
        return 0;
    log_error("%s; not starting", why);
    return 1;
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
    if (daemon_layout_refused(&cfg))
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
