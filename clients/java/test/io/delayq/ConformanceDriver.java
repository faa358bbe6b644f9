package io.delayq;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

/**
 * The Java client's driver for the Worker conformance suite
 * (tests/clients/test_worker_conformance.py documents the protocol):
 *
 * <pre>
 * java io.delayq.ConformanceDriver TOKEN BEHAVIOUR TOPIC URL [BEHAVIOUR TOPIC URL ...]
 * </pre>
 *
 * Runs a Worker once per triple, in this one JVM, and prints one JSON line
 * for each: behaviour, topic, run ("returned" or "raised:Type"), seconds,
 * calls. "stop-as-pop-returns" is skipped: Client is final, so nothing can
 * hook the end of a pop.
 */
public final class ConformanceDriver {
    private static final Duration CLIENT_TIMEOUT = Duration.ofSeconds(2);
    private static final long SAFETY_STOP_MS = 15000;

    private ConformanceDriver() {
    }

    public static void main(String[] args) throws Exception {
        String token = "-".equals(args[0]) ? null : args[0];
        for (int i = 1; i + 2 < args.length; i += 3) {
            System.out.println(Json.write(runOne(args[i], args[i + 1], args[i + 2], token)));
            System.out.flush();
        }
        System.exit(0);
    }

    private static Throwable make(String kind) {
        switch (kind) {
            case "Exception":
                return new Exception("the handler failed");
            case "RuntimeException":
                return new IllegalStateException("the handler failed");
            case "InterruptedException":
                return new InterruptedException("the handler was interrupted");
            case "AssertionError":
                return new AssertionError("an assertion failed");
            case "OutOfMemoryError":
                return new OutOfMemoryError("Java heap space (thrown by the handler)");
            default:
                throw new IllegalArgumentException("unknown kind " + kind);
        }
    }

    private static int recurse(int n) {
        return recurse(n + 1) + 1;
    }

    /** Throws kind: a StackOverflowError for real, the others as made. */
    private static void raise(String kind) throws Exception {
        if ("StackOverflowError".equals(kind)) {
            recurse(0);
        }
        Throwable t = make(kind);
        if (t instanceof Error) {
            throw (Error) t;
        }
        throw (Exception) t;
    }

    private static void stopFromAnotherThread(Worker w) throws InterruptedException {
        Thread t = new Thread(w::stop);
        t.start();
        t.join();
    }

    private static Map<String, Object> runOne(String behaviour, String topic, String url, String token)
            throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("behaviour", behaviour);
        out.put("topic", topic);
        if ("stop-as-pop-returns".equals(behaviour)) {
            out.put("skipped", "Client is final: the end of a pop cannot be hooked");
            return out;
        }
        Client client = new Client(url, token, CLIENT_TIMEOUT);
        AtomicInteger calls = new AtomicInteger();
        AtomicReference<Worker> self = new AtomicReference<>();
        Worker.Handler handler = job -> {
            calls.incrementAndGet();
            Worker w = self.get();
            if (behaviour.equals("stop-in-handler") || behaviour.equals("stop-in-handler-then-raise")
                    || behaviour.startsWith("raise:")) {
                stopFromAnotherThread(w);
            } else if (behaviour.equals("stop-after-handler")) {
                Thread t = new Thread(() -> {
                    sleep(300);
                    w.stop();
                });
                t.start();
            }
            if (behaviour.equals("stop-in-handler-then-raise")) {
                throw new IllegalStateException("the handler failed");
            }
            if (behaviour.startsWith("raise:")) {
                raise(behaviour.substring("raise:".length()));
            }
        };
        Worker w = Worker.builder(client, List.of(topic), handler).backoff(600)
                .pollTimeout("stop-during-poll".equals(behaviour) ? 20 : 2).handleSignals(false)
                .logger(System.getLogger("io.delayq.ConformanceDriver")).build();
        self.set(w);
        if ("stop-before-pop".equals(behaviour)) {
            w.stop();
        } else if ("stop-during-poll".equals(behaviour)) {
            new Thread(() -> {
                sleep(500);
                w.stop();
            }).start();
        }
        Thread safety = new Thread(() -> {
            if (sleep(SAFETY_STOP_MS)) {
                w.stop();
            }
        });
        safety.setDaemon(true);
        safety.start();
        long t0 = System.nanoTime();
        String run;
        try {
            w.run();
            run = "returned";
        } catch (Throwable e) {
            run = "raised:" + e.getClass().getSimpleName();
        }
        safety.interrupt();
        out.put("run", run);
        out.put("seconds", (System.nanoTime() - t0) / 1e9);
        out.put("calls", calls.get());
        return out;
    }

    /** Sleeps; false when interrupted. */
    private static boolean sleep(long ms) {
        try {
            Thread.sleep(ms);
            return true;
        } catch (InterruptedException e) {
            return false;
        }
    }
}
