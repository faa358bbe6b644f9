/* delayq-timer: moves due jobs from the delay buckets to the ready queues.
 * Run one or more, on any hosts; they share the buckets through Redis locks. */
#include "daemon/daemon.h"
#include "timer/timer.h"

int main(int argc, char **argv)
{
    return daemon_main("delayq-timer", argc, argv, timer_run);
}
