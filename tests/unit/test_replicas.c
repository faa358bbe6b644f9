/* Unit tests for src/store/store_replicas.c: the table of shards short of
 * replicas is shared by the processes forked after replicas_share() (one
 * worker's news is every worker's, and the count of unconfirmed writes is
 * their sum), and a refusal's sentence names the shard and is told apart
 * from other failures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/store_replicas.h"

static void test_forked_processes_share_the_table(void **state)
{
    (void)state;
    assert_int_equal(replicas_share(), 0);
    assert_int_equal(replicas_known(3), -1);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        replicas_note(3, 0, 1, "127.0.0.1:7001");
        replicas_note(4, 1, 1, "127.0.0.1:7002");
        replicas_count_unconfirmed(5);
        _exit(0);
    }
    int status;
    waitpid(child, &status, 0);
    assert_int_equal(status, 0);
    replicas_count_unconfirmed(2);
    assert_true(replicas_short(3));
    assert_int_equal(replicas_known(3), 0);
    assert_false(replicas_short(4));
    assert_int_equal(replicas_known(4), 1);
    assert_int_equal(replicas_unconfirmed(), 7);
    replicas_note(3, 1, 1, "127.0.0.1:7001"); /* a replica joined */
    assert_false(replicas_short(3));
    assert_false(replicas_short(-1));
    assert_false(replicas_short(1 << 20));
}

static void test_refusal_names_the_shard(void **state)
{
    (void)state;
    char why[128];
    replicas_refusal(why, sizeof why, 3, 0, 1, "10.0.0.5:7002");
    assert_string_equal(why, "shard 3 has no replica (master 10.0.0.5:7002; "
                             "redis_wait_replicas 1): nothing was written");
    assert_true(replicas_is_refusal(why));
    replicas_refusal(why, sizeof why, 0, 1, 2, "h:1");
    assert_string_equal(why, "shard 0 has only 1 replicas (master h:1; redis_wait_replicas 2): "
                             "nothing was written");
    assert_true(replicas_is_refusal(why));
    assert_false(replicas_is_refusal("Redis is unreachable"));
    assert_false(replicas_is_refusal("shard 0's slot is moving"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forked_processes_share_the_table),
        cmocka_unit_test(test_refusal_names_the_shard),
    };
    return cmocka_run_group_tests_name("replicas", tests, NULL, NULL);
}
