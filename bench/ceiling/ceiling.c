/* ceiling-fcgi: the least a delayq-like FastCGI backend can do per request.
 *
 * Same process shape as delayq-fcgi (a master that forks --workers
 * processes, each running --threads threads that call FCGX_Accept_r on the
 * shared socket, one Redis connection per thread). Per request: read the
 * body, run one EVALSHA of a trivial script, answer a small JSON object with
 * a Content-Length. No parsing, no validation: the upper bound of what
 * delayq's single-job add and pop can reach behind the same nginx.
 *
 * usage: ceiling-fcgi --listen /abs/path.sock [--workers 4] [--threads 32]
 *                     [--redis-port 6379 | --redis-socket /path]
 * Stops on SIGTERM (the master kills its workers).
 */
#include <fcgiapp.h>
#include <hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *SCRIPT = "return ARGV[1]";
static int listen_fd;
static int redis_port = 6379;
static const char *redis_socket;
static char sha[41];

static redisContext *connect_redis(void)
{
    redisContext *c = redis_socket ? redisConnectUnix(redis_socket)
                                   : redisConnect("127.0.0.1", redis_port);
    if (!c || c->err) {
        fprintf(stderr, "ceiling-fcgi: redis: %s\n", c ? c->errstr : "oom");
        exit(1);
    }
    redisReply *r = redisCommand(c, "SCRIPT LOAD %s", SCRIPT);
    if (!r || r->type != REDIS_REPLY_STRING) {
        fprintf(stderr, "ceiling-fcgi: SCRIPT LOAD failed\n");
        exit(1);
    }
    memcpy(sha, r->str, 41);
    freeReplyObject(r);
    return c;
}

static void *thread_main(void *arg)
{
    (void)arg;
    redisContext *rc = connect_redis();
    FCGX_Request fr;
    FCGX_InitRequest(&fr, listen_fd, 0);
    char body[1 << 16];
    while (FCGX_Accept_r(&fr) >= 0) {
        while (FCGX_GetStr(body, sizeof body, fr.in) > 0) /* read the whole body */
            ;
        const char *argv[5] = {"EVALSHA", sha, "0", "{dq}", "x"};
        size_t lens[5] = {7, 40, 1, 4, 1};
        redisReply *r = redisCommandArgv(rc, 5, argv, lens);
        const char *answer = r && r->type == REDIS_REPLY_STRING ? "{\"success\":true}"
                                                                : "{\"success\":false}";
        if (!r) {
            redisFree(rc);
            rc = connect_redis();
        }
        freeReplyObject(r);
        char head[160];
        int hn = snprintf(head, sizeof head,
                          "Status: 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                          strlen(answer));
        FCGX_PutStr(head, hn, fr.out);
        FCGX_PutStr(answer, (int)strlen(answer), fr.out);
        FCGX_Finish_r(&fr);
    }
    return NULL;
}

static void run_worker(int threads)
{
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < threads; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, thread_main, NULL) != 0)
            exit(1);
        pthread_detach(t);
    }
    pause();
    exit(0);
}

int main(int argc, char **argv)
{
    const char *listen = NULL;
    int workers = 4, threads = 32;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--listen"))
            listen = argv[i + 1];
        else if (!strcmp(argv[i], "--workers"))
            workers = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--redis-port"))
            redis_port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--redis-socket"))
            redis_socket = argv[i + 1];
        else {
            fprintf(stderr, "ceiling-fcgi: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!listen || workers < 1 || workers > 256 || threads < 1 || threads > 1024) {
        fprintf(stderr, "usage: ceiling-fcgi --listen PATH [--workers N] [--threads N] "
                        "[--redis-port P | --redis-socket PATH]\n");
        return 2;
    }
    if (FCGX_Init() != 0)
        return 1;
    unlink(listen);
    listen_fd = FCGX_OpenSocket(listen, 1024);
    if (listen_fd < 0)
        return 1;
    chmod(listen, 0666);
    pid_t *kids = calloc((size_t)workers, sizeof *kids);
    for (int i = 0; i < workers; i++) {
        kids[i] = fork();
        if (kids[i] == 0)
            run_worker(threads);
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    int sig;
    sigwait(&set, &sig);
    for (int i = 0; i < workers; i++)
        kill(kids[i], SIGTERM);
    for (int i = 0; i < workers; i++)
        waitpid(kids[i], NULL, 0);
    unlink(listen);
    return 0;
}
