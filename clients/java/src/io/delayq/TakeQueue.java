package io.delayq;

import java.util.AbstractQueue;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

/**
 * The due values of a {@link DelayQueue}, as a {@link BlockingQueue}: a
 * value is taken by popping its job, and its job is finished before the
 * value is handed over (Redisson's semantics: once taken, it is the
 * caller's). {@link #poll(long, TimeUnit, Handler)} instead finishes a
 * job only when its handler returned, and gives it back otherwise, so a
 * consumer that fails or dies mid-way loses nothing (at-least-once).
 *
 * <p>Interrupts, as {@link BlockingQueue} says: {@link #take()} and the
 * polls with a timeout throw {@link InterruptedException} at once when the
 * thread is interrupted while they wait, or enters them interrupted. The
 * long-poll then in flight is left to end on its own (cancelling it could
 * lose a job the service reserved for it in that instant): a job it brings
 * is handed back (released, ready again at once) for the next take. A job
 * popped before the interrupt came is delivered: its finish (or its
 * handler's finish or release) still runs, and the value is returned with
 * the thread's interrupt flag set. The other service calls here are not cut
 * short by an interrupt either; the flag stays set for the caller.
 *
 * <p>Against the service, what the {@link java.util.Collection} methods do:
 * {@link #size()} is the topic's ready jobs (one stats request; the values
 * not yet due are not counted, as they are not in Redisson's blocking
 * queue yet), {@link #isEmpty()} is {@code size() == 0}, {@link #clear()}
 * deletes the ready jobs (not the delayed ones, nor those reserved by a
 * consumer), {@link #remove()} takes one value as {@link #poll()} does
 * (NoSuchElementException when none is due), {@link #toString()} names the
 * topic and the service and sends nothing, {@link #remainingCapacity()} is
 * unbounded, and {@link #offer(Object)}, {@code add} and {@code put} add a
 * value due now. What a delay queue in Redis cannot do cheaply is refused
 * with {@link UnsupportedOperationException}: {@link #peek()} (and
 * {@code element()}), {@link #iterator()} (and so {@code remove(Object)},
 * {@code removeAll}, {@code retainAll}, {@code removeIf}, {@code contains},
 * {@code toArray}): delayq hands a job out only by reserving it.
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
    private static final System.Logger LOG = System.getLogger("io.delayq.TakeQueue");
    /**
     * The threads the service calls run on, so that an interrupt of the
     * caller neither cancels a request half-way (the Client would close its
     * connection, the outcome unknown) nor keeps the caller waiting on it.
     * Daemon threads: an abandoned long-poll does not hold the JVM up.
     */
    private static final ExecutorService CALLS = Executors.newCachedThreadPool(run -> {
        Thread t = new Thread(run, "delayq-take");
        t.setDaemon(true);
        return t;
    });

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
        uninterruptibly(() -> {
            client.finish(taken.job().id());
            return null;
        });
        return taken.value();
    }

    /** A due value now, or null (null too when the thread is interrupted: it keeps its flag). */
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
            int count = Math.min(max - n, DRAIN_BATCH);
            List<Job> jobs = uninterruptibly(() -> client.popMany(List.of(topic), count, 0));
            if (jobs.isEmpty()) {
                break;
            }
            List<String> taken = new ArrayList<>();
            for (Job job : jobs) {
                T value = readOrBury(job);
                if (value != null) {
                    taken.add(job.id());
                    into.add(value);
                }
            }
            uninterruptibly(() -> client.finishMany(taken));
            n += taken.size();
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
        String id = taken.job().id();
        try {
            handler.handle(taken.value());
        } catch (Exception | Error e) {
            uninterruptibly(() -> client.release(id, retryDelay));
            throw e;
        }
        uninterruptibly(() -> {
            client.finish(id);
            return null;
        });
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
            Job job = pop(Math.min(left, LONG_POLL_SECONDS));
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

    /**
     * One long-poll of up to wait seconds, given up at once when the thread
     * is interrupted: the request runs on, and a job it brings is handed
     * back, ready again at once (a release; the job counts one more
     * delivery, and is buried instead if it has retries and used them up).
     */
    private Job pop(double wait) throws InterruptedException {
        CompletableFuture<Job> popping = CompletableFuture.supplyAsync(() -> client.pop(topic, wait), CALLS);
        try {
            return popping.get();
        } catch (InterruptedException e) {
            popping.thenAccept(job -> {
                if (job != null) {
                    handBack(job);
                }
            });
            throw e;
        } catch (ExecutionException e) {
            throw rethrown(e.getCause());
        }
    }

    private void handBack(Job job) {
        try {
            client.release(job.id(), 0);
        } catch (DelayqException e) {
            LOG.log(System.Logger.Level.WARNING, "job " + job.id() + " of " + topic + ", popped for a take that was "
                    + "interrupted, could not be handed back; it is delivered again after its TTR: " + e);
        }
    }

    // ------------------------------------------------------------- the rest

    /** Adds value due now (as {@code DelayQueue.offer(value, 0, unit)}); always true. */
    @Override
    public boolean offer(T value) {
        Object body = codec.encode(value);
        uninterruptibly(() -> client.add(NewJob.of(topic, body)));
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

    /** The topic's ready jobs now (stats): due values not yet taken; the delayed ones are not counted. */
    @Override
    public int size() {
        Object topics = uninterruptibly(() -> client.stats(topic)).get("topics");
        Object figures = topics instanceof Map<?, ?> m ? m.get(topic) : null;
        Object ready = figures instanceof Map<?, ?> f ? f.get("ready") : null;
        return ready instanceof Number n ? (int) Math.min(Integer.MAX_VALUE, n.longValue()) : 0;
    }

    /** No due value now: {@code size() == 0} (one stats request). */
    @Override
    public boolean isEmpty() {
        return size() == 0;
    }

    /**
     * Deletes the due values: the topic's ready jobs, whatever their body,
     * until none is left (as deletes: they count as deleted, not finished).
     * The values not yet due stay (delete one by the id
     * {@link DelayQueue#offer} returned), and so do the jobs reserved by a
     * consumer.
     */
    @Override
    public void clear() {
        for (;;) {
            List<Job> jobs = uninterruptibly(() -> client.popMany(List.of(topic), DRAIN_BATCH, 0));
            if (jobs.isEmpty()) {
                return;
            }
            List<String> ids = new ArrayList<>();
            for (Job job : jobs) {
                ids.add(job.id());
            }
            uninterruptibly(() -> client.deleteMany(ids));
        }
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
        throw unsupported("iterating (and remove(Object), contains, toArray)");
    }

    /** The topic and the service; sends nothing. */
    @Override
    public String toString() {
        return "TakeQueue(" + topic + " at " + client.url() + ")";
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
            uninterruptibly(() -> {
                client.bury(job.id());
                return null;
            });
            return null;
        }
    }

    /**
     * The call's answer, waited for through interrupts: an interrupt cannot
     * cancel it half-way, and is kept in the thread's flag.
     */
    static <R> R uninterruptibly(Supplier<R> call) {
        try {
            return CompletableFuture.supplyAsync(call, CALLS).join();
        } catch (CompletionException e) {
            throw rethrown(e.getCause());
        }
    }

    /** A service call's failure, as the caller's thread throws it (a DelayqException, say). */
    private static RuntimeException rethrown(Throwable failure) {
        if (failure instanceof RuntimeException r) {
            return r;
        }
        if (failure instanceof Error e) {
            throw e;
        }
        return new IllegalStateException(failure);
    }
}
