/* timer: the delayq-timer loop. Takes its fair share of the delay buckets
 * with leased Redis locks, moves due jobs to the ready queues with the move
 * function, and sleeps until the earliest due time of its buckets or until a
 * "<prefix>:wake" message announces an earlier one. No fixed tick: besides
 * moves, it only wakes to renew its locks (a third of the lease). */
#ifndef DQ_TIMER_H
#define DQ_TIMER_H

#include "config.h"

/* Runs until stop_fd (a signalfd) becomes readable; then releases its locks
 * so other timers take the buckets at once. Returns the exit code. */
int timer_run(const dq_config *cfg, int stop_fd);

#endif
