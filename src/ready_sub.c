/* ready_sub: the ready-notification subscriber (see ready_sub.h). */
#include "ready_sub.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "log.h"
#include "notify.h"
#include "store.h"

static const dq_config *config;

static void *subscriber_main(void *arg)
{
    (void)arg;
    dq_store *st = store_new(config);
    char channel[128], payload[256];
    snprintf(channel, sizeof channel, "%s:ready", store_prefix(st));
    const char *channels[1] = {channel};
    int backoff_ms = 100;
    while (!notify_stopping()) {
        if (store_fd(st) < 0) {
            if (store_subscribe(st, channels, 1) != DQ_OK) {
                usleep((useconds_t)backoff_ms * 1000);
                backoff_ms = backoff_ms < 1000 ? backoff_ms * 2 : 1000;
                continue;
            }
            backoff_ms = 100;
            notify_announce_all(); /* messages may have been missed meanwhile */
        }
        /* No timeout: an idle worker should cost no CPU. A dropped
         * connection wakes poll (POLLHUP) and is resubscribed above. */
        struct pollfd p = {store_fd(st), POLLIN, 0};
        if (poll(&p, 1, -1) <= 0)
            continue;
        char got[128];
        int r;
        while ((r = store_read_message(st, got, sizeof got, payload, sizeof payload)) == 0)
            notify_announce(payload);
        if (r < 0)
            log_warn("ready-notification subscription lost; resubscribing");
    }
    store_free(st);
    return NULL;
}

int ready_sub_start(const dq_config *cfg)
{
    config = cfg;
    pthread_t t;
    if (pthread_create(&t, NULL, subscriber_main, NULL) != 0)
        return -1;
    pthread_detach(t);
    return 0;
}
