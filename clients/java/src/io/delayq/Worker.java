package io.delayq;

import java.lang.System.Logger.Level;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A consumer: runs a handler for every job of some topics, on
 * {@code concurrency} threads, each with its own long-poll.
 *
 * <ul>
 * <li>The handler returns: the job is finished, by the next long-poll of
 * that thread (finish-and-pop: one request per job, not two); when run()
 * returns, a finish still pending is sent on its own first. A server
 * without finish-and-pop (400 naming 'finish') gets a finish per job
 * instead, after one warning.</li>
 * <li>The handler throws: the job is released, due again after the backoff
 * step for its attempt ({@code backoff[attempts - 1]}, the last step
 * repeating), or buried once {@code maxAttempts} deliveries failed.</li>
 * <li>Heartbeat (on by default): while the handler runs, the job is
 * {@code touch}ed every half TTR, so a handler may take longer than the
 * job's TTR without the job being delivered again.</li>
 * <li>SIGTERM or SIGINT (a JVM shutdown hook installed by run()), or stop()
 * from any thread: each thread's job in hand is finished or released as
 * usual, pending finishes are sent, then run() returns and the JVM exits.
 * A long-poll in progress is cancelled; a job the server reserved for it
 * in that instant is delivered again after its TTR (at-least-once).</li>
 * <li>5xx answers and connection failures while polling are logged and
 * retried after {@code errorPause} seconds (doubling up to 30 s), carrying
 * the pending finishes again; a 4xx while polling (a bad topic, a token
 * refused) stops every thread and is thrown from run().</li>
 * </ul>
 *
 * <pre>
 * Worker worker = Worker.builder(client, List.of("close-order"), job -&gt; closeIfUnpaid(job))
 *         .concurrency(4).build();
 * worker.run();   // until SIGTERM
 * </pre>
 */
public final class Worker {
    /**
     * The work done for one job; throwing anything means "try again later"
     * (an Error also stops the worker: run() throws it).
     */
    @FunctionalInterface
    public interface Handler {
        void handle(Job job) throws Exception;
    }

    /** Seconds before the 2nd, 3rd, 4th, 5th (and every later) delivery. */
    public static final double[] DEFAULT_BACKOFF = {15, 180, 600, 1800};
    private static final double MAX_ERROR_PAUSE = 30;

    private final Client client;
    private final List<String> topics;
    private final Handler handler;
    private final int concurrency;
    private final double pollTimeout;
    private final double[] backoff;
    private final int maxAttempts;
    private final boolean heartbeat;
    private final boolean handleSignals;
    private final double errorPause;
    private final System.Logger log;

    private volatile boolean stopping;
    private final CountDownLatch stopped = new CountDownLatch(1);
    private final AtomicBoolean running = new AtomicBoolean();
    private final AtomicLong handled = new AtomicLong();
    // False once the server refused `finish` on pop (an older server).
    private volatile boolean carry = true;
    private final List<Loop> loops = new ArrayList<>();

    private Worker(Builder b) {
        this.client = b.client;
        this.topics = List.copyOf(b.topics);
        this.handler = b.handler;
        this.concurrency = b.concurrency;
        this.pollTimeout = b.pollTimeout;
        this.backoff = b.backoff.clone();
        this.maxAttempts = b.maxAttempts;
        this.heartbeat = b.heartbeat;
        this.handleSignals = b.handleSignals;
        this.errorPause = b.errorPause;
        this.log = b.log != null ? b.log : System.getLogger("io.delayq.Worker");
    }

    public static Builder builder(Client client, List<String> topics, Handler handler) {
        return new Builder(client, topics, handler);
    }

    /** Options of a Worker; every one has a default. */
    public static final class Builder {
        private final Client client;
        private final List<String> topics;
        private final Handler handler;
        private int concurrency = 1;
        private double pollTimeout = 20;
        private double[] backoff = DEFAULT_BACKOFF;
        private int maxAttempts;
        private boolean heartbeat = true;
        private boolean handleSignals = true;
        private double errorPause = 1;
        private System.Logger log;

        private Builder(Client client, List<String> topics, Handler handler) {
            if (client == null || handler == null || topics == null || topics.isEmpty()) {
                throw new IllegalArgumentException("a Worker needs a client, topics and a handler");
            }
            this.client = client;
            this.topics = topics;
            this.handler = handler;
        }

        /** Jobs handled at once, each on a thread with its own long-poll (default 1). */
        public Builder concurrency(int n) {
            if (n < 1) {
                throw new IllegalArgumentException("concurrency must be >= 1");
            }
            concurrency = n;
            return this;
        }

        /** Seconds each long-poll waits for a job, 0..60 (default 20). */
        public Builder pollTimeout(double seconds) {
            if (!(seconds >= 0 && seconds <= 60)) {
                throw new IllegalArgumentException("pollTimeout must be 0..60 seconds");
            }
            pollTimeout = seconds;
            return this;
        }

        /** Seconds before each redelivery of a failed job (default 15, 180, 600, 1800). */
        public Builder backoff(double... steps) {
            for (double s : steps) {
                if (!(s >= 0)) {
                    throw new IllegalArgumentException("backoff steps must be >= 0");
                }
            }
            backoff = steps.clone();
            return this;
        }

        /** Deliveries after which a failing job is buried instead of released (0: no limit, the default). */
        public Builder maxAttempts(int n) {
            if (n < 0) {
                throw new IllegalArgumentException("maxAttempts must be >= 0");
            }
            maxAttempts = n;
            return this;
        }

        /** Touch each job every half TTR while its handler runs (default true). */
        public Builder heartbeat(boolean on) {
            heartbeat = on;
            return this;
        }

        /** Stop gracefully on SIGTERM/SIGINT through a shutdown hook (default true). */
        public Builder handleSignals(boolean on) {
            handleSignals = on;
            return this;
        }

        /** Seconds to wait after a failed poll, doubling up to 30 (default 1). */
        public Builder errorPause(double seconds) {
            errorPause = seconds;
            return this;
        }

        public Builder logger(System.Logger logger) {
            log = logger;
            return this;
        }

        public Worker build() {
            return new Worker(this);
        }
    }

    // ------------------------------------------------------------ control

    /** Asks run() to return after the jobs in hand (safe from any thread). */
    public void stop() {
        stopping = true;
        stopped.countDown();
        synchronized (loops) {
            for (Loop loop : loops) {
                loop.cancelPoll();
            }
        }
    }

    public boolean isStopping() {
        return stopping;
    }

    /** Jobs whose handler returned so far. */
    public long handled() {
        return handled.get();
    }

    /** Seconds before the next delivery of a job that failed on delivery number attempts (1 = first). */
    public double backoffFor(int attempts) {
        if (backoff.length == 0) {
            return 0;
        }
        return backoff[Math.min(Math.max(attempts, 1), backoff.length) - 1];
    }

    /**
     * Handles jobs until stop(), SIGTERM or SIGINT; a Worker runs once.
     * After SIGTERM the JVM exits as soon as run() returned (the shutdown
     * hook waits for that much only): code after run() may not run then.
     *
     * @throws ClientException a 4xx while polling (after the pending finishes were sent)
     */
    public void run() {
        if (!running.compareAndSet(false, true)) {
            throw new IllegalStateException("a Worker runs once");
        }
        CountDownLatch done = new CountDownLatch(1);
        Thread hook = handleSignals ? new Thread(() -> {
            stop();
            try {
                done.await();   // the JVM exits when this returns: let the jobs in hand end first
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "delayq-worker-shutdown") : null;
        if (hook != null) {
            Runtime.getRuntime().addShutdownHook(hook);
        }
        AtomicInteger n = new AtomicInteger();
        ScheduledExecutorService beats = Executors.newScheduledThreadPool(concurrency, r -> {
            Thread t = new Thread(r, "delayq-heartbeat-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        });
        try {
            log.log(Level.INFO, "worker started on {0} with {1} thread(s)", topics, concurrency);
            List<Thread> threads = new ArrayList<>();
            for (int i = 0; i < concurrency; i++) {
                Loop loop = new Loop(beats);
                Thread t = new Thread(loop, "delayq-worker-" + (i + 1));
                loop.thread = t;
                synchronized (loops) {
                    loops.add(loop);
                }
                threads.add(t);
            }
            for (Thread t : threads) {
                t.start();
            }
            for (Thread t : threads) {
                joinUninterruptibly(t);
            }
            for (Loop loop : loops) {
                if (loop.failure instanceof RuntimeException) {
                    throw (RuntimeException) loop.failure;
                }
                if (loop.failure instanceof Error) {
                    throw (Error) loop.failure;
                }
            }
            log.log(Level.INFO, "worker stopped after {0} job(s)", handled.get());
        } finally {
            beats.shutdownNow();
            done.countDown();
            if (hook != null) {
                try {
                    Runtime.getRuntime().removeShutdownHook(hook);
                } catch (IllegalStateException e) {
                    // the JVM is shutting down: the hook is running
                }
            }
        }
    }

    private static void joinUninterruptibly(Thread t) {
        boolean interrupted = false;
        while (t.isAlive()) {
            try {
                t.join();
            } catch (InterruptedException e) {
                interrupted = true;
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    // ------------------------------------------------------------ one thread's loop

    /** A job handled but not yet finished, and whether a request that may have finished it went out already. */
    private record Pending(Job job, boolean maybeDone) {
    }

    private final class Loop implements Runnable {
        private final ScheduledExecutorService beats;
        private Thread thread;
        private boolean polling;   // guarded by this
        private Throwable failure;
        private double pause = errorPause;
        // Jobs handled and not yet finished, in order: their finish rides on the next pop.
        private final Map<String, Pending> pending = new LinkedHashMap<>();

        Loop(ScheduledExecutorService beats) {
            this.beats = beats;
        }

        /** Interrupts a long-poll in progress, never a handler. */
        synchronized void cancelPoll() {
            if (polling) {
                thread.interrupt();
            }
        }

        @Override
        public void run() {
            try {
                while (!stopping) {
                    step();
                }
            } catch (RuntimeException | Error e) {
                // a 4xx while polling (ServerExceptions are retried in step),
                // an Error from the handler (its job released), or a bug:
                // every thread stops and run() throws it
                failure = e;
                log.log(Level.ERROR, "the worker stops: " + e);
                stop();
            } finally {
                flush();
            }
        }

        private void step() {
            Job job;
            try {
                job = poll();
            } catch (ServerException e) {
                log.log(Level.WARNING, "pop failed: " + e.getMessage() + "; trying again in " + pause + " s");
                sleep(pause);
                pause = Math.min(Math.max(pause, 0.1) * 2, MAX_ERROR_PAUSE);
                return;
            }
            pause = errorPause;
            if (job != null) {
                handle(job);
            }
        }

        private Job poll() {
            List<String> carried = new ArrayList<>();
            if (carry) {
                for (String id : pending.keySet()) {
                    if (carried.size() == Client.MAX_IDS) {
                        break;
                    }
                    carried.add(id);
                }
            }
            // stop() sets `stopping` before it looks at `polling`; here
            // `polling` is set after `stopping` was checked, under the same
            // lock: a stop either prevents the pop or cancels it.
            synchronized (this) {
                if (stopping) {
                    return null;
                }
                polling = true;
            }
            Popped popped;
            try {
                popped = client.finishAndPop(topics, pollTimeout, carried);
            } catch (ConnectionLostException e) {
                markMaybeFinished(carried);   // an interrupted or lost pop: unknown
                if (stopping) {
                    return null;
                }
                throw e;
            } catch (UnavailableException e) {
                throw e;   // nothing was done: carried again as it is
            } catch (ServerException e) {
                markMaybeFinished(carried);   // a 504: unknown
                throw e;
            } catch (BadRequestException e) {
                if (carried.isEmpty() || !e.reason().contains("'finish'")) {
                    throw e;
                }
                log.log(Level.WARNING, "the server does not take finish on pop (" + e.reason()
                        + "); finishing each job with a request of its own");
                carry = false;
                flush();
                return null;
            } finally {
                synchronized (this) {
                    polling = false;
                    Thread.interrupted();   // a cancel that came as the pop ended
                }
            }
            settle(carried, popped.finished());
            return popped.job();
        }

        private void markMaybeFinished(List<String> ids) {
            for (String id : ids) {
                pending.computeIfPresent(id, (k, p) -> new Pending(p.job(), true));
            }
        }

        /** Takes the `finished` outcomes of a pop that carried `carried`. */
        private void settle(List<String> carried, List<Result> finished) {
            Map<String, Result> outcome = new LinkedHashMap<>();
            for (Result r : finished) {
                outcome.put(r.id(), r);
            }
            for (String id : carried) {
                Pending p = pending.get(id);
                Result r = outcome.get(id);
                if (r != null && ("unavailable".equals(r.code()) || "timeout".equals(r.code()))) {
                    // That id's shard failed (several shards): carried again.
                    pending.put(id, new Pending(p.job(), p.maybeDone() || "timeout".equals(r.code())));
                    log.log(Level.WARNING, "finishing job " + id + " failed: " + r.error()
                            + "; trying again with the next pop");
                    continue;
                }
                pending.remove(id);
                if (r == null) {
                    log.log(Level.ERROR, "the server did not say whether job " + id + " was finished");
                } else if ("not_found".equals(r.code())) {
                    gone(p);
                } else if (!r.success()) {
                    log.log(Level.ERROR, "finishing job " + id + " failed: " + r.error()
                            + "; it will be delivered again after its TTR");
                }
            }
        }

        /** Sends the pending finishes, each with a request of its own. */
        private void flush() {
            while (!pending.isEmpty()) {
                String id = pending.keySet().iterator().next();
                Pending p = pending.remove(id);
                try {
                    client.finish(id);
                } catch (NotFoundException e) {
                    gone(p);
                } catch (DelayqException e) {
                    log.log(Level.ERROR, "finishing job " + id + " failed: " + e.getMessage()
                            + "; it will be delivered again after its TTR");
                }
            }
        }

        private void gone(Pending p) {
            if (!p.maybeDone()) {
                log.log(Level.WARNING, "job " + p.job().id() + " was gone before it could be finished (deleted, "
                        + "or its TTR of " + p.job().ttr() + " s had passed)");
            }
        }

        /**
         * Runs the handler. Anything it throws releases the job; an Error
         * (a StackOverflowError, an OutOfMemoryError, an AssertionError)
         * then stops the worker too, and run() throws it.
         */
        private void handle(Job job) {
            Heartbeat beat = heartbeat ? new Heartbeat(job, beats) : null;
            try {
                handler.handle(job);
            } catch (Throwable e) {
                if (beat != null) {
                    beat.stop();
                }
                failed(job, e);
                if (e instanceof Error) {
                    throw (Error) e;
                }
                return;
            }
            if (beat != null) {
                beat.stop();
            }
            handled.incrementAndGet();
            pending.put(job.id(), new Pending(job, false));
            if (!carry) {
                flush();
            }
        }

        private void failed(Job job, Throwable cause) {
            String what = cause.getClass().getSimpleName() + ": " + cause.getMessage();
            try {
                if (maxAttempts > 0 && job.attempts() >= maxAttempts) {
                    client.bury(job.id());
                    log.log(Level.ERROR, "job " + job.id() + " failed on attempt " + job.attempts() + " (" + what
                            + "); buried");
                    return;
                }
                double delay = backoffFor(job.attempts());
                String state = client.release(job.id(), delay);
                log.log("buried".equals(state) ? Level.ERROR : Level.WARNING, "job " + job.id() + " failed on attempt "
                        + job.attempts() + " (" + what + "); " + ("buried".equals(state) ? "buried: its retries are used up"
                        : "retry in " + delay + " s"));
            } catch (ConflictException | NotFoundException e) {
                log.log(Level.WARNING, "job " + job.id() + " failed (" + what + ") and was no longer reserved");
            } catch (DelayqException e) {
                log.log(Level.ERROR, "job " + job.id() + " failed (" + what + "); giving it back failed too ("
                        + e.getMessage() + "): it will be delivered again after its TTR");
            }
        }

        private void sleep(double seconds) {
            try {
                stopped.await((long) (seconds * 1000), TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    // ------------------------------------------------------------ heartbeat

    /** Touches a job every half TTR while its handler runs. */
    private final class Heartbeat {
        private final Job job;
        private final ScheduledFuture<?> task;
        private volatile boolean over;

        Heartbeat(Job job, ScheduledExecutorService beats) {
            this.job = job;
            long period = Math.max(50, (long) (job.ttr() * 500));
            this.task = beats.scheduleAtFixedRate(this::beat, period, period, TimeUnit.MILLISECONDS);
        }

        private void beat() {
            try {
                client.touch(job.id());
            } catch (ConflictException | NotFoundException e) {
                if (!over) {
                    log.log(Level.WARNING, "job " + job.id() + " lost its reservation while being handled ("
                            + e.getMessage() + "); it may be delivered again");
                }
                task.cancel(false);
            } catch (DelayqException e) {
                if (!over) {
                    log.log(Level.WARNING, "touching job " + job.id() + " failed: " + e.getMessage());
                }
            }
        }

        void stop() {
            over = true;
            task.cancel(false);
        }
    }
}
