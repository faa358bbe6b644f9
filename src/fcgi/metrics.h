/* metrics: request counters and latency histograms shared by all worker
 * processes of one delayq-fcgi (an anonymous shared mapping made by the
 * master before it forks), rendered in Prometheus text format. */
#ifndef DQ_METRICS_H
#define DQ_METRICS_H

#include "common/buf.h"
#include "common/status.h"
#include "protocol/request.h"

/* Maps the shared counters; call once in the master. Returns 0 or -1. */
int metrics_init(void);
/* Records one answered request. cmd may be CMD_COUNT (unparseable). */
void metrics_observe(dq_command cmd, dq_status st, double seconds);
/* Appends the request metrics. */
void metrics_render_requests(dq_buf *out);

#endif
