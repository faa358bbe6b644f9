/* delayq-fcgi: the master process. Binds the FastCGI socket, preforks the
 * workers, replaces any that die, and on SIGTERM/SIGINT stops them gracefully. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/push_guard.h"
#include "fcgi/fcgi_front.h"
#include "fcgi/metrics.h"
#include "fcgi/shard_hints.h"
#include "fcgi/wake_claims.h"
#include "fcgi/worker.h"
#include "protocol/auth.h"
#include "daemon/daemon.h"
#include "store/store_migrate.h"
#include "store/store_ops.h"
#include "store/store_replicas.h"

/* Ready messages remembered at once by the shared wake-up table: far more
 * than arrive while one is being handed out (32 KB). */
#define WAKE_CLAIM_SLOTS 4096
/* Topics whose ready jobs the workers track per shard (shard_hints.h). */
#define HINT_TOPICS 4096

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig)
{
    stop_signal = sig;
}

static void on_child(int sig)
{
    (void)sig; /* only interrupts sigsuspend */
}

static pid_t spawn_worker(const dq_config *cfg, int listen_fd, const worker_shared *shared,
                          const sigset_t *blocked)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    /* Worker: SIGTERM/SIGINT stay blocked; worker_run sigwaits them. */
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive a master killed with -9 */
    signal(SIGCHLD, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    sigprocmask(SIG_SETMASK, blocked, NULL);
    exit(worker_run(cfg, listen_fd, shared));
}

/* Reads the configuration; a tokens file or push_allow that does not parse
 * stops start-up here, not in each worker. *migrate: --migrate was given.
 * Returns 0, or the exit status (after --help: -1, exit 0). */
static int configure(dq_config *cfg, int argc, char **argv, int *migrate)
{
    char err[512];
    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        printf("usage: delayq-fcgi [--migrate] [-c delayq.conf] [--key=value ...]\n"
               "Every key of delayq.conf can also be set as DELAYQ_<KEY> or --key=value.\n"
               "--migrate: convert the deployment's data of an older stored layout, then exit\n"
               "(docs/OPERATIONS.md, \"Upgrading without losing jobs\").\n");
        return -1;
    }
    *migrate = argc > 1 && strcmp(argv[1], "--migrate") == 0;
    if (*migrate) {
        argv[1] = argv[0];
        argc--;
        argv++;
    }
    if (config_init(cfg, argc, argv, err, sizeof err) < 0) {
        fprintf(stderr, "delayq-fcgi: %s\n", err);
        return 2;
    }
    log_init("delayq-fcgi", cfg->log_level);
    if (cfg->auth_file[0]) {
        dq_auth *auth = auth_load(cfg->auth_file, err, sizeof err);
        if (!auth) {
            fprintf(stderr, "delayq-fcgi: %s\n", err);
            return 2;
        }
        auth_free(auth);
    }
    dq_allow *allow = guard_allow_parse(cfg->push_allow, err, sizeof err);
    if (!allow) {
        fprintf(stderr, "delayq-fcgi: %s\n", err);
        return 2;
    }
    guard_allow_free(allow);
    return 0;
}

/* Blocks the stop signals and SIGCHLD (sigsuspend waits for them) and
 * installs their handlers. *old gets the mask to wait with, *worker_mask
 * the one workers start with (SIGTERM/SIGINT blocked: they sigwait). */
static void master_signals(sigset_t *old, sigset_t *worker_mask)
{
    sigset_t stop_set;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGTERM);
    sigaddset(&stop_set, SIGINT);
    sigaddset(&stop_set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &stop_set, old);
    *worker_mask = *old;
    sigaddset(worker_mask, SIGTERM);
    sigaddset(worker_mask, SIGINT);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_child;
    sigaction(SIGCHLD, &sa, NULL);
}

/* Until a stop signal: replaces each worker that exits. */
static void supervise(const dq_config *cfg, int listen_fd, const worker_shared *shared,
                      pid_t *workers,
                      const sigset_t *old, const sigset_t *worker_mask)
{
    while (!stop_signal) {
        sigsuspend(old);
        pid_t pid;
        int status;
        while (!stop_signal && (pid = waitpid(-1, &status, WNOHANG)) > 0) {
            for (int i = 0; i < cfg->workers; i++) {
                if (workers[i] != pid)
                    continue;
                log_warn("worker %d exited (%s %d); starting a new one", (int)pid,
                         WIFSIGNALED(status) ? "signal" : "status",
                         WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
                workers[i] = spawn_worker(cfg, listen_fd, shared, worker_mask);
            }
        }
    }
}

/* Stops every worker and waits for it; 1 if one did not exit cleanly. */
static int stop_workers(const dq_config *cfg, const pid_t *workers)
{
    log_info("signal %d: stopping workers", (int)stop_signal);
    for (int i = 0; i < cfg->workers; i++)
        kill(workers[i], SIGTERM);
    int code = 0;
    for (int i = 0; i < cfg->workers; i++) {
        int status;
        if (waitpid(workers[i], &status, 0) == workers[i] &&
            !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
            code = 1;
    }
    return code;
}

int main(int argc, char **argv)
{
    static dq_config cfg;
    int migrate = 0;
    int bad = configure(&cfg, argc, argv, &migrate);
    if (bad)
        return bad < 0 ? 0 : bad;
    if (daemon_layout_settle(&cfg))
        return 1;
    if (migrate) /* after the settling: it learns the shard count */
        return store_migrate_run(&cfg);
    if (cfg.listen[0] == '/')
        unlink(cfg.listen); /* a stale socket of an earlier run */
    int listen_fd = fcgi_listen(&cfg);
    if (listen_fd < 0) {
        log_error("cannot listen on %s: %s", cfg.listen, strerror(errno));
        return 1;
    }
    if (metrics_init() < 0 || replicas_share() < 0) {
        log_error("cannot map shared metrics");
        return 1;
    }
    /* Shared by the workers: each ready message wakes one long-poll per
     * job in all of them together, not in each, and is counted once in the
     * hints, where a job one worker pops is gone for all. */
    worker_shared shared = {wake_claims_new(WAKE_CLAIM_SLOTS), NULL};
    if (cfg.shards > 1)
        shared.hints = hints_new(cfg.shards, HINT_TOPICS);
    if (!shared.claims || (cfg.shards > 1 && !shared.hints)) {
        log_error("cannot map the workers' shared tables");
        return 1;
    }
    sigset_t old, worker_mask;
    master_signals(&old, &worker_mask);
    pid_t *workers = calloc((size_t)cfg.workers, sizeof *workers);
    if (!workers)
        return 1;
    for (int i = 0; i < cfg.workers; i++)
        workers[i] = spawn_worker(&cfg, listen_fd, &shared, &worker_mask);
    log_info("listening on %s with %d workers x %d threads", cfg.listen, cfg.workers, cfg.threads);
    supervise(&cfg, listen_fd, &shared, workers, &old, &worker_mask);
    int code = stop_workers(&cfg, workers);
    close(listen_fd);
    if (cfg.listen[0] == '/')
        unlink(cfg.listen);
    free(workers);
    wake_claims_free(shared.claims);
    hints_free(shared.hints);
    log_info("stopped");
    return code;
}
