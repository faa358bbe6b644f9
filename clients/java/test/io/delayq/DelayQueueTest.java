package io.delayq;

import java.util.ArrayList;
import java.util.List;
import java.util.HashSet;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

/** The Redisson-like view (DelayQueue, TakeQueue) against the real service at $DELAYQ_URL. */
public class DelayQueueTest {
    private final Client c = Check.client();

    private DelayQueue<String> strings() {
        return new DelayQueue<>(c, Check.unique("dq"), ValueCodec.string());
    }

    public void testOfferedValueIsTakenAfterItsDelayByteForByte() throws Exception {
        DelayQueue<String> q = strings();
        String value = "close order 42: \u00e9\u00fc \u4e2d\u6587 \ud83d\ude00 \"quoted\" \\ back";
        long t0 = System.nanoTime();
        String id = q.offer(value, 1, TimeUnit.SECONDS);
        Check.equal(null, q.blockingQueue().poll(), "not due yet");
        String taken = q.blockingQueue().take();
        double waited = (System.nanoTime() - t0) / 1e9;
        Check.equal(value, taken);
        Check.that(waited >= 0.9, "taken after its delay, not " + waited + " s");
        Check.fails(NotFoundException.class, () -> c.get(id)); // finished once taken
    }

    public void testPollWithATimeoutAnswersNullInTime() throws Exception {
        TakeQueue<String> q = strings().blockingQueue();
        long t0 = System.nanoTime();
        Check.equal(null, q.poll(300, TimeUnit.MILLISECONDS));
        double waited = (System.nanoTime() - t0) / 1e9;
        Check.that(waited >= 0.25 && waited < 3 * Check.slow(), "waited " + waited + " s");
    }

    public void testDrainToTakesEverythingDue() {
        DelayQueue<String> q = strings();
        Set<String> offered = new HashSet<>();
        for (int i = 0; i < 5; i++) {
            q.blockingQueue().offer("v" + i);
            offered.add("v" + i);
        }
        q.offer("later", 1, TimeUnit.HOURS);
        Check.equal(5, q.blockingQueue().size());
        List<String> into = new ArrayList<>();
        Check.equal(2, q.blockingQueue().drainTo(into, 2));
        Check.equal(3, q.blockingQueue().drainTo(into));
        Check.equal(offered, new HashSet<>(into));
        Check.equal(0, q.blockingQueue().size());
    }

    public void testAHandlerFinishesItsJobOnlyWhenItReturns() throws Exception {
        DelayQueue<String> q = strings();
        TakeQueue<String> taking = q.blockingQueue().retryDelay(0.3);
        String id = q.offer("refund 7", 0, TimeUnit.SECONDS);
        RuntimeException boom = new RuntimeException("downstream failed");
        RuntimeException thrown = Check.fails(RuntimeException.class,
                () -> taking.poll(5, TimeUnit.SECONDS, v -> {
                    throw boom;
                }));
        Check.that(thrown == boom, "the handler's exception is rethrown");
        Check.equal("delay", c.get(id).state(), "released, to be delivered again");
        List<String> handled = new ArrayList<>();
        Check.equal(true, taking.poll(5 * (long) Check.slow(), TimeUnit.SECONDS, handled::add));
        Check.equal(List.of("refund 7"), handled);
        Check.fails(NotFoundException.class, () -> c.get(id));
        Check.equal(2L, figure(q.topic(), "popped"), "delivered twice");
        Check.equal(1L, figure(q.topic(), "finished"), "finished once");
        Check.equal(false, taking.poll(0, TimeUnit.SECONDS, handled::add));
    }

    private Object figure(String topic, String name) {
        return ((Map<?, ?>) ((Map<?, ?>) c.stats(topic).get("topics")).get(topic)).get(name);
    }

    public void testJsonValues() throws Exception {
        DelayQueue<Object> q = new DelayQueue<>(c, Check.unique("dqj"), ValueCodec.json());
        q.offer(Map.of("order", 42, "paid", false), 0, TimeUnit.SECONDS);
        Check.equal(Map.of("order", 42L, "paid", false), q.blockingQueue().take());
    }

    public void testABodyTheCodecCannotReadIsBuried() throws Exception {
        DelayQueue<String> q = strings();
        String id = c.add(q.topic(), Map.of("not", "a string"));
        Check.equal(null, q.blockingQueue().poll());
        Check.equal("buried", c.get(id).state());
        c.delete(id);
    }

    public void testWhatRedisCannotDoCheaplyIsRefused() {
        TakeQueue<String> q = strings().blockingQueue();
        Check.fails(UnsupportedOperationException.class, q::peek);
        Check.fails(UnsupportedOperationException.class, q::iterator);
        Check.equal(Integer.MAX_VALUE, q.remainingCapacity());
    }

    /** Starts a thread blocked in take() on q; its outcome (value or exception) goes to into. */
    private static Thread taker(TakeQueue<String> q, AtomicReference<Object> into) throws InterruptedException {
        Thread t = new Thread(() -> {
            try {
                into.set(q.take());
            } catch (Throwable e) {
                into.set(e);
            }
        }, "taker");
        t.start();
        // Parked on the long-poll, its request on the service's side by now.
        Check.eventually(5, "the taker to wait", () -> t.getState() == Thread.State.WAITING);
        Thread.sleep((long) (300 * Check.slow()));
        return t;
    }

    public void testAnInterruptedTakeThrowsAtOnceAndAJobAddedAfterIsDeliveredToTheNext() throws Exception {
        DelayQueue<String> q = strings();
        AtomicReference<Object> outcome = new AtomicReference<>();
        Thread t = taker(q.blockingQueue(), outcome);
        long t0 = System.nanoTime();
        t.interrupt();
        t.join((long) (2000 * Check.slow()));
        double took = (System.nanoTime() - t0) / 1e9;
        Check.that(!t.isAlive(), "take() still waits " + took + " s after the interrupt");
        Check.that(outcome.get() instanceof InterruptedException, "take() threw " + outcome.get());
        Check.that(took < 1.5 * Check.slow(), "InterruptedException after " + took + " s");
        // The interrupted take's long-poll still waits on the service: it
        // takes the job added now, and hands it back for the next take.
        String id = q.offer("after the interrupt", 0, TimeUnit.SECONDS);
        Check.eventually(10, "the abandoned long-poll to pop the job", () -> figure(q.topic(), "popped").equals(1L));
        Check.equal("after the interrupt", q.blockingQueue().poll(10 * (long) Check.slow(), TimeUnit.SECONDS));
        Check.fails(NotFoundException.class, () -> c.get(id));
        Check.equal(2L, figure(q.topic(), "popped"), "handed back once, then delivered");
        Check.equal(1L, figure(q.topic(), "finished"));
    }

    public void testAThreadEnteringInterruptedThrowsAndLeavesTheValue() throws Exception {
        DelayQueue<String> q = strings();
        q.blockingQueue().offer("stays");
        try {
            Thread.currentThread().interrupt();
            Check.fails(InterruptedException.class, () -> q.blockingQueue().take());
            Check.that(!Thread.currentThread().isInterrupted(), "the InterruptedException cleared the flag");
            Thread.currentThread().interrupt();
            Check.fails(InterruptedException.class, () -> q.blockingQueue().poll(5, TimeUnit.SECONDS));
        } finally {
            Thread.interrupted(); // not into the next test
        }
        Check.equal(1, q.blockingQueue().size(), "nothing was popped");
        Check.equal("stays", q.blockingQueue().take());
    }

    public void testAValuePoppedBeforeTheInterruptIsDeliveredWithTheFlagSet() throws Exception {
        DelayQueue<String> q = strings();
        q.offer("handled", 0, TimeUnit.SECONDS);
        List<String> handled = new ArrayList<>();
        // The interrupt comes while the handler runs: the finish still goes out.
        try {
            Check.equal(true, q.blockingQueue().poll(5, TimeUnit.SECONDS, v -> {
                Thread.currentThread().interrupt();
                handled.add(v);
            }));
        } finally {
            Check.that(Thread.interrupted(), "the interrupt flag is kept");
        }
        Check.equal(List.of("handled"), handled);
        Check.equal(1L, figure(q.topic(), "finished"));
    }

    public void testClearDeletesTheDueValuesOnly() throws Exception {
        DelayQueue<String> q = strings();
        TakeQueue<String> due = q.blockingQueue();
        String held = q.offer("reserved", 0, TimeUnit.SECONDS);
        Check.equal(held, c.pop(q.topic(), 0).id());
        for (int i = 0; i < 3; i++) {
            due.offer("due " + i);
        }
        String later = q.offer("not yet due", 1, TimeUnit.HOURS);
        Check.equal(false, due.isEmpty());
        due.clear();
        Check.equal(true, due.isEmpty());
        Check.equal(0, due.size());
        Check.equal("delay", c.get(later).state(), "the value not yet due stays");
        Check.equal("reserved", c.get(held).state(), "the reserved job stays");
        Check.equal(3L, figure(q.topic(), "deleted"), "deleted, not finished");
        Check.equal(0L, figure(q.topic(), "finished"));
        c.delete(held);
        c.delete(later);
    }

    public void testTheCollectionMethodsOfAQueue() {
        DelayQueue<String> q = strings();
        TakeQueue<String> due = q.blockingQueue();
        Check.that(due.toString().contains(q.topic()), "toString names the topic: " + due);
        Check.that(q.toString().contains(q.topic()), "toString names the topic: " + q);
        Check.fails(NoSuchElementException.class, due::remove);
        Check.equal(true, due.add("one"));
        Check.equal(1, due.size());
        Check.equal("one", due.remove());
        Check.fails(UnsupportedOperationException.class, due::element);
        Check.fails(UnsupportedOperationException.class, () -> due.contains("one"));
        Check.fails(UnsupportedOperationException.class, () -> due.remove("one"));
        Check.fails(UnsupportedOperationException.class, due::toArray);
    }
}
