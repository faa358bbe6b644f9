/* Unit tests for src/fcgi/metrics.c: the request histogram a scrape
 * renders is one consistent snapshot (buckets never decrease with `le`, none
 * exceeds +Inf, _count is +Inf) while another process observes requests
 * into the same shared counters, as delayq-fcgi's workers do. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fcgi/metrics.h"

#define BUCKET "delayq_request_duration_seconds_bucket{"
#define COUNT "delayq_request_duration_seconds_count{"
#define SCRAPES 20000

static unsigned long long value_of(const char *line)
{
    return strtoull(strrchr(line, ' ') + 1, NULL, 10);
}

/* Checks every histogram of one scrape; returns the number of bucket
 * lines read. */
static int check_scrape(char *text)
{
    unsigned long long before = 0, inf = 0;
    int buckets = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, BUCKET, strlen(BUCKET)) == 0) {
            unsigned long long v = value_of(line);
            if (v < before)
                fail_msg("a bucket below the one before it: %s (before: %llu)", line, before);
            before = v;
            buckets++;
            if (strstr(line, "le=\"+Inf\"")) { /* the last line of one histogram */
                inf = v;
                before = 0;
            }
        } else if (strncmp(line, COUNT, strlen(COUNT)) == 0 && value_of(line) != inf) {
            fail_msg("_count is not +Inf (%llu): %s", inf, line);
        }
    }
    return buckets;
}

/* Until the child's observations show in a scrape: from then on it runs
 * beside the scrapes. */
static void wait_for_observations(dq_buf *out)
{
    for (int i = 0; i < 10000; i++) {
        buf_reset(out);
        metrics_render_requests(out);
        const char *count = strstr(out->data, COUNT);
        if (count && strtoull(strchr(count, ' ') + 1, NULL, 10) > 1000)
            return;
        usleep(1000);
    }
    fail_msg("the child observed nothing within 10 s");
}

/* While a child observes fast requests (the lowest bucket) without pause,
 * every scrape must be consistent. Reading the buckets twice (+Inf from a
 * first pass, each `le` from a second) fails within a few scrapes here. */
static void test_scrape_is_a_snapshot_under_load(void **state)
{
    (void)state;
    assert_int_equal(metrics_init(), 0);
    metrics_observe(CMD_COUNT, DQ_OK, 0.0); /* so the first scrape has a histogram */
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        for (;;)
            metrics_observe(CMD_COUNT, DQ_OK, 0.0);
    }
    dq_buf out;
    buf_init(&out);
    wait_for_observations(&out);
    int lines = 0;
    for (int i = 0; i < SCRAPES; i++) {
        buf_reset(&out);
        metrics_render_requests(&out);
        lines += check_scrape(out.data);
    }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    buf_free(&out);
    assert_true(lines >= SCRAPES * 17); /* each scrape had the histogram's 17 buckets */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scrape_is_a_snapshot_under_load),
    };
    return cmocka_run_group_tests_name("metrics", tests, NULL, NULL);
}
