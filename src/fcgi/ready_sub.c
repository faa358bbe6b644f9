/* ready_sub: the ready-notification subscriber (see ready_sub.h). */
#include "fcgi/ready_sub.h"

#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "fcgi/notify.h"
#include "store/store.h"

/* Nodes a subscriber may listen to at once (and a sentinel event). */
#define MAX_FDS 65

static const dq_config *config;
static shard_hints *hints;

/* "<count>:<topic>" (and after a NUL, the message's id) from a shard: the
 * hints first, so a long-poll woken by it finds the shard. */
static void on_message(int shard, const char *payload, size_t len)
{
    ready_message m;
    ready_message_parse(shard, payload, len, &m);
    if (hints && m.has_count)
        hints_add(hints, m.topic, m.topic_len, shard, (int64_t)m.count, m.key);
    notify_announce(&m);
}

static void *subscriber_main(void *arg)
{
    (void)arg;
    dq_store *st = store_new(config);
    char payload[256];
    int backoff_ms = 100;
    struct pollfd fds[MAX_FDS];
    while (!notify_stopping()) {
        if (!store_sub_open_now(st)) {
            if (store_sub_open(st, ":ready") != DQ_OK) {
                usleep((useconds_t)backoff_ms * 1000);
                backoff_ms = backoff_ms < 1000 ? backoff_ms * 2 : 1000;
                continue;
            }
            backoff_ms = 100;
            /* Messages may have been missed meanwhile: counts are unknown
             * and every waiter tries again. */
            if (hints)
                hints_clear(hints);
            notify_announce_all();
        }
        /* A dropped connection wakes poll (POLLHUP) and is resubscribed
         * above; a silent one is noticed by store_sub_read's PINGs, so an
         * idle worker wakes about once a second. */
        int n = store_sub_fds(st, fds, MAX_FDS);
        if (poll(fds, (nfds_t)n, store_sub_wait_ms(st)) < 0)
            continue;
        int shard, r;
        size_t len;
        while ((r = store_sub_read(st, &shard, payload, sizeof payload, &len)) == 0)
            on_message(shard, payload, len);
        if (r < 0)
            log_warn("ready-notification subscription lost; resubscribing");
    }
    store_free(st);
    return NULL;
}

int ready_sub_start(const dq_config *cfg, shard_hints *ready_hints)
{
    config = cfg;
    hints = ready_hints;
    pthread_t t;
    if (pthread_create(&t, NULL, subscriber_main, NULL) != 0)
        return -1;
    pthread_detach(t);
    return 0;
}
