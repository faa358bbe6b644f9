package io.delayq;

import java.util.List;

/** Run after the deployment's Redis was stopped: every command is a 503 UnavailableException. */
public class RedisDownTest {
    private final Client c = Check.client();

    public void testEveryCommandUnavailable() {
        List<Check.ThrowingRunnable> calls = List.of(
                () -> c.add("down", 1), () -> c.pop("down", 0), () -> c.finish("x"), () -> c.get("x"),
                () -> c.stats(), () -> c.touch("x"), () -> c.pause("down"), () -> c.schedules(),
                () -> c.jobs("down", "ready", null, null));
        for (Check.ThrowingRunnable call : calls) {
            UnavailableException e = Check.fails(UnavailableException.class, call);
            Check.equal(503, e.status());
            Check.equal("unavailable", e.code());
        }
        Check.that(!c.health(), "health with Redis down");
    }
}
