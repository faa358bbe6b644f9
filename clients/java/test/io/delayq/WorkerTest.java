package io.delayq;

import io.delayq.examples.CloseUnpaidOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

/** The Worker against the real service: concurrency, heartbeats, failures, stop. */
public class WorkerTest {
    private final Client c = Check.client();

    /** Runs the worker on a thread of its own; returns the thread (its failure lands in failure). */
    private static Thread start(Worker w, AtomicReference<Throwable> failure) {
        Thread t = new Thread(() -> {
            try {
                w.run();
            } catch (Throwable e) {
                failure.set(e);
            }
        });
        t.start();
        return t;
    }

    private Map<?, ?> stats(String topic) {
        return (Map<?, ?>) ((Map<?, ?>) c.stats(topic).get("topics")).get(topic);
    }

    private static long count(Map<?, ?> stats, String name) {
        return ((Number) stats.get(name)).longValue();
    }

    public void testConcurrencyAndQuickStop() throws Exception {
        String topic = Check.unique("conc");
        AtomicInteger now = new AtomicInteger();
        AtomicInteger most = new AtomicInteger();
        Map<String, Integer> seen = new ConcurrentHashMap<>();
        Worker w = Worker.builder(c, List.of(topic), job -> {
            int n = now.incrementAndGet();
            most.accumulateAndGet(n, Math::max);
            seen.merge(job.id(), 1, Integer::sum);
            Thread.sleep(400);
            now.decrementAndGet();
        }).concurrency(4).pollTimeout(20).handleSignals(false).build();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        Thread t = start(w, failure);
        List<NewJob> jobs = new ArrayList<>();
        for (int i = 0; i < 12; i++) {
            jobs.add(NewJob.of(topic, i).id(topic + "-" + i));
        }
        c.addMany(jobs);
        Check.eventually(10, "12 jobs handled", () -> w.handled() == 12);
        Check.equal(4, most.get(), "jobs handled at once");
        // every thread is now in a 20 s long-poll: stop() cancels them
        Thread.sleep(200);
        long t0 = System.nanoTime();
        w.stop();
        t.join(10000);
        double took = (System.nanoTime() - t0) / 1e9;
        Check.that(!t.isAlive(), "run() returned after stop()");
        Check.that(took < 3 * Check.slow(), "stop() took " + took + " s with 20 s long-polls");
        Check.equal(null, failure.get());
        Check.equal(12, seen.size());
        Check.that(seen.values().stream().allMatch(n -> n == 1), "each job handled once: " + seen);
        Map<?, ?> s = stats(topic);
        Check.equal(12L, count(s, "finished"), "finished");
        Check.equal(0L, count(s, "reserved") + count(s, "ready"), "left");
    }

    public void testHeartbeatKeepsALongJobReserved() throws Exception {
        for (boolean heartbeat : new boolean[] {true, false}) {
            String topic = Check.unique(heartbeat ? "beat" : "nobeat");
            AtomicInteger calls = new AtomicInteger();
            Worker w = Worker.builder(c, List.of(topic), job -> {
                calls.incrementAndGet();
                Thread.sleep(3000);   // three times the TTR
            }).heartbeat(heartbeat).concurrency(2).pollTimeout(1).handleSignals(false).build();
            AtomicReference<Throwable> failure = new AtomicReference<>();
            Thread t = start(w, failure);
            c.add(NewJob.of(topic, "long").id(topic + "-1").ttr(1));
            Check.eventually(10, "the job handled", () -> w.handled() >= 1);
            w.stop();
            t.join(15000);
            Check.equal(null, failure.get());
            Map<?, ?> s = stats(topic);
            if (heartbeat) {
                Check.equal(1, calls.get(), "handler calls with heartbeats");
                Check.equal(0L, count(s, "redelivered"), "redelivered with heartbeats");
                Check.equal(1L, count(s, "finished"), "finished");
            } else {
                // the control: without touches the TTR passes and the
                // second thread gets the job again
                Check.that(count(s, "redelivered") >= 1, "no redelivery without heartbeats: " + s);
                Check.that(calls.get() >= 2, "handler calls without heartbeats: " + calls.get());
            }
            c.deleteMany(List.of(topic + "-1"));
        }
    }

    public void testFailedJobsAreReleasedThenBuried() throws Exception {
        String topic = Check.unique("fail");
        Map<String, List<Integer>> attempts = new ConcurrentHashMap<>();
        Worker w = Worker.builder(c, List.of(topic), job -> {
            attempts.computeIfAbsent(job.id(), k -> new java.util.concurrent.CopyOnWriteArrayList<>()).add(job.attempts());
            if (job.id().endsWith("-flaky") && job.attempts() == 1 || job.id().endsWith("-broken")) {
                throw new IllegalStateException("the store is down");
            }
        }).backoff(0.5, 0.5).maxAttempts(3).pollTimeout(1).handleSignals(false).build();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        Thread t = start(w, failure);
        c.add(NewJob.of(topic, 1).id(topic + "-flaky"));
        c.add(NewJob.of(topic, 2).id(topic + "-broken"));
        Check.eventually(15, "the broken job buried", () -> {
            try {
                return "buried".equals(c.get(topic + "-broken").state());
            } catch (NotFoundException e) {
                return false;
            }
        });
        Check.eventually(5, "the flaky job finished", () -> count(stats(topic), "finished") == 1);
        w.stop();
        t.join(10000);
        Check.equal(null, failure.get());
        Check.equal(List.of(1, 2), attempts.get(topic + "-flaky"));
        Check.equal(List.of(1, 2, 3), attempts.get(topic + "-broken"));
        Check.equal(0.5, w.backoffFor(9));
        c.delete(topic + "-broken");
    }

    public void testRefusedTokenStopsRun() {
        Client wrong = new Client(Check.env("DELAYQ_URL"), "not-the-token", null);
        Worker w = Worker.builder(wrong, List.of("x"), job -> { }).concurrency(2).handleSignals(false).build();
        Check.fails(UnauthorizedException.class, w::run);
        Check.fails(IllegalStateException.class, w::run);
    }

    public void testCloseUnpaidOrderExample() throws Exception {
        CloseUnpaidOrder shop = new CloseUnpaidOrder(c);
        long unpaid = System.nanoTime();
        long paid = unpaid + 1;
        shop.placeOrder(unpaid, 1);
        shop.placeOrder(paid, 1);
        shop.pay(paid);
        // one job per order: its id is the order's
        Check.fails(ConflictException.class, () -> c.add(NewJob.of("close-order", 0).id("close-order-" + paid)));
        Worker w = shop.worker();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        Thread t = start(w, failure);
        Check.eventually(10, "the unpaid order closed", () -> "closed".equals(shop.orders.get(unpaid)));
        Check.eventually(5, "both close-order jobs handled", () -> w.handled() == 2);
        w.stop();
        t.join(10000);
        Check.equal(null, failure.get());
        Check.equal("paid", shop.orders.get(paid));
        for (long order : new long[] {unpaid, paid}) {
            Check.fails(NotFoundException.class, () -> c.get("close-order-" + order));
        }
    }
}
