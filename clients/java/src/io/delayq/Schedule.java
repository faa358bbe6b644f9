package io.delayq;

import java.time.Instant;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A periodic job: each fire time T adds the job "&lt;id&gt;@&lt;T&gt;" to the topic.
 * <pre>
 * client.schedule(Schedule.cron("nightly", "report", Map.of("kind", "daily"), "0 3 * * *").tz("Asia/Shanghai"));
 * client.schedule(Schedule.every("sweep", "sweeper", "go", 300));
 * </pre>
 */
public final class Schedule {
    private final String id;
    private final String topic;
    private final Object body;
    private final String cron;
    private final Long every;
    private String tz;
    private Long start;
    private Long end;
    private final JobOptions options = new JobOptions();

    private Schedule(String id, String topic, Object body, String cron, Long every) {
        this.id = id;
        this.topic = topic;
        this.body = body;
        this.cron = cron;
        this.every = every;
    }

    /** Fires by a cron expression (five fields or a macro such as @daily), in UTC unless {@link #tz}. */
    public static Schedule cron(String id, String topic, Object body, String expression) {
        return new Schedule(id, topic, body, expression, null);
    }

    /** Fires every so many seconds (1 to 366 days). */
    public static Schedule every(String id, String topic, Object body, long seconds) {
        return new Schedule(id, topic, body, null, seconds);
    }

    /** An IANA zone name for the cron expression. */
    public Schedule tz(String zone) {
        this.tz = zone;
        return this;
    }

    /** No fire before this time (whole seconds). */
    public Schedule start(Instant when) {
        this.start = when.getEpochSecond();
        return this;
    }

    /** No fire after this time (whole seconds). */
    public Schedule end(Instant when) {
        this.end = when.getEpochSecond();
        return this;
    }

    public Schedule ttr(double seconds) {
        options.ttr(seconds);
        return this;
    }

    public Schedule retries(int n) {
        options.retries(n);
        return this;
    }

    public Schedule backoff(double... steps) {
        options.backoff(steps);
        return this;
    }

    public Schedule steppedBackoff() {
        options.steppedBackoff();
        return this;
    }

    /** Each fire is delivered to url by delayq-push. */
    public Schedule callback(String url) {
        options.callback(url, null);
        return this;
    }

    public Schedule callback(String url, double timeout) {
        options.callback(url, timeout);
        return this;
    }

    Map<String, Object> fields() {
        Map<String, Object> f = new LinkedHashMap<>();
        f.put("id", id);
        f.put("topic", topic);
        f.put("body", body);
        JobOptions.putIfSet(f, "cron", cron);
        JobOptions.putIfSet(f, "every", every);
        JobOptions.putIfSet(f, "tz", tz);
        JobOptions.putIfSet(f, "start", start);
        JobOptions.putIfSet(f, "end", end);
        options.putInto(f);
        return f;
    }
}
