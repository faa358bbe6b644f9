/* prometheus: the deployment's figures on /metrics in Prometheus text
 * format (jobs by topic and state, counters, the gauges operators alert
 * on, shard spread and stored layout); metrics.c adds the request series. */
#include "fcgi/prometheus.h"

#include <string.h>

#define TIMER_LAG_RECENT_MS 60000 /* a timer that moved nothing for longer shows no lag */

/* Prometheus label values: backslash, quote and newline escaped. Topics
 * cannot hold them today; the escaping keeps the format right regardless. */
static void put_label(dq_buf *out, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' || s[i] == '"')
            buf_putc(out, '\\');
        if (s[i] == '\n') {
            buf_puts(out, "\\n");
            continue;
        }
        buf_putc(out, s[i]);
    }
}

/* The figures an operator alerts on: per topic whether it is paused and
 * the age of its oldest ready job; for the deployment the oldest overdue
 * bucket entry (timer lag as jobs see it), the oldest ready push job, and
 * each live timer's lateness per shard. */
static void put_alert_metrics(dq_buf *out, const store_stats *st, size_t shown,
                              const store_lag *lag)
{
    buf_puts(out, "# HELP delayq_topic_paused 1 while the topic is paused (pause/resume).\n"
                  "# TYPE delayq_topic_paused gauge\n");
    for (size_t i = 0; i < shown; i++) {
        buf_puts(out, "delayq_topic_paused{topic=\"");
        put_label(out, st->topics[i].name, st->topics[i].name_len);
        buf_printf(out, "\"} %d\n", st->topics[i].paused ? 1 : 0);
    }
    buf_puts(out, "# HELP delayq_topics_paused Paused topics.\n# TYPE delayq_topics_paused gauge\n");
    buf_printf(out, "delayq_topics_paused %lld\n", (long long)lag->paused_topics);
    buf_puts(out, "# HELP delayq_oldest_ready_age_seconds Age of the topic's oldest ready job "
                  "(since it became ready; 0 when none).\n"
                  "# TYPE delayq_oldest_ready_age_seconds gauge\n");
    for (size_t i = 0; i < shown; i++) {
        int64_t age = st->topics[i].ready_age_ms;
        buf_puts(out, "delayq_oldest_ready_age_seconds{topic=\"");
        put_label(out, st->topics[i].name, st->topics[i].name_len);
        buf_printf(out, "\"} %.3f\n", age > 0 ? (double)age / 1000 : 0.0);
    }
    buf_puts(out, "# HELP delayq_push_oldest_ready_age_seconds Age of the oldest ready push job "
                  "waiting for delayq-push, all topics (0 when none).\n"
                  "# TYPE delayq_push_oldest_ready_age_seconds gauge\n");
    buf_printf(out, "delayq_push_oldest_ready_age_seconds %.3f\n",
               lag->push_age_ms > 0 ? (double)lag->push_age_ms / 1000 : 0.0);
    buf_puts(out, "# HELP delayq_oldest_overdue_seconds How long the oldest delayed job (or TTR "
                  "deadline) past its due time has waited for a timer, all topics (0 when none).\n"
                  "# TYPE delayq_oldest_overdue_seconds gauge\n");
    buf_printf(out, "delayq_oldest_overdue_seconds %.3f\n", (double)lag->overdue_ms / 1000);
    buf_puts(out, "# HELP delayq_timer_lag_seconds A live timer's lateness behind due times in a "
                  "shard: the largest of its moves within a second, 0 if it moved nothing "
                  "in the last minute.\n# TYPE delayq_timer_lag_seconds gauge\n");
    for (size_t i = 0; i < lag->ntimers; i++) {
        const store_timer_lag *l = &lag->timers[i];
        buf_puts(out, "delayq_timer_lag_seconds{timer=\"");
        put_label(out, l->timer, strlen(l->timer));
        buf_printf(out, "\",shard=\"%d\"} %.3f\n", l->shard,
                   l->age_ms <= TIMER_LAG_RECENT_MS ? (double)l->late_ms / 1000 : 0.0);
    }
}

/* How the deployment spreads over a Redis Cluster's masters: a master that
 * serves none of its shards holds none of its jobs. */
static void put_spread_metrics(dq_buf *out, const prometheus_figures *f)
{
    buf_printf(out, "# HELP delayq_shards The deployment's shards.\n# TYPE delayq_shards gauge\n"
                    "delayq_shards %d\n", f->shards);
    buf_printf(out, "# HELP delayq_cluster_masters Masters of the Redis Cluster (0 without "
                       "one).\n# TYPE delayq_cluster_masters gauge\ndelayq_cluster_masters %d\n",
               f->masters);
    buf_printf(out, "# HELP delayq_cluster_masters_unused Cluster masters serving none of the "
                       "deployment's shards: they hold none of its jobs.\n"
                       "# TYPE delayq_cluster_masters_unused gauge\n"
                       "delayq_cluster_masters_unused %d\n", f->masters - f->masters_used);
}

/* Shards whose master has fewer replicas than redis_wait_replicas: their
 * adds answer 503, their deliveries go on unconfirmed (counted). */
static void put_replica_metrics(dq_buf *out, const prometheus_figures *f)
{
    buf_printf(out, "# HELP delayq_unconfirmed_writes_total Pops, finishes and callback "
                    "outcomes answered without the confirmation of redis_wait_replicas "
                    "replicas.\n# TYPE delayq_unconfirmed_writes_total counter\n"
                    "delayq_unconfirmed_writes_total %llu\n", (unsigned long long)f->unconfirmed);
    int short_shards = 0; /* none without redis_wait_replicas: none is asked for */
    if (f->wait_replicas) {
        buf_puts(out, "# HELP delayq_shard_replicas Replicas online of each shard's master (-1: "
                      "its master did not answer).\n# TYPE delayq_shard_replicas gauge\n");
        for (int k = 0; k < f->shards; k++) {
            buf_printf(out, "delayq_shard_replicas{shard=\"%d\"} %d\n", k, f->replicas[k]);
            short_shards += f->replicas[k] >= 0 && f->replicas[k] < f->wait_replicas;
        }
    }
    buf_printf(out, "# HELP delayq_shards_short_of_replicas Shards whose master has fewer "
                    "replicas than redis_wait_replicas: their adds answer 503.\n"
                    "# TYPE delayq_shards_short_of_replicas gauge\n"
                    "delayq_shards_short_of_replicas %d\n", short_shards);
}

/* The layout gauges: the stored layout of the data (its oldest shard's)
 * and the one this delayq uses; they differ only until a migration. */
static void put_layout_metrics(dq_buf *out, const store_layout_info *info)
{
    buf_printf(out, "# HELP delayq_layout_stored The stored layout of the deployment's data (its "
                    "oldest shard's; docs/OPERATIONS.md).\n# TYPE delayq_layout_stored gauge\n"
                    "delayq_layout_stored %d\n"
                    "# HELP delayq_layout_known The stored layout this delayq reads and writes.\n"
                    "# TYPE delayq_layout_known gauge\ndelayq_layout_known %d\n",
               info->lowest ? info->lowest : info->known, info->known);
}

/* The topics known and shown, and how many jobs all topics hold by state. */
static void put_deployment_gauges(dq_buf *out, const store_stats *st, size_t shown)
{
    buf_puts(out, "# HELP delayq_topics Topics that hold jobs or held one within topic_retention_s "
                  "(with several shards: the most one shard knows, a lower bound).\n"
                  "# TYPE delayq_topics gauge\n");
    buf_printf(out, "delayq_topics %lld\n", (long long)st->topics_known);
    buf_puts(out, "# HELP delayq_topics_not_shown Topics left out of the per-topic series "
                  "(metrics_max_topics).\n# TYPE delayq_topics_not_shown gauge\n");
    int64_t not_shown = st->topics_known - (int64_t)shown;
    buf_printf(out, "delayq_topics_not_shown %lld\n", (long long)(not_shown > 0 ? not_shown : 0));
    buf_puts(out, "# HELP delayq_deployment_jobs Jobs of all topics by state.\n"
                  "# TYPE delayq_deployment_jobs gauge\n");
    for (int g = 0; g < STORE_NGAUGES; g++)
        buf_printf(out, "delayq_deployment_jobs{state=\"%s\"} %lld\n", store_stat_names[g],
                   (long long)st->totals[g]);
}

/* How many jobs each shown topic holds by state. */
static void put_topic_gauges(dq_buf *out, const store_stats *st, size_t shown)
{
    buf_puts(out, "# HELP delayq_jobs Jobs by topic and state.\n# TYPE delayq_jobs gauge\n");
    for (size_t i = 0; i < shown; i++) {
        for (int g = 0; g < STORE_NGAUGES; g++) {
            buf_puts(out, "delayq_jobs{topic=\"");
            put_label(out, st->topics[i].name, st->topics[i].name_len);
            buf_printf(out, "\",state=\"%s\"} %lld\n", store_stat_names[g],
                       (long long)st->topics[i].v[g]);
        }
    }
}

/* The stats counters (jobs added, popped, ...), all topics and by topic. */
static void put_job_counters(dq_buf *out, const store_stats *st, size_t shown)
{
    /* The Prometheus name of each stats counter, and what it counts. */
    static const struct {
        store_stat field;
        const char *name, *what;
    } counters[] = {{STAT_ADDED, "added", "Jobs added"},
                    {STAT_POPPED, "popped", "Jobs popped"},
                    {STAT_FINISHED, "finished", "Jobs finished"},
                    {STAT_DELETED, "deleted", "Jobs deleted"},
                    {STAT_REDELIVERED, "redelivered", "Jobs redelivered"},
                    {STAT_BURIES, "buried", "Jobs buried"},
                    {STAT_KICKED, "kicked", "Jobs kicked"},
                    {STAT_PUSH_FAILED, "push_failed",
                     "Failed callback attempts (an error answer, a Retry-After, or a "
                     "reservation that ran out)"}};
    for (size_t k = 0; k < sizeof counters / sizeof counters[0]; k++) {
        const char *name = counters[k].name, *what = counters[k].what;
        buf_printf(out, "# HELP delayq_deployment_jobs_%s_total %s, all topics.\n"
                        "# TYPE delayq_deployment_jobs_%s_total counter\n"
                        "delayq_deployment_jobs_%s_total %lld\n",
                   name, what, name, name, (long long)st->totals[counters[k].field]);
        buf_printf(out, "# HELP delayq_jobs_%s_total %s, by topic.\n"
                        "# TYPE delayq_jobs_%s_total counter\n",
                   name, what, name);
        for (size_t i = 0; i < shown; i++) {
            buf_printf(out, "delayq_jobs_%s_total{topic=\"", name);
            put_label(out, st->topics[i].name, st->topics[i].name_len);
            buf_printf(out, "\"} %lld\n", (long long)st->topics[i].v[counters[k].field]);
        }
    }
}

/* Flow control, per topic with a policy: its concurrency limit and its
 * rate per second (when it has them), its jobs reserved against them, its
 * ready jobs held back now, the keys that have jobs held back by
 * key_concurrency and the tokens its rate has left. */
enum { FLOW_CONCURRENCY, FLOW_RATE, FLOW_RESERVED, FLOW_THROTTLED, FLOW_KEYS_WAITING, FLOW_TOKENS };

/* One flow series' value for a topic; -1 where it has no such limit. */
static double flow_value(const store_policy *p, int series)
{
    switch (series) {
    case FLOW_CONCURRENCY:
        return (double)p->value[DQ_POLICY_CONCURRENCY];
    case FLOW_RATE: {
        int64_t rate = p->value[DQ_POLICY_RATE], period = p->value[DQ_POLICY_PERIOD];
        if (rate < 0)
            return -1;
        return (double)rate * 1000.0 / (double)(period > 0 ? period : 1000);
    }
    case FLOW_RESERVED:
        return (double)p->reserved;
    case FLOW_THROTTLED:
        return (double)p->throttled;
    case FLOW_KEYS_WAITING:
        return (double)p->keys_waiting;
    default:
        return (double)p->tokens;
    }
}

static void put_flow_metrics(dq_buf *out, const store_policies *ps)
{
    static const struct {
        const char *name, *help;
    } series[] = {
        [FLOW_CONCURRENCY] = {"delayq_topic_concurrency_limit", "The topic's concurrency limit (policy)."},
        [FLOW_RATE] = {"delayq_topic_rate_limit_per_second",
                       "The topic's rate limit (policy), as deliveries per second."},
        [FLOW_RESERVED] = {"delayq_topic_reserved",
                           "Jobs of a topic with a policy reserved by pops plus callbacks "
                           "in flight, counted against its limits."},
        [FLOW_THROTTLED] = {"delayq_topic_throttled",
                            "Ready jobs of the topic held back by its limits now."},
        [FLOW_KEYS_WAITING] = {"delayq_topic_keys_waiting",
                               "Keys of the topic with jobs held back by its key_concurrency now."},
        [FLOW_TOKENS] = {"delayq_topic_tokens",
                         "Deliveries the topic's rate allows at once now (tokens left)."},
    };
    for (int s = 0; s < (int)(sizeof series / sizeof series[0]); s++) {
        buf_printf(out, "# HELP %s %s\n# TYPE %s gauge\n", series[s].name, series[s].help,
                   series[s].name);
        for (size_t i = 0; ps && i < ps->n; i++) {
            const store_policy *p = &ps->policies[i];
            double v = flow_value(p, s);
            if (v < 0)
                continue; /* no such limit */
            buf_printf(out, "%s{topic=\"", series[s].name);
            put_label(out, p->topic, p->topic_len);
            buf_printf(out, "\"} %.15g\n", v);
        }
    }
}

void prometheus_render(dq_buf *out, const prometheus_figures *f)
{
    put_deployment_gauges(out, f->st, f->shown);
    put_spread_metrics(out, f);
    put_replica_metrics(out, f);
    put_topic_gauges(out, f->st, f->shown);
    put_job_counters(out, f->st, f->shown);
    put_alert_metrics(out, f->st, f->shown, f->lag);
    put_layout_metrics(out, f->layout);
    put_flow_metrics(out, f->policies);
}
