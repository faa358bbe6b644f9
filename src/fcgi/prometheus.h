/* prometheus: the deployment's figures of the /metrics page, rendered in
 * Prometheus text format from what the store read. */
#ifndef DQ_PROMETHEUS_H
#define DQ_PROMETHEUS_H

#include <stddef.h>

#include "common/buf.h"
#include "store/store_migrate.h"
#include "store/store_ops.h"

typedef struct {
    const store_stats *st;           /* totals, and per topic the first `shown` */
    size_t shown;                    /* metrics_max_topics' share of st's topics */
    const store_lag *lag;            /* the alert gauges */
    const store_layout_info *layout; /* zeroed when Redis did not say */
    int shards;                      /* the deployment's */
    int masters, masters_used;       /* of a Redis Cluster; 0 without one */
    const store_policies *policies;  /* the first metrics_max_topics topics with a policy */
    /* With redis_wait_replicas (wait_replicas > 0): each shard's master's
     * replicas online (-1: not known), and the writes answered without
     * their confirmation since start. */
    int wait_replicas;
    const int *replicas;
    uint64_t unconfirmed;
} prometheus_figures;

/* Appends every series but the request counters (metrics_render_requests). */
void prometheus_render(dq_buf *out, const prometheus_figures *f);

#endif
