package io.delayq;

import java.util.Objects;
import java.util.UUID;
import java.util.function.BooleanSupplier;

/** Assertions for the tests, and what they share: the server's address and unique names. */
final class Check {
    private Check() {
    }

    static void equal(Object want, Object got) {
        equal(want, got, "");
    }

    static void equal(Object want, Object got, String what) {
        if (!Objects.equals(want, got)) {
            throw new AssertionError((what.isEmpty() ? "" : what + ": ") + "want <" + want + ">, got <" + got + ">");
        }
    }

    static void that(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    /** Runs body and returns what it throws; fails unless it throws a want. */
    static <T extends Throwable> T fails(Class<T> want, ThrowingRunnable body) {
        try {
            body.run();
        } catch (Throwable t) {
            if (want.isInstance(t)) {
                return want.cast(t);
            }
            throw new AssertionError("want " + want.getSimpleName() + ", got " + t, t);
        }
        throw new AssertionError("want " + want.getSimpleName() + ", nothing was thrown");
    }

    /** Waits up to seconds for cond; fails naming what. */
    static void eventually(double seconds, String what, BooleanSupplier cond) throws InterruptedException {
        long end = System.nanoTime() + (long) (seconds * 1e9 * slow());
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() > end) {
                throw new AssertionError("timed out waiting for " + what);
            }
            Thread.sleep(20);
        }
    }

    /** The harness' slowness factor (valgrind runs are slower). */
    static double slow() {
        String s = System.getenv("DELAYQ_TEST_SLOW");
        return s == null || s.isEmpty() ? 1.0 : Double.parseDouble(s);
    }

    static String unique(String base) {
        return base + "-" + UUID.randomUUID().toString().substring(0, 12);
    }

    static String env(String name) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) {
            throw new AssertionError("$" + name + " is not set (tests/clients/test_java_client.py sets it)");
        }
        return v;
    }

    static Client client() {
        return new Client(env("DELAYQ_URL"), env("DELAYQ_TOKEN"), null);
    }

    @FunctionalInterface
    interface ThrowingRunnable {
        void run() throws Exception;
    }
}
