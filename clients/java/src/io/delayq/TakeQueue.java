package io.delayq;

import java.util.AbstractQueue;
import java.util.Collection;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * The due values of a {@link DelayQueue}, as a {@link BlockingQueue}: a
 * value is taken by popping its job, and its job is finished before the
 * value is handed over (Redisson's semantics: once taken, it is the
 * caller's). {@link #poll(long, TimeUnit, Handler)} instead finishes a
 * job only when its handler returned, and gives it back otherwise, so a
 * consumer that fails or dies mid-way loses nothing (at-least-once).
 *
 * <p>What a delay queue in Redis cannot do cheaply it refuses with
 * {@link UnsupportedOperationException}: {@link #peek()}, {@link #iterator()}
 * (and so {@code remove(Object)}, {@code contains}, {@code toArray}): delayq
 * hands a job out only by reserving it. {@link #size()} is the topic's
 * ready jobs (stats), {@link #remainingCapacity()} unbounded, and
 * {@link #offer(Object)} adds a value due now.
 *
 * <p>A job whose body the codec cannot read (a producer that is not this
 * queue's) is buried, not handed over: {@code delayq kick} brings it back.
 * Safe to share between threads, as the {@link Client} is.
 *
 * @param <T> the element type
 */
public final class TakeQueue<T> extends AbstractQueue<T> implements BlockingQueue<T> {
    /** The longest one long-poll waits; take() and poll() ask again until their time is up. */
    static final double LONG_POLL_SECONDS = 20;
    private static final int DRAIN_BATCH = 100;

    /** Handles one value; a throw gives its job back to be delivered again. */
    @FunctionalInterface
    public interface Handler<T> {
        void handle(T value) throws Exception;
    }

    private final Client client;
    private final String topic;
    private final ValueCodec<T> codec;
    private volatile double retryDelay = 10;

    TakeQueue(Client client, String topic, ValueCodec<T> codec) {
        this.client = client;
        this.topic = topic;
        this.codec = codec;
    }

    /** Seconds after which a value whose handler threw is delivered again (default 10). */
    public TakeQueue<T> retryDelay(double seconds) {
        this.retryDelay = seconds;
        return this;
    }

    // ------------------------------------------------ taking, finished at once

    /** Waits for a due value, takes it and finishes its job. */
    @Override
    public T take() throws InterruptedException {
        for (;;) {
            T value = poll((long) LONG_POLL_SECONDS, TimeUnit.SECONDS);
            if (value != null) {
                return value;
            }
        }
    }

    /** Waits up to timeout for a due value; null when none came. */
    @Override
    public T poll(long timeout, TimeUnit unit) throws InterruptedException {
        Taken<T> taken = next(System.nanoTime() + unit.toNanos(timeout));
        if (taken == null) {
            return null;
        }
        client.finish(taken.job().id());
        return taken.value();
    }

    /** A due value now, or null. */
    @Override
    public T poll() {
        try {
            return poll(0, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return null;
        }
    }

    @Override
    public int drainTo(Collection<? super T> into) {
        return drainTo(into, Integer.MAX_VALUE);
    }

    /** Takes up to max values due now into the collection, finishing their jobs; returns how many. */
    @Override
    public int drainTo(Collection<? super T> into, int max) {
        int n = 0;
        while (n < max) {
            List<Job> jobs = client.popMany(List.of(topic), Math.min(max - n, DRAIN_BATCH), 0);
            if (jobs.isEmpty()) {
                break;
            }
            for (Job job : jobs) {
                T value = readOrBury(job);
                if (value != null) {
                    client.finish(job.id());
                    into.add(value);
                    n++;
                }
            }
        }
        return n;
    }

    // ------------------------------------------- taking, finished by a handler

    /**
     * Waits up to timeout for a due value and runs handler on it: its job is
     * finished when the handler returns, and released (delivered again
     * after {@link #retryDelay}) when it throws, which this rethrows.
     * Returns false when no value came in time.
     */
    public boolean poll(long timeout, TimeUnit unit, Handler<? super T> handler) throws Exception {
        Taken<T> taken = next(System.nanoTime() + unit.toNanos(timeout));
        if (taken == null) {
            return false;
        }
        try {
            handler.handle(taken.value());
        } catch (Exception | Error e) {
            client.release(taken.job().id(), retryDelay);
            throw e;
        }
        client.finish(taken.job().id());
        return true;
    }

    /** A job reserved, and the value its body stands for. */
    private record Taken<T>(Job job, T value) {
    }

    /** The next due job whose body the codec reads, reserved; null at the deadline (System.nanoTime()). */
    private Taken<T> next(long deadline) throws InterruptedException {
        for (;;) {
            if (Thread.interrupted()) {
                throw new InterruptedException();
            }
            double left = Math.max(0, (deadline - System.nanoTime()) / 1e9);
            Job job = client.pop(topic, Math.min(left, LONG_POLL_SECONDS));
            if (job == null) {
                if (left <= 0) {
                    return null;
                }
                continue;
            }
            T value = readOrBury(job);
            if (value != null) {
                return new Taken<>(job, value);
            }
        }
    }

    // ------------------------------------------------------------- the rest

    /** Adds value due now (as {@code DelayQueue.offer(value, 0, unit)}); always true. */
    @Override
    public boolean offer(T value) {
        client.add(NewJob.of(topic, codec.encode(value)));
        return true;
    }

    @Override
    public void put(T value) {
        offer(value);
    }

    @Override
    public boolean offer(T value, long timeout, TimeUnit unit) {
        return offer(value);
    }

    /** The topic's ready jobs now (stats): due values not yet taken. */
    @Override
    public int size() {
        Object topics = client.stats(topic).get("topics");
        Object figures = topics instanceof Map<?, ?> m ? m.get(topic) : null;
        Object ready = figures instanceof Map<?, ?> f ? f.get("ready") : null;
        return ready instanceof Number n ? (int) Math.min(Integer.MAX_VALUE, n.longValue()) : 0;
    }

    @Override
    public int remainingCapacity() {
        return Integer.MAX_VALUE;
    }

    @Override
    public T peek() {
        throw unsupported("peek");
    }

    @Override
    public Iterator<T> iterator() {
        throw unsupported("iterating (and remove, contains, toArray)");
    }

    private static UnsupportedOperationException unsupported(String what) {
        return new UnsupportedOperationException(what + " is not supported: delayq hands a job "
                + "out only by reserving it (take, poll, drainTo)");
    }

    /** The job's value, or null after burying a job whose body the codec refused. */
    private T readOrBury(Job job) {
        try {
            return codec.decode(job);
        } catch (RuntimeException e) {
            client.bury(job.id());
            return null;
        }
    }
}
