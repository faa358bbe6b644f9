/* metrics: lock-free shared counters for requests. */
#include "fcgi/metrics.h"

#include <stdint.h>

#include "common/util.h"

static const double bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                0.1,    0.25,  0.5,    1,     2.5,  5,    10, 30, 60};
#define NBOUNDS (sizeof bounds / sizeof bounds[0])
#define NCMD (CMD_COUNT + 1) /* the last slot counts requests with no command */

typedef struct {
    uint64_t requests[NCMD][DQ_STATUS_COUNT];
    uint64_t buckets[NCMD][DQ_STATUS_COUNT][NBOUNDS + 1]; /* per bound; last = +Inf */
    uint64_t sum_us[NCMD][DQ_STATUS_COUNT];
} shared_metrics;

static shared_metrics *m;

int metrics_init(void)
{
    m = util_shared_alloc(sizeof *m);
    return m ? 0 : -1;
}

void metrics_observe(dq_command cmd, dq_status st, double seconds)
{
    if (!m)
        return;
    size_t b = 0;
    while (b < NBOUNDS && seconds > bounds[b])
        b++;
    __atomic_add_fetch(&m->requests[cmd][st], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&m->buckets[cmd][st][b], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&m->sum_us[cmd][st], (uint64_t)(seconds * 1e6), __ATOMIC_RELAXED);
}

static uint64_t load(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* Each bucket is read once, and every line is computed from those counts:
 * other workers observe requests while a scrape renders, and a bucket read
 * again after +Inf was summed could exceed +Inf. (_sum is read apart and may
 * include a request or two more than the buckets: Prometheus allows that.) */
static void render_histogram(dq_buf *out, const char *cmd, const char *code,
                             const uint64_t *buckets, const uint64_t *sum_us)
{
    uint64_t counts[NBOUNDS + 1], total = 0;
    for (size_t b = 0; b <= NBOUNDS; b++) {
        counts[b] = load(&buckets[b]);
        total += counts[b];
    }
    if (!total)
        return;
    uint64_t cum = 0;
    for (size_t b = 0; b < NBOUNDS; b++) {
        cum += counts[b];
        buf_printf(out,
                   "delayq_request_duration_seconds_bucket{command=\"%s\",code=\"%s\",le=\"%g\"} %llu\n",
                   cmd, code, bounds[b], (unsigned long long)cum);
    }
    buf_printf(out,
               "delayq_request_duration_seconds_bucket{command=\"%s\",code=\"%s\",le=\"+Inf\"} %llu\n",
               cmd, code, (unsigned long long)total);
    buf_printf(out, "delayq_request_duration_seconds_sum{command=\"%s\",code=\"%s\"} %.6f\n", cmd,
               code, (double)load(sum_us) / 1e6);
    buf_printf(out, "delayq_request_duration_seconds_count{command=\"%s\",code=\"%s\"} %llu\n",
               cmd, code, (unsigned long long)total);
}

void metrics_render_requests(dq_buf *out)
{
    if (!m)
        return;
    buf_puts(out, "# HELP delayq_requests_total Requests answered, by command and code.\n"
                  "# TYPE delayq_requests_total counter\n");
    for (int c = 0; c < NCMD; c++) {
        for (int s = 0; s < DQ_STATUS_COUNT; s++) {
            uint64_t n = load(&m->requests[c][s]);
            if (n)
                buf_printf(out, "delayq_requests_total{command=\"%s\",code=\"%s\"} %llu\n",
                           command_name((dq_command)c), status_code((dq_status)s),
                           (unsigned long long)n);
        }
    }
    buf_puts(out, "# HELP delayq_request_duration_seconds Time to answer a request.\n"
                  "# TYPE delayq_request_duration_seconds histogram\n");
    for (int c = 0; c < NCMD; c++) {
        for (int s = 0; s < DQ_STATUS_COUNT; s++)
            render_histogram(out, command_name((dq_command)c), status_code((dq_status)s),
                             m->buckets[c][s], &m->sum_us[c][s]);
    }
}
