/* ready_sub: the thread of a worker process that listens on
 * "<prefix>:ready" and hands each message to notify, which wakes the parked
 * long-polls it concerns. */
#ifndef DQ_READY_SUB_H
#define DQ_READY_SUB_H

#include "config.h"

/* Starts the thread. Returns 0 or -1. */
int ready_sub_start(const dq_config *cfg);

#endif
