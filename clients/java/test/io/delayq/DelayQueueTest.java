package io.delayq;

import java.util.ArrayList;
import java.util.List;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;

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
}
