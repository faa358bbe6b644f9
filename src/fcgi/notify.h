/* notify: wakes parked long-polls when jobs become ready. A long-poll that
 * found no job is parked here (it holds no thread while it waits). Each
 * "<count>:<topic>" message (the functions publish one for the jobs a call
 * made ready; ready_sub.c hands them in) wakes at most `count` of the
 * waiters parked on that topic, the longest waiting first; the worker
 * processes of a host share that count out among themselves, so a ready job
 * costs one pop, not one per waiting request or per process. A waiter is
 * also woken at its deadline, at most longpoll_recheck_ms after it parked
 * (so a lost subscription or wake-up costs at most that, never a lost job),
 * and at shutdown. Waking means calling the waiter's callback, which hands the
 * request back to a thread. Pure: no I/O. */
#ifndef DQ_NOTIFY_H
#define DQ_NOTIFY_H

#include <stddef.h>
#include <stdint.h>

#include "fcgi/wake_claims.h"

#define NOTIFY_MAX_TOPICS 64

typedef struct notify_waiter notify_waiter;
/* Called without notify's lock held, once per park. */
typedef void (*notify_wake_fn)(notify_waiter *w);

struct notify_waiter {
    notify_wake_fn wake;
    void *owner;
    /* Below: notify's own. */
    uint32_t hashes[NOTIFY_MAX_TOPICS];
    size_t n;
    uint64_t order;     /* first park: keeps the FIFO across re-parks */
    int64_t deadline;   /* monotonic ms */
    uint32_t woken_by;  /* topic hash that woke it (0: deadline or shutdown) */
    int parked;
    size_t heap_at;     /* index in the deadline heap */
    notify_waiter *prev, *next;
};

/* earlier_deadline is called when a parked waiter's deadline becomes the
 * earliest, so the caller can shorten its wait before notify_expire. */
/* recheck_ms: a parked waiter is woken at least this often, so a lost
 * message costs at most that long. shared: the table the worker processes
 * share wake-ups through (NULL: this process wakes as if alone). */
void notify_init(void (*earlier_deadline)(void), int64_t recheck_ms, wake_claims *shared);
/* A ready message as the functions publish it: "<count>:<topic>", then a
 * NUL and the message's id. ready_sub parses it once, for the hints and
 * for notify_announce. */
typedef struct {
    const char *text;    /* the payload up to the NUL */
    size_t text_len;
    int has_count;       /* of that form; else an older version's bare topic */
    unsigned long count;
    const char *topic;   /* in the text */
    size_t topic_len;
    uint64_t key;        /* wake_claims_key of its shard and id; 0 without an id */
} ready_message;
void ready_message_parse(int shard, const char *payload, size_t len, ready_message *m);

/* A message from the functions: "<count>:<topic>" wakes that many waiters
 * of the topic; anything else (an older version's bare topic) all of them.
 * When the message has an id, the count is shared with the other worker
 * processes (wake_claims.h): together they wake `count`. */
void notify_announce(const ready_message *m);
/* Messages may have been missed (a resubscribe): every waiter tries again. */
void notify_announce_all(void);
/* The current generation: take it before trying a pop. */
uint64_t notify_generation(void);
/* Parks w until a message newer than gen names one of the topics, or until
 * min(deadline_ms, now + 1 s), or shutdown. If such a message came after
 * gen already (between the pop and now), w is woken at once. first: the
 * request parks for the first time (a re-park keeps its place in line). */
void notify_park(notify_waiter *w, const char *const *topics, size_t ntopics, uint64_t gen,
                 int64_t deadline_ms, int first);
/* Takes w out if it is still parked (its client went away): returns 1, and
 * its callback will not run; 0 if it was woken already. */
int notify_cancel(notify_waiter *w);
/* A waiter that was woken by a job but will not pop (its client left)
 * passes the wake-up to the next waiter of that topic. */
void notify_pass_on(uint32_t woken_by);
/* Wakes the waiters whose deadline has passed; returns the next deadline
 * (monotonic ms), or -1 when none is parked. */
int64_t notify_expire(int64_t now_ms);
/* Wakes every waiter for good: the worker is stopping. */
void notify_shutdown(void);
int notify_stopping(void);
/* Parked waiters, for tests and logs. */
size_t notify_parked(void);

#endif
