package io.delayq;

import java.time.Instant;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A job to add, built fluently:
 * <pre>
 * client.add(NewJob.of("close-order", Map.of("order", 42)).id("close-order-42").delay(1800).ttr(60));
 * </pre>
 * The body is any value {@link Json} writes (a String is sent as a JSON
 * string; {@code Json.raw(text)} sends JSON text as it stands).
 */
public final class NewJob {
    private final String topic;
    private final Object body;
    private String id;
    private Double delay;
    private Double at;
    private boolean replace;
    private final JobOptions options = new JobOptions();

    private NewJob(String topic, Object body) {
        if (topic == null) {
            throw new IllegalArgumentException("a job needs a topic");
        }
        this.topic = topic;
        this.body = body;
    }

    public static NewJob of(String topic, Object body) {
        return new NewJob(topic, body);
    }

    /** The job's id (unique among live jobs of every topic); the server makes one when unset. */
    public NewJob id(String id) {
        this.id = id;
        return this;
    }

    public String id() {
        return id;
    }

    /**
     * Upsert (needs an id): a delayed, ready or buried job with this id and
     * topic is replaced by this one (body, due time, ttr, retries, backoff,
     * callback; what is unset takes add's default), else the job is created.
     * See {@link Client#upsert(NewJob)}.
     */
    public NewJob replace() {
        this.replace = true;
        return this;
    }

    public boolean replacing() {
        return replace;
    }

    /** Seconds until it is due (fractions kept to the millisecond); not with at. */
    public NewJob delay(double seconds) {
        this.delay = seconds;
        return this;
    }

    /** When it is due; not with delay. */
    public NewJob at(Instant when) {
        this.at = when.toEpochMilli() / 1000.0;
        return this;
    }

    /** Seconds a consumer has to finish it once popped (server default 60). */
    public NewJob ttr(double seconds) {
        options.ttr(seconds);
        return this;
    }

    /** Redeliveries allowed before the job is buried (unset: no limit). */
    public NewJob retries(int n) {
        options.retries(n);
        return this;
    }

    /** Seconds to wait after each failed delivery (the last step repeats). */
    public NewJob backoff(double... steps) {
        options.backoff(steps);
        return this;
    }

    /** The "stepped" schedule: 15 s, 3 min, 10 min, 30 min, 30 min, 1 h, 2 h, 6 h, 15 h. */
    public NewJob steppedBackoff() {
        options.steppedBackoff();
        return this;
    }

    /** delayq POSTs the body to url when the job is due, instead of handing it to pop (timeout 10 s). */
    public NewJob callback(String url) {
        options.callback(url, null);
        return this;
    }

    /** As {@link #callback(String)}, waiting up to timeout seconds for the receiver's answer. */
    public NewJob callback(String url, double timeout) {
        options.callback(url, timeout);
        return this;
    }

    Map<String, Object> fields() {
        Map<String, Object> f = new LinkedHashMap<>();
        f.put("topic", topic);
        f.put("body", body);
        JobOptions.putIfSet(f, "id", id);
        JobOptions.putIfSet(f, "delay", delay);
        JobOptions.putIfSet(f, "at", at);
        if (replace) {
            f.put("replace", true);
        }
        options.putInto(f);
        return f;
    }
}
