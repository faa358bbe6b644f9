/* delayq-push: delivers the jobs that have a callback URL by POSTing them.
 * Run one or more, on any hosts: each reserves the jobs it sends. */
#include "push/push.h"
#include "daemon/daemon.h"

int main(int argc, char **argv)
{
    return daemon_main("delayq-push", argc, argv, push_run);
}
