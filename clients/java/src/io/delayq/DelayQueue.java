package io.delayq;

import java.util.concurrent.TimeUnit;

/**
 * A delay queue of values on one topic, in the shape of Redisson's
 * {@code RDelayedQueue}: {@link #offer(Object, long, TimeUnit)} adds a job
 * due after the delay, and {@link #blockingQueue()} is the queue consumers
 * take due values from, a {@link java.util.concurrent.BlockingQueue}.
 * Unlike Redisson's, the values live in delayq as jobs: a value taken
 * but not handled (the consumer died) is delivered again, and
 * {@link TakeQueue#poll(long, TimeUnit, TakeQueue.Handler)} finishes a job
 * only once its handler returned.
 *
 * <p>The values not yet due are delayed jobs: the blocking queue neither
 * counts nor clears them (as Redisson's blocking queue does not hold them
 * yet); {@link #offer} returns the job's id, to {@code get} or
 * {@code delete} one through the {@link Client}. How {@code take} and
 * {@code poll} answer an interrupt, and what each Collection method does
 * against the service: {@link TakeQueue}.
 *
 * <pre>{@code
 * DelayQueue<String> queue = new DelayQueue<>(new Client(), "SANYOU", ValueCodec.string());
 * queue.offer("close order 42", 5, TimeUnit.SECONDS);
 * String task = queue.blockingQueue().take();
 * }</pre>
 *
 * @param <T> the element type, as the codec encodes it
 */
public final class DelayQueue<T> {
    private final Client client;
    private final String topic;
    private final ValueCodec<T> codec;
    private final TakeQueue<T> taking;

    /** A queue on topic of client, with codec for its values. */
    public DelayQueue(Client client, String topic, ValueCodec<T> codec) {
        this.client = client;
        this.topic = topic;
        this.codec = codec;
        this.taking = new TakeQueue<>(client, topic, codec);
    }

    /** The topic the values are jobs of. */
    public String topic() {
        return topic;
    }

    /**
     * Adds value, due after delay (rounded down to milliseconds); returns
     * the job's id (made by delayq). Throws the client's exceptions, e.g.
     * {@link UnavailableException} when delayq or Redis cannot take it. An
     * interrupt does not cut it short (it stays in the thread's flag).
     */
    public String offer(T value, long delay, TimeUnit unit) {
        double seconds = unit.toMillis(delay) / 1000.0;
        NewJob job = NewJob.of(topic, codec.encode(value)).delay(seconds);
        return TakeQueue.uninterruptibly(() -> client.add(job));
    }

    /** The queue of due values, to take them from (one per DelayQueue). */
    public TakeQueue<T> blockingQueue() {
        return taking;
    }

    /** The topic and the service; sends nothing. */
    @Override
    public String toString() {
        return "DelayQueue(" + topic + " at " + client.url() + ")";
    }
}
