/* group: group commit of single-job requests (see group.h).
 *
 * One queue per kind of operation. The thread whose operation finds its
 * queue idle leads: it sends a call, and when the call returns it hands the
 * lead to the thread of the oldest operation that queued meanwhile, which
 * sends everything queued of that kind in one call. A leader never runs a
 * call for others after its own is answered, so no request waits for more
 * than the call in flight and its own. */
#include "fcgi/group.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

typedef enum { OP_ADD, OP_FINISH, OP_DELETE, OP_POP, OP_KINDS } op_kind;

typedef struct op {
    op_kind kind;
    const char *allow; /* only operations with the same topic limit share a call */
    const dq_job_spec *job; /* add */
    const char *id;         /* add, finish, delete */
    const store_pop_req *pop;
    store_jobs *jobs; /* pop: the jobs taken */
    store_item *item;
    store_error *err;
    dq_status status;
    int done; /* the outcome is in */
    int lead; /* this operation's thread sends the next call */
    pthread_cond_t cv;
    struct op *next;
} op;

typedef struct {
    op *head, *tail;
    int busy; /* a call of this kind is on its way, or its next leader is named */
} op_queue;

struct dq_group {
    pthread_mutex_t lock;
    size_t max;
    op_queue q[OP_KINDS];
};

dq_group *group_new(int max)
{
    dq_group *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    pthread_mutex_init(&g->lock, NULL);
    g->max = max > 0 ? (size_t)max : 1;
    return g;
}

/* Whether two operations of a kind can go in one call: the same topic
 * limit, and for pops the same topics in the same order. */
static int same_call(const op *a, const op *b)
{
    if (strcmp(a->allow, b->allow) != 0)
        return 0;
    if (a->kind != OP_POP)
        return 1;
    if (a->pop->ntopics != b->pop->ntopics)
        return 0;
    for (size_t t = 0; t < a->pop->ntopics; t++) {
        if (strcmp(a->pop->topics[t], b->pop->topics[t]) != 0)
            return 0;
    }
    return 1;
}

/* Moves own and up to max - 1 other queued operations that can share its
 * call, oldest first, from q into batch; returns how many. */
static size_t take_batch(const dq_group *g, op_queue *q, op *own, op **batch)
{
    size_t n = 1;
    batch[0] = own;
    op *kept = NULL;
    for (op **pp = &q->head; *pp;) {
        op *o = *pp;
        int same = o != own && n < g->max && same_call(o, own);
        if (o == own || same) {
            if (same)
                batch[n++] = o;
            *pp = o->next;
        } else {
            kept = o;
            pp = &o->next;
        }
    }
    q->tail = kept;
    return n;
}

/* Pops for the batch in one call: every finish, then the jobs of all, the
 * oldest jobs to the operation queued first. */
static void run_pops(dq_store *s, op **batch, size_t n)
{
    store_pop_req q = *batch[0]->pop;
    q.count = 0;
    q.nfinish = 0;
    for (size_t i = 0; i < n; i++) {
        q.count += batch[i]->pop->count;
        q.nfinish += batch[i]->pop->nfinish;
    }
    const char **finish = util_xcalloc(q.nfinish + 1, sizeof *finish);
    store_item *finished = util_xcalloc(q.nfinish + 1, sizeof *finished);
    size_t f = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < batch[i]->pop->nfinish; k++)
            finish[f++] = batch[i]->pop->finish[k];
    }
    q.finish = finish;
    q.finished = finished;
    store_jobs all;
    memset(&all, 0, sizeof all);
    store_error err;
    dq_status st = store_pop(s, 0, &q, &all, &err);
    if (n == 1) { /* alone: the jobs are its own, no copies */
        for (size_t k = 0; k < q.nfinish; k++)
            batch[0]->pop->finished[k] = finished[k];
        *batch[0]->jobs = all;
        batch[0]->status = st;
        *batch[0]->err = err;
        free(finish);
        free(finished);
        return;
    }
    size_t next = 0;
    f = 0;
    for (size_t i = 0; i < n; i++) {
        op *o = batch[i];
        for (size_t k = 0; k < o->pop->nfinish; k++)
            o->pop->finished[k] = finished[f++];
        for (int k = 0; k < o->pop->count && next < all.n; k++)
            store_jobs_copy(o->jobs, &all.jobs[next++]);
        o->jobs->token_wait_ms = all.token_wait_ms; /* each would have met the same rate */
        o->status = st;
        *o->err = err;
    }
    store_jobs_free(&all);
    free(finish);
    free(finished);
}

/* Sends the batch as one call on s and gives each operation its outcome. */
static void run_batch(dq_store *s, op **batch, size_t n)
{
    if (batch[0]->kind == OP_POP) {
        run_pops(s, batch, n);
        return;
    }
    dq_job_spec *jobs = NULL;
    const char **ids = util_xcalloc(n, sizeof *ids);
    store_item *items = util_xcalloc(n, sizeof *items);
    for (size_t i = 0; i < n; i++)
        ids[i] = batch[i]->id;
    store_error err;
    dq_status st;
    if (batch[0]->kind == OP_ADD) {
        jobs = util_xcalloc(n, sizeof *jobs);
        for (size_t i = 0; i < n; i++)
            jobs[i] = *batch[i]->job;
        st = store_add(s, batch[0]->allow, jobs, ids, n, items, &err);
    } else {
        st = store_remove(s, batch[0]->allow, batch[0]->kind == OP_FINISH, ids, n, items, &err);
    }
    for (size_t i = 0; i < n; i++) {
        op *o = batch[i];
        *o->item = items[i];
        /* The call's failure is this operation's only where its shard failed. */
        o->status = st != DQ_OK && store_item_call_failed(items[i].status) ? items[i].status : DQ_OK;
        *o->err = err;
    }
    free(jobs);
    free(ids);
    free(items);
}

static dq_status submit(dq_group *g, dq_store *s, op *own)
{
    op_queue *q = &g->q[own->kind];
    pthread_cond_init(&own->cv, NULL);
    pthread_mutex_lock(&g->lock);
    if (q->tail)
        q->tail->next = own;
    else
        q->head = own;
    q->tail = own;
    if (!q->busy) {
        q->busy = 1;
        own->lead = 1;
    }
    while (!own->done && !own->lead)
        pthread_cond_wait(&own->cv, &g->lock);
    if (!own->done) {
        op *stack[64];
        op **batch = g->max <= 64 ? stack : util_xmalloc(g->max * sizeof *batch);
        size_t n = take_batch(g, q, own, batch);
        pthread_mutex_unlock(&g->lock);
        run_batch(s, batch, n);
        pthread_mutex_lock(&g->lock);
        for (size_t i = 1; i < n; i++) {
            batch[i]->done = 1;
            pthread_cond_signal(&batch[i]->cv);
        }
        if (q->head) {
            q->head->lead = 1;
            pthread_cond_signal(&q->head->cv);
        } else {
            q->busy = 0;
        }
        if (batch != stack)
            free(batch);
    }
    pthread_mutex_unlock(&g->lock);
    pthread_cond_destroy(&own->cv);
    return own->status;
}

dq_status group_add(dq_group *g, dq_store *s, const char *allow, const dq_job_spec *job,
                    const char *id, store_item *item, store_error *err)
{
    op own = {.kind = OP_ADD, .allow = allow, .job = job, .id = id, .item = item, .err = err};
    return submit(g, s, &own);
}

dq_status group_remove(dq_group *g, dq_store *s, const char *allow, int finished, const char *id,
                       store_item *item, store_error *err)
{
    op own = {.kind = finished ? OP_FINISH : OP_DELETE, .allow = allow, .id = id, .item = item,
              .err = err};
    return submit(g, s, &own);
}

dq_status group_pop(dq_group *g, dq_store *s, const store_pop_req *q, store_jobs *out,
                    store_error *err)
{
    op own = {.kind = OP_POP, .allow = q->allow, .pop = q, .jobs = out, .err = err};
    return submit(g, s, &own);
}
