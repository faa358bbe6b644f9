/* Unit tests for src/common/config.c: defaults, the key table, delayq.conf files,
 * DELAYQ_<KEY> environment overrides, --key=value flags, and the shipped
 * delayq.conf (found through DELAYQ_SRC_DIR, which `make check` sets). */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/config.h"
#include "common/util.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

static size_t nkeys(void)
{
    size_t n = 0;
    while (config_key_name(n))
        n++;
    return n;
}

static void env_name(const char *key, char *out, size_t outlen)
{
    snprintf(out, outlen, "DELAYQ_%s", key);
    for (char *p = out; *p; p++)
        *p = (char)toupper((unsigned char)*p);
}

/* No DELAYQ_<KEY> or DELAYQ_CONFIG leaks into (or out of) a test. */
static void clear_env(void)
{
    char var[128];
    unsetenv("DELAYQ_CONFIG");
    for (size_t i = 0; config_key_name(i); i++) {
        env_name(config_key_name(i), var, sizeof var);
        unsetenv(var);
    }
}

static char tmp_path[64];

static int setup(void **state)
{
    (void)state;
    clear_env();
    tmp_path[0] = '\0';
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    clear_env();
    if (tmp_path[0])
        unlink(tmp_path);
    tmp_path[0] = '\0';
    return 0;
}

/* Writes text to a fresh temporary file; the teardown removes it. */
static const char *write_temp(const char *text)
{
    snprintf(tmp_path, sizeof tmp_path, "/tmp/delayq-test-config-XXXXXX");
    int fd = mkstemp(tmp_path);
    assert_true(fd >= 0);
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    close(fd);
    return tmp_path;
}

static void expect_contains(const char *err, const char *want)
{
    if (!strstr(err, want))
        fail_msg("error \"%s\" does not mention \"%s\"", err, want);
}

/* config_set must fail, name the key in its error, and leave cfg as it was. */
static void set_fails(const char *key, const char *value)
{
    dq_config cfg, before;
    char err[512] = "";
    config_defaults(&cfg);
    before = cfg;
    if (config_set(&cfg, key, value, err, sizeof err) != -1)
        fail_msg("config_set(%s, \"%s\") was accepted", key, value);
    char quoted[160];
    snprintf(quoted, sizeof quoted, "'%s'", key);
    expect_contains(err, quoted);
    assert_memory_equal(&cfg, &before, sizeof cfg);
}

static void set_ok(dq_config *cfg, const char *key, const char *value)
{
    char err[512] = "";
    if (config_set(cfg, key, value, err, sizeof err) != 0)
        fail_msg("config_set(%s, \"%s\") failed: %s", key, value, err);
}

/* Field-by-field equality (strings compared as strings, not as buffers). */
static void expect_cfg_equal(const dq_config *a, const dq_config *b)
{
#define S(f) assert_string_equal(a->f, b->f)
#define I(f) assert_int_equal(a->f, b->f)
    S(listen); I(workers); I(threads); I(backlog); S(redis_host); I(redis_port);
    S(redis_socket); S(redis_username); S(redis_password); I(redis_db);
    I(redis_connect_timeout_ms); I(redis_timeout_ms); S(prefix); I(buckets); I(max_body);
    I(max_request); I(default_ttr); I(timer_lease_ms); I(timer_batch); S(log_level);
    I(max_connections); I(topic_retention_s); I(metrics_max_topics);
    S(push_secret); S(push_allow); I(push_concurrency); I(push_per_host); I(push_response_max);
    I(push_grace_ms); I(group_commit); I(longpoll_recheck_ms); S(redis_cluster);
    S(redis_sentinels); S(redis_sentinel_master); S(redis_sentinel_username);
    S(redis_sentinel_password); I(redis_wait_replicas); I(redis_wait_timeout_ms); I(shards);
    S(timer_id); S(auth_file);
#undef S
#undef I
}

/* ------------------------------------------------------------------------ */
/* Defaults and the key table                                                */
/* ------------------------------------------------------------------------ */

static void test_defaults(void **state)
{
    (void)state;
    dq_config cfg;
    memset(&cfg, 0x5a, sizeof cfg);
    config_defaults(&cfg);
    assert_string_equal(cfg.listen, "127.0.0.1:9000");
    assert_int_equal(cfg.workers, 4);
    assert_int_equal(cfg.threads, 32);
    assert_int_equal(cfg.longpoll_recheck_ms, 1000);
    assert_int_equal(cfg.backlog, 1024);
    assert_string_equal(cfg.redis_host, "127.0.0.1");
    assert_int_equal(cfg.redis_port, 6379);
    assert_string_equal(cfg.redis_socket, "");
    assert_string_equal(cfg.redis_username, "");
    assert_string_equal(cfg.redis_password, "");
    assert_string_equal(cfg.push_secret, "");
    assert_string_equal(cfg.push_allow, "*");
    assert_int_equal(cfg.push_concurrency, 64);
    assert_int_equal(cfg.push_per_host, 8);
    assert_int_equal(cfg.push_response_max, 16384);
    assert_int_equal(cfg.push_grace_ms, 30000);
    assert_int_equal(cfg.redis_db, 0);
    assert_int_equal(cfg.redis_connect_timeout_ms, 500);
    assert_int_equal(cfg.redis_timeout_ms, 2000);
    assert_string_equal(cfg.prefix, "dq");
    assert_int_equal(cfg.buckets, 16);
    assert_int_equal(cfg.max_body, 65536);
    assert_int_equal(cfg.max_request, 1048576);
    assert_int_equal(cfg.default_ttr, 60);
    assert_int_equal(cfg.timer_lease_ms, 5000);
    assert_int_equal(cfg.timer_batch, 1000);
    assert_int_equal(cfg.max_connections, 10000);
    assert_int_equal(cfg.topic_retention_s, 3600);
    assert_int_equal(cfg.metrics_max_topics, 1000);
    assert_string_equal(cfg.log_level, "info");
    assert_string_equal(cfg.auth_file, "");
    assert_string_equal(cfg.redis_cluster, "");
    assert_string_equal(cfg.redis_sentinels, "");
    assert_int_equal(cfg.shards, 0); /* chosen at start */
    assert_int_equal(cfg.redis_wait_replicas, 0);
    assert_int_equal(cfg.redis_wait_timeout_ms, 1000);
}

static void test_key_table(void **state)
{
    (void)state;
    static const char *const expected[] = {
        "listen", "workers", "threads", "group_commit", "longpoll_recheck_ms", "max_connections", "backlog", "redis_host", "redis_port",
        "redis_socket", "redis_username", "redis_password", "redis_db",
        "redis_connect_timeout_ms", "redis_timeout_ms", "redis_cluster", "redis_sentinels",
        "redis_sentinel_master", "redis_sentinel_username", "redis_sentinel_password",
        "redis_wait_replicas", "redis_wait_timeout_ms", "prefix", "buckets", "shards", "max_body",
        "max_request", "default_ttr", "timer_lease_ms", "timer_batch", "timer_id", "topic_retention_s",
        "metrics_max_topics", "log_level", "auth_file", "push_secret", "push_allow",
        "push_concurrency", "push_per_host", "push_response_max", "push_grace_ms",
    };
    size_t n = sizeof expected / sizeof expected[0];
    assert_int_equal(nkeys(), n);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(config_key_name(i), expected[i]);
        assert_non_null(config_key_default(i));
    }
    assert_null(config_key_name(n));
    assert_null(config_key_default(n));
    assert_null(config_key_name((size_t)-1));

    /* Every default is accepted by config_set and is what config_defaults sets. */
    dq_config a, b;
    config_defaults(&a);
    memset(&b, 0, sizeof b);
    for (size_t i = 0; i < n; i++)
        set_ok(&b, config_key_name(i), config_key_default(i));
    expect_cfg_equal(&a, &b);
}

/* ------------------------------------------------------------------------ */
/* config_set                                                                */
/* ------------------------------------------------------------------------ */

static void test_set_ints(void **state)
{
    (void)state;
    dq_config cfg;
    config_defaults(&cfg);
    set_ok(&cfg, "workers", "8");
    assert_int_equal(cfg.workers, 8);
    set_ok(&cfg, "workers", "1");
    assert_int_equal(cfg.workers, 1);
    set_ok(&cfg, "workers", "256");
    assert_int_equal(cfg.workers, 256);
    set_ok(&cfg, "redis_port", "65535");
    assert_int_equal(cfg.redis_port, 65535);
    set_ok(&cfg, "redis_db", "0");
    assert_int_equal(cfg.redis_db, 0);
    set_ok(&cfg, "max_request", "1024");
    assert_int_equal(cfg.max_request, 1024);
    set_ok(&cfg, "timer_lease_ms", "300");
    assert_int_equal(cfg.timer_lease_ms, 300);
    set_ok(&cfg, "default_ttr", "86400");
    assert_int_equal(cfg.default_ttr, 86400);
}

static void test_set_bad_ints(void **state)
{
    (void)state;
    set_fails("workers", "abc");
    set_fails("workers", "");
    set_fails("workers", "4x");
    set_fails("workers", "1.5");
    set_fails("workers", "0x10");
    set_fails("workers", "99999999999999999999");
    set_fails("redis_port", "-1");
    set_fails("threads", "four");
}

static void test_set_out_of_range(void **state)
{
    (void)state;
    set_fails("workers", "0");
    set_fails("workers", "257");
    set_fails("threads", "0");
    set_fails("threads", "1025");
    set_fails("backlog", "65536");
    set_fails("redis_port", "0");
    set_fails("redis_port", "65536");
    set_fails("redis_db", "-1");
    set_fails("redis_connect_timeout_ms", "0");
    set_fails("redis_timeout_ms", "60001");
    set_fails("buckets", "0");
    set_fails("buckets", "4097");
    set_fails("max_body", "0");
    set_fails("max_request", "1023");
    set_fails("default_ttr", "0");
    set_fails("default_ttr", "86401");
    set_fails("timer_lease_ms", "299");
    set_fails("timer_batch", "0");
    set_fails("timer_batch", "100001");
}

static void test_set_unknown_key(void **state)
{
    (void)state;
    set_fails("no_such_key", "1");
    set_fails("Workers", "4");
    set_fails("redis-port", "6379"); /* dashes are a flag spelling only */
    set_fails("", "1");
}

static void test_set_strings(void **state)
{
    (void)state;
    dq_config cfg;
    config_defaults(&cfg);
    set_ok(&cfg, "listen", "/run/delayq/fcgi.sock");
    assert_string_equal(cfg.listen, "/run/delayq/fcgi.sock");
    set_ok(&cfg, "listen", ":9001");
    assert_string_equal(cfg.listen, ":9001");
    set_ok(&cfg, "redis_password", "s3cr=t pass");
    assert_string_equal(cfg.redis_password, "s3cr=t pass");
    set_ok(&cfg, "redis_socket", "");
    assert_string_equal(cfg.redis_socket, "");

    /* The longest value that fits, and one byte more. */
    char v[300];
    memset(v, 'h', 255);
    v[255] = '\0';
    set_ok(&cfg, "redis_host", v);
    assert_int_equal(strlen(cfg.redis_host), 255);
    memset(v, 'h', 256);
    v[256] = '\0';
    set_fails("redis_host", v);
    set_fails("listen", v);
    memset(v, 'u', 128);
    v[128] = '\0';
    set_fails("redis_username", v);

    set_fails("listen", "");
}

static void test_prefix_rule(void **state)
{
    (void)state;
    dq_config cfg;
    config_defaults(&cfg);
    set_ok(&cfg, "prefix", "prod");
    assert_string_equal(cfg.prefix, "prod");
    set_ok(&cfg, "prefix", "my-app:dq_1.x");
    assert_string_equal(cfg.prefix, "my-app:dq_1.x");
    set_ok(&cfg, "prefix", "x");
    assert_string_equal(cfg.prefix, "x");

    char v[80];
    memset(v, 'p', 63);
    v[63] = '\0';
    set_ok(&cfg, "prefix", v);
    assert_int_equal(strlen(cfg.prefix), 63);
    memset(v, 'p', 64);
    v[64] = '\0';
    set_fails("prefix", v);

    set_fails("prefix", "");
    set_fails("prefix", "a b");
    set_fails("prefix", "dq{1}");
    set_fails("prefix", "a/b");
    set_fails("prefix", "a@b");
    set_fails("prefix", "caf\xc3\xa9");
}

static void test_log_level_rule(void **state)
{
    (void)state;
    static const char *const good[] = {"debug", "info", "warn", "error"};
    dq_config cfg;
    config_defaults(&cfg);
    for (size_t i = 0; i < 4; i++) {
        set_ok(&cfg, "log_level", good[i]);
        assert_string_equal(cfg.log_level, good[i]);
    }
    set_fails("log_level", "verbose");
    set_fails("log_level", "INFO");
    set_fails("log_level", "warning");
    set_fails("log_level", "");
    set_fails("log_level", "info ");
}

/* ------------------------------------------------------------------------ */
/* Files                                                                     */
/* ------------------------------------------------------------------------ */

static void test_file_ok(void **state)
{
    (void)state;
    const char *path = write_temp("# a comment\n"
                                  "\n"
                                  "   \t\n"
                                  "workers = 3\n"
                                  "  threads=5\n"
                                  "redis_password = se#cret\n"
                                  "\tlisten\t=\t/tmp/dq.sock\t\n"
                                  "redis_socket =\n"
                                  "   # indented comment = not a key\n"
                                  "prefix = staging\r\n"
                                  "log_level = debug"); /* no final newline */
    dq_config cfg;
    char err[512] = "";
    config_defaults(&cfg);
    set_ok(&cfg, "redis_socket", "/tmp/redis.sock");
    assert_int_equal(config_load_file(&cfg, path, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_int_equal(cfg.workers, 3);
    assert_int_equal(cfg.threads, 5);
    assert_string_equal(cfg.redis_password, "se#cret"); /* '#' inside a value is kept */
    assert_string_equal(cfg.listen, "/tmp/dq.sock");
    assert_string_equal(cfg.redis_socket, "");
    assert_string_equal(cfg.prefix, "staging");
    assert_string_equal(cfg.log_level, "debug");
    /* Untouched keys keep their defaults. */
    assert_int_equal(cfg.backlog, 1024);
    assert_int_equal(cfg.redis_port, 6379);
}

static void expect_file_error(const char *text, const char *line_tag, const char *key)
{
    const char *path = write_temp(text);
    dq_config cfg;
    char err[512] = "";
    char want[128];
    config_defaults(&cfg);
    assert_int_equal(config_load_file(&cfg, path, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s:%s", path, line_tag);
    expect_contains(err, want);
    if (key) {
        snprintf(want, sizeof want, "'%s'", key);
        expect_contains(err, want);
    }
    unlink(tmp_path);
    tmp_path[0] = '\0';
}

static void test_file_bad_lines(void **state)
{
    (void)state;
    expect_file_error("# comment\n\nworkers = 2\nthreads = many\nbacklog = 5\n", "4:", "threads");
    expect_file_error("workers = 0\n", "1:", "workers");
    expect_file_error("# c\n\n\nno_such_key = 1\n", "4:", "no_such_key");
    expect_file_error("prefix = a b\n", "1:", "prefix");
    expect_file_error("log_level = loud\n", "1:", "log_level");
    expect_file_error("workers = 2\njust some words\n", "2:", NULL);
}

static void test_file_missing(void **state)
{
    (void)state;
    dq_config cfg;
    char err[512] = "";
    config_defaults(&cfg);
    assert_int_equal(config_load_file(&cfg, "/nonexistent/delayq-test.conf", err, sizeof err), -1);
    expect_contains(err, "/nonexistent/delayq-test.conf");
}

/* ------------------------------------------------------------------------ */
/* Environment                                                               */
/* ------------------------------------------------------------------------ */

static void test_env_override(void **state)
{
    (void)state;
    dq_config cfg;
    char err[512] = "";
    config_defaults(&cfg);
    setenv("DELAYQ_WORKERS", "7", 1);
    setenv("DELAYQ_REDIS_PORT", "6380", 1);
    setenv("DELAYQ_PREFIX", "envp", 1);
    setenv("DELAYQ_REDIS_CONNECT_TIMEOUT_MS", "750", 1);
    setenv("DELAYQ_REDIS_PASSWORD", "", 1);
    setenv("delayq_threads", "9", 1); /* lower case is not the documented name */
    assert_int_equal(config_load_env(&cfg, err, sizeof err), 0);
    unsetenv("delayq_threads");
    assert_int_equal(cfg.workers, 7);
    assert_int_equal(cfg.redis_port, 6380);
    assert_string_equal(cfg.prefix, "envp");
    assert_int_equal(cfg.redis_connect_timeout_ms, 750);
    assert_string_equal(cfg.redis_password, "");
    assert_int_equal(cfg.threads, 32);
    assert_int_equal(cfg.backlog, 1024);
}

static void test_env_every_key(void **state)
{
    (void)state;
    /* Each key's DELAYQ_<KEY> is read: set each to its default on a zeroed cfg. */
    char var[128];
    for (size_t i = 0; config_key_name(i); i++) {
        env_name(config_key_name(i), var, sizeof var);
        setenv(var, config_key_default(i), 1);
    }
    dq_config cfg, def;
    char err[512] = "";
    memset(&cfg, 0, sizeof cfg);
    config_defaults(&def);
    assert_int_equal(config_load_env(&cfg, err, sizeof err), 0);
    expect_cfg_equal(&cfg, &def);
}

static void test_env_bad(void **state)
{
    (void)state;
    dq_config cfg;
    char err[512] = "";
    config_defaults(&cfg);
    setenv("DELAYQ_BUCKETS", "lots", 1);
    assert_int_equal(config_load_env(&cfg, err, sizeof err), -1);
    expect_contains(err, "DELAYQ_BUCKETS");
    expect_contains(err, "'buckets'");
    assert_int_equal(cfg.buckets, 16);
}

/* ------------------------------------------------------------------------ */
/* config_init: file < environment < flags                                   */
/* ------------------------------------------------------------------------ */

static int init_with(dq_config *cfg, char *err, size_t errlen, int argc, ...)
{
    char *argv[16];
    va_list ap;
    assert_true(argc < 16);
    va_start(ap, argc);
    for (int i = 0; i < argc; i++)
        argv[i] = va_arg(ap, char *);
    va_end(ap);
    argv[argc] = NULL;
    return config_init(cfg, argc, argv, err, errlen);
}

static void test_init_defaults_only(void **state)
{
    (void)state;
    dq_config cfg, def;
    char err[512] = "";
    char prog[] = "delayq-fcgi";
    config_defaults(&def);
    memset(&cfg, 0x5a, sizeof cfg);
    assert_int_equal(init_with(&cfg, err, sizeof err, 1, prog), 0);
    expect_cfg_equal(&cfg, &def);
}

static void test_init_precedence(void **state)
{
    (void)state;
    const char *path = write_temp("workers = 2\nthreads = 3\nbacklog = 5\nredis_port = 1111\n"
                                  "log_level = warn\n");
    char prog[] = "delayq-fcgi", dash_c[] = "-c", file[64];
    char f1[] = "--backlog=11", f2[] = "--redis-port=2222", f3[] = "--redis_db=4";
    snprintf(file, sizeof file, "%s", path);
    setenv("DELAYQ_THREADS", "7", 1);
    setenv("DELAYQ_BACKLOG", "9", 1);
    setenv("DELAYQ_REDIS_PORT", "3333", 1);

    dq_config cfg;
    char err[512] = "";
    assert_int_equal(init_with(&cfg, err, sizeof err, 6, prog, dash_c, file, f1, f2, f3), 0);
    assert_int_equal(cfg.workers, 2);        /* file only */
    assert_int_equal(cfg.threads, 7);        /* env beats file */
    assert_int_equal(cfg.backlog, 11);       /* flag beats env and file */
    assert_int_equal(cfg.redis_port, 2222);  /* --redis-port spelled with dashes */
    assert_int_equal(cfg.redis_db, 4);       /* flag only */
    assert_string_equal(cfg.log_level, "warn");
    assert_int_equal(cfg.buckets, 16);       /* default */
}

static void test_init_config_env_and_c_flag(void **state)
{
    (void)state;
    const char *path = write_temp("workers = 6\n");
    char prog[] = "delayq-timer", dash_c[] = "-c", devnull[] = "/dev/null";
    dq_config cfg;
    char err[512] = "";

    /* DELAYQ_CONFIG names the file when there is no -c. */
    setenv("DELAYQ_CONFIG", path, 1);
    assert_int_equal(init_with(&cfg, err, sizeof err, 1, prog), 0);
    assert_int_equal(cfg.workers, 6);

    /* -c wins over DELAYQ_CONFIG. */
    assert_int_equal(init_with(&cfg, err, sizeof err, 3, prog, dash_c, devnull), 0);
    assert_int_equal(cfg.workers, 4);

    /* A file that cannot be read stops startup. */
    setenv("DELAYQ_CONFIG", "/nonexistent/delayq.conf", 1);
    assert_int_equal(init_with(&cfg, err, sizeof err, 1, prog), -1);
    expect_contains(err, "/nonexistent/delayq.conf");
}

static void test_init_bad_flags(void **state)
{
    (void)state;
    char prog[] = "delayq-fcgi";
    char a1[] = "--workers", a2[] = "workers=2", a3[] = "--no-such-key=1", a4[] = "--workers=0",
         a5[] = "-workers=2", a6[] = "--log-level=chatty";
    dq_config cfg;
    char err[512];

    err[0] = '\0';
    assert_int_equal(init_with(&cfg, err, sizeof err, 2, prog, a1), -1);
    expect_contains(err, "--workers");
    err[0] = '\0';
    assert_int_equal(init_with(&cfg, err, sizeof err, 2, prog, a2), -1);
    expect_contains(err, "workers=2");
    err[0] = '\0';
    assert_int_equal(init_with(&cfg, err, sizeof err, 2, prog, a3), -1);
    expect_contains(err, "no_such_key");
    err[0] = '\0';
    assert_int_equal(init_with(&cfg, err, sizeof err, 2, prog, a4), -1);
    expect_contains(err, "'workers'");
    err[0] = '\0';
    assert_int_equal(init_with(&cfg, err, sizeof err, 2, prog, a5), -1);
    expect_contains(err, "-workers=2");
    err[0] = '\0';
    assert_int_equal(init_with(&cfg, err, sizeof err, 2, prog, a6), -1);
    expect_contains(err, "'log_level'");

    /* A bad environment value stops startup too. */
    setenv("DELAYQ_TIMER_BATCH", "0", 1);
    err[0] = '\0';
    assert_int_equal(init_with(&cfg, err, sizeof err, 1, prog), -1);
    expect_contains(err, "DELAYQ_TIMER_BATCH");
}

static void test_init_flag_value_with_equals(void **state)
{
    (void)state;
    char prog[] = "delayq-fcgi", a1[] = "--redis-password=a=b=c", a2[] = "--listen=:9100";
    dq_config cfg;
    char err[512] = "";
    assert_int_equal(init_with(&cfg, err, sizeof err, 3, prog, a1, a2), 0);
    assert_string_equal(cfg.redis_password, "a=b=c");
    assert_string_equal(cfg.listen, ":9100");
}

/* ------------------------------------------------------------------------ */
/* The shipped delayq.conf                                                   */
/* ------------------------------------------------------------------------ */

static void shipped_path(char *out, size_t outlen)
{
    const char *dir = getenv("DELAYQ_SRC_DIR");
    if (!dir || !*dir)
        dir = ".";
    snprintf(out, outlen, "%s/delayq.conf", dir);
}

/* ------------------------------------------------------------------------ */
/* Redis Cluster seeds and sentinels                                         */
/* ------------------------------------------------------------------------ */

static void test_addr_list(void **state)
{
    (void)state;
    dq_addr a[CONFIG_MAX_ADDRS];
    char err[256] = "";
    assert_int_equal(config_addr_list("redis_cluster", "10.0.0.1:7000, redis-b:7001 [::1]:7002",
                                      a, CONFIG_MAX_ADDRS, err, sizeof err), 3);
    assert_string_equal(a[0].host, "10.0.0.1");
    assert_int_equal(a[0].port, 7000);
    assert_string_equal(a[1].host, "redis-b");
    assert_int_equal(a[1].port, 7001);
    assert_string_equal(a[2].host, "::1");
    assert_int_equal(a[2].port, 7002);
    assert_int_equal(config_addr_list("redis_cluster", "", a, CONFIG_MAX_ADDRS, err, sizeof err),
                     0);
    static const char *const bad[] = {"host", "host:", ":7000", "host:0", "host:65536",
                                      "host:7x", "[::1]7000", "[::1", "h/x:1", "host:123456"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        if (config_addr_list("redis_sentinels", bad[i], a, CONFIG_MAX_ADDRS, err, sizeof err) != -1)
            fail_msg("'%s' was accepted", bad[i]);
        expect_contains(err, "'redis_sentinels'");
        expect_contains(err, "host:port");
    }
    char many[1024] = "";
    for (int i = 0; i <= CONFIG_MAX_ADDRS; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "h:%d,", 7000 + i);
    assert_int_equal(config_addr_list("redis_cluster", many, a, CONFIG_MAX_ADDRS, err, sizeof err),
                     -1);
    expect_contains(err, "at most");
    set_fails("redis_cluster", "not-an-address");
    set_fails("redis_sentinels", "a:1,b");
}

static void test_init_redis_modes_exclude_each_other(void **state)
{
    (void)state;
    dq_config cfg;
    char err[512] = "";
    assert_int_equal(init_with(&cfg, err, sizeof err, 4, "x", "--redis-cluster=127.0.0.1:7000",
                               "--redis-sentinels=127.0.0.1:26379", "--redis-sentinel-master=m"),
                     -1);
    expect_contains(err, "'redis_cluster' and 'redis_sentinels'");
    assert_int_equal(init_with(&cfg, err, sizeof err, 2, "x", "--redis-sentinels=127.0.0.1:26379"),
                     -1);
    expect_contains(err, "'redis_sentinel_master'");
    assert_int_equal(init_with(&cfg, err, sizeof err, 3, "x", "--redis-cluster=127.0.0.1:7000",
                               "--redis-db=3"),
                     -1);
    expect_contains(err, "'redis_db'");
    assert_int_equal(init_with(&cfg, err, sizeof err, 5, "x",
                               "--redis-sentinels=127.0.0.1:26379,127.0.0.1:26380",
                               "--redis-sentinel-master=m", "--shards=8",
                               "--redis-wait-replicas=1"),
                     0);
    assert_int_equal(cfg.shards, 8);
    assert_int_equal(cfg.redis_wait_replicas, 1);
}

static void test_shipped_conf_lists_every_key(void **state)
{
    (void)state;
    char path[4096];
    shipped_path(path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s (set DELAYQ_SRC_DIR to the source tree)", path);

    size_t n = nkeys();
    int *seen = calloc(n, sizeof *seen);
    assert_non_null(seen);
    char line[2048];
    int lineno = 0, prev_comment = 0;
    size_t next = 0; /* keys must come in table order */
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *s = util_trim(line);
        if (*s == '#') {
            prev_comment = 1;
            continue;
        }
        if (*s == '\0') {
            prev_comment = 0;
            continue;
        }
        char *eq = strchr(s, '=');
        if (!eq)
            fail_msg("%s:%d: not a 'key = value' line", path, lineno);
        *eq = '\0';
        char *key = util_trim(s), *value = util_trim(eq + 1);
        size_t i;
        for (i = 0; i < n; i++) {
            if (strcmp(config_key_name(i), key) == 0)
                break;
        }
        if (i == n)
            fail_msg("%s:%d: key '%s' is not in the config table", path, lineno, key);
        if (seen[i])
            fail_msg("%s:%d: key '%s' appears twice", path, lineno, key);
        if (i != next)
            fail_msg("%s:%d: key '%s' is out of the table's order (expected '%s')", path, lineno,
                     key, config_key_name(next));
        if (strcmp(value, config_key_default(i)) != 0)
            fail_msg("%s:%d: key '%s' is '%s', but its default is '%s'", path, lineno, key, value,
                     config_key_default(i));
        if (!prev_comment)
            fail_msg("%s:%d: key '%s' has no '# ...' comment line above it", path, lineno, key);
        seen[i] = 1;
        next++;
        prev_comment = 0;
    }
    fclose(f);
    for (size_t i = 0; i < n; i++) {
        if (!seen[i])
            fail_msg("%s: key '%s' (default '%s') is missing", path, config_key_name(i),
                     config_key_default(i));
    }
    free(seen);
}

static void test_shipped_conf_loads(void **state)
{
    (void)state;
    char path[4096];
    shipped_path(path, sizeof path);
    dq_config cfg, def;
    char err[512] = "";
    config_defaults(&def);
    /* Start from non-defaults: loading the file must bring every key back. */
    memset(&cfg, 0, sizeof cfg);
    for (size_t i = 0; config_key_name(i); i++) {
        const char *k = config_key_name(i);
        if (strcmp(k, "log_level") == 0)
            set_ok(&cfg, k, "error");
        else if (strcmp(k, "prefix") == 0)
            set_ok(&cfg, k, "other");
        else if (strcmp(k, "listen") == 0)
            set_ok(&cfg, k, "/x.sock");
        else if (strcmp(k, "max_request") == 0)
            set_ok(&cfg, k, "2048");
        else if (strcmp(k, "timer_lease_ms") == 0 || strcmp(k, "push_grace_ms") == 0 ||
                 strcmp(k, "longpoll_recheck_ms") == 0)
            set_ok(&cfg, k, "301");
        else if (strcmp(k, "redis_cluster") == 0 || strcmp(k, "redis_sentinels") == 0)
            set_ok(&cfg, k, "127.0.0.1:1");
        else
            set_ok(&cfg, k, strcmp(config_key_default(i), "") == 0 ? "x"
                            : strcmp(config_key_default(i), "1") == 0 ? "2" : "1");
    }
    if (config_load_file(&cfg, path, err, sizeof err) != 0)
        fail_msg("%s does not load: %s", path, err);
    expect_cfg_equal(&cfg, &def);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_table, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_ints, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_bad_ints, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_out_of_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_unknown_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_strings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prefix_rule, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_level_rule, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_ok, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_bad_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_missing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_override, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_every_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_bad, setup, teardown),
        cmocka_unit_test_setup_teardown(test_init_defaults_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_init_precedence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_init_config_env_and_c_flag, setup, teardown),
        cmocka_unit_test_setup_teardown(test_init_bad_flags, setup, teardown),
        cmocka_unit_test_setup_teardown(test_init_flag_value_with_equals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shipped_conf_lists_every_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shipped_conf_loads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_addr_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_init_redis_modes_exclude_each_other, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
