package io.delayq;

import java.io.IOException;
import java.net.ConnectException;
import java.net.URI;
import java.net.URISyntaxException;
import java.net.http.HttpClient;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * A delayq client over HTTP/1.1 (java.net.http, keep-alive connections).
 *
 * <p>Safe to share between threads: each call is a request of its own on
 * a pooled connection, a long-poll pop included. Errors are unchecked
 * {@link DelayqException}s, one class per protocol code.
 *
 * <pre>
 * Client client = new Client("http://127.0.0.1:8080");
 * client.add(NewJob.of("order", Map.of("order", 42)).id("order-42").delay(1800).ttr(60));
 * Job job = client.pop("order", 20);
 * if (job != null) {
 *     ...
 *     client.finish(job.id());
 * }
 * </pre>
 */
public final class Client {
    public static final String DEFAULT_URL = "http://127.0.0.1:8080";
    static final String USER_AGENT = "delayq-java/0.1.0";
    /** The most ids one request may name (batch finish/delete, pop's finish). */
    public static final int MAX_IDS = 1000;

    // Commands whose resend cannot change anything beyond what the first
    // send did: after a connection broke under one, it is sent once more.
    private static final Set<String> RESEND_SAFE = Set.of("get", "jobs", "stats", "schedules", "touch",
            "pause", "resume", "health", "metrics");

    private final String url;
    private final String prefix;
    private final String token;
    private final Duration timeout;
    private final HttpClient http;

    /** A client of $DELAYQ_URL (default http://127.0.0.1:8080) with $DELAYQ_TOKEN, if set. */
    public Client() {
        this(null, null, null);
    }

    public Client(String url) {
        this(url, null, null);
    }

    /**
     * @param url     the server, e.g. "http://127.0.0.1:8080" (a path prefix
     *                such as "https://host/delayq" is kept); null: $DELAYQ_URL,
     *                else http://127.0.0.1:8080
     * @param token   sent as "Authorization: Bearer &lt;token&gt;"; null: $DELAYQ_TOKEN, else none
     * @param timeout to connect, and for each answer (a long-poll waits that
     *                long on top of its own timeout); null: 30 s
     */
    public Client(String url, String token, Duration timeout) {
        if (url == null || url.isEmpty()) {
            url = System.getenv("DELAYQ_URL");
        }
        if (url == null || url.isEmpty()) {
            url = DEFAULT_URL;
        }
        if (!url.contains("://")) {
            url = "http://" + url;
        }
        URI base;
        try {
            base = new URI(url);
        } catch (URISyntaxException e) {
            throw new IllegalArgumentException("delayq url must be http://host[:port][/prefix], not " + url, e);
        }
        if (!("http".equals(base.getScheme()) || "https".equals(base.getScheme())) || base.getHost() == null) {
            throw new IllegalArgumentException("delayq url must be http://host[:port][/prefix] or https://..., not " + url);
        }
        this.url = url;
        String path = base.getRawPath() == null ? "" : base.getRawPath();
        this.prefix = base.getScheme() + "://" + base.getRawAuthority() + path.replaceAll("/+$", "");
        if (token == null) {
            token = System.getenv("DELAYQ_TOKEN");
        }
        this.token = token == null || token.isEmpty() ? null : token;
        this.timeout = timeout != null ? timeout : Duration.ofSeconds(30);
        if (this.timeout.isNegative() || this.timeout.isZero()) {
            throw new IllegalArgumentException("timeout must be > 0");
        }
        // nginx speaks HTTP/1.1 to us; no h2c upgrade attempt.
        this.http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(this.timeout).followRedirects(HttpClient.Redirect.NEVER).build();
    }

    public String url() {
        return url;
    }

    @Override
    public String toString() {
        return "Client(" + url + ")";
    }

    // ------------------------------------------------------------ add

    /** Adds a job with a server-made id, ready now; returns the id. */
    public String add(String topic, Object body) {
        return add(NewJob.of(topic, body));
    }

    /**
     * Adds a job; returns its id (the server makes one when none was set).
     *
     * @throws ConflictException when a live job has this id (an upsert: when
     *         it is reserved, or of another topic)
     */
    public String add(NewJob job) {
        return Answers.string(addAnswer(job), "id");
    }

    /**
     * Upsert: replaces the delayed, ready or buried job of job's id and topic
     * by job (its trace context, if any, stays), or creates it (there was
     * none, or only its kept record). Returns true when it replaced one,
     * false when it created it.
     *
     * @throws ConflictException when the job is reserved (a consumer or a
     *         callback holds it) or of another topic; nothing changed
     * @throws IllegalArgumentException when job has no id
     */
    public boolean upsert(NewJob job) {
        if (job.id() == null) {
            throw new IllegalArgumentException("an upsert names its job: set its id");
        }
        return Boolean.TRUE.equals(addAnswer(job.replace()).get("replaced"));
    }

    /** One add, resent after a lost connection when it names its id. */
    private Map<String, Object> addAnswer(NewJob job) {
        Sent sent = send("POST", "add", Json.write(job.fields()), 0, job.id() != null);
        try {
            return decode(sent);
        } catch (ConflictException e) {
            // A plain add's conflict after a resend: the first send reached
            // the server and took. An upsert's resend replaces again, to the
            // same job: its conflict is a real one.
            if (sent.resent && !job.replacing()) {
                return Map.of("id", job.id());
            }
            throw e;
        }
    }

    /**
     * Adds 1..1000 jobs in one request. An invalid job throws
     * BadRequestException naming its index ("jobs[3].ttr") and adds nothing;
     * otherwise each job is added on its own and its Result says how, in order.
     */
    public List<Result> addMany(List<NewJob> jobs) {
        if (jobs.isEmpty()) {
            return List.of();
        }
        List<Object> batch = new ArrayList<>();
        for (NewJob j : jobs) {
            batch.add(j.fields());
        }
        return Result.listOf(call("add", Map.of("jobs", batch)).get("results"));
    }

    // ------------------------------------------------------------ pop

    /**
     * Reserves the next ready job of the topic (or of the first non-empty
     * topic of a comma list "a,b"), waiting up to timeout seconds (0..60);
     * null when there is none.
     */
    public Job pop(String topics, double timeout) {
        return pop(splitTopics(topics), timeout);
    }

    /** As {@link #pop(String, double)}, the topics tried in order. */
    public Job pop(List<String> topics, double timeout) {
        return popCall(topics, 0, timeout, null).job();
    }

    /** Reserves up to count (1..100) jobs, from the first topic first; waits up to timeout for the first. */
    public List<Job> popMany(List<String> topics, int count, double timeout) {
        return popCall(topics, count, timeout, null).jobs();
    }

    /**
     * Finish-and-pop: finishes the jobs of {@code finish} (1..1000 ids, as
     * finish would) and takes the next job, in one request; a consumer loop
     * costs one request per job. The finishes happen at once, before a
     * long-poll waits. An empty finish list sends none.
     */
    public Popped finishAndPop(List<String> topics, double timeout, Collection<String> finish) {
        return popCall(topics, 0, timeout, finish);
    }

    /** Finish-and-pop of up to count jobs. */
    public Popped finishAndPopMany(List<String> topics, int count, double timeout, Collection<String> finish) {
        if (count < 1) {
            throw new IllegalArgumentException("count must be >= 1");
        }
        return popCall(topics, count, timeout, finish);
    }

    private Popped popCall(List<String> topics, int count, double timeout, Collection<String> finish) {
        Map<String, Object> fields = new LinkedHashMap<>();
        if (topics.size() == 1) {
            fields.put("topic", topics.get(0));
        } else {
            fields.put("topics", topics);
        }
        if (count > 0) {
            fields.put("count", count);
        }
        if (timeout > 0) {
            fields.put("timeout", timeout);
        }
        boolean finishing = finish != null && !finish.isEmpty();
        if (finishing) {
            fields.put("finish", new ArrayList<>(finish));
        }
        Json.JsonObject a = call("pop", fields, timeout);
        List<Job> jobs = new ArrayList<>();
        if (count > 0) {
            for (Object j : listOrEmpty(a.get("jobs"))) {
                jobs.add(Job.of((Json.JsonObject) j));
            }
        } else if (a.get("id") != null) {
            jobs.add(Job.of(a));
        }
        if (finishing && !(a.get("finished") instanceof List)) {
            throw Answers.malformed(a, "finished", "list");
        }
        return new Popped(jobs, finishing ? Result.listOf(a.get("finished")) : List.of());
    }

    // ------------------------------------------------------------ finish, delete, get

    /** Removes a job (done), whatever its state. NotFoundException if unknown. */
    public void finish(String id) {
        call("finish", Map.of("id", id));
    }

    /** Finishes 1..1000 jobs; one Result per id, in order. */
    public List<Result> finishMany(Collection<String> ids) {
        return batch("finish", ids);
    }

    /** Removes a job (cancelled), whatever its state. NotFoundException if unknown. */
    public void delete(String id) {
        call("delete", Map.of("id", id));
    }

    /** Deletes 1..1000 jobs; one Result per id, in order. */
    public List<Result> deleteMany(Collection<String> ids) {
        return batch("delete", ids);
    }

    /** What the server knows about a live job. NotFoundException if none. */
    public JobInfo get(String id) {
        return JobInfo.of(call("get", Map.of("id", id)));
    }

    /**
     * One page of the topic's jobs in state ("delay", "ready", "reserved" or
     * "buried"); limit 1..1000 (null: server default 50); cursor null for
     * the first page, else the previous page's.
     */
    public JobPage jobs(String topic, String state, Integer limit, String cursor) {
        Map<String, Object> fields = new LinkedHashMap<>();
        fields.put("topic", topic);
        fields.put("state", state);
        JobOptions.putIfSet(fields, "limit", limit);
        JobOptions.putIfSet(fields, "cursor", cursor);
        Json.JsonObject a = call("jobs", fields);
        List<JobInfo> jobs = new ArrayList<>();
        for (Object j : listOrEmpty(a.get("jobs"))) {
            jobs.add(JobInfo.of((Json.JsonObject) j));
        }
        return new JobPage(jobs, (String) a.get("cursor"));
    }

    // ------------------------------------------------------------ reserved jobs

    /** Restarts a reserved job's TTR clock; returns the new deadline (Unix ms). ConflictException if not reserved. */
    public long touch(String id) {
        return (long) Answers.number(call("touch", Map.of("id", id)), "due");
    }

    /**
     * Gives a reserved job back, due again in delay seconds; returns its new
     * state: "ready", "delay", or "buried" (its retries were used up).
     */
    public String release(String id, double delay) {
        return Answers.string(call("release", Map.of("id", id, "delay", delay)), "state");
    }

    /** Sets a reserved job aside: pop skips it until kicked. */
    public void bury(String id) {
        call("bury", Map.of("id", id));
    }

    /** Makes up to count (1..10000) buried jobs of the topic ready, oldest burials first; returns how many. */
    public int kick(String topic, int count) {
        return Answers.integer(call("kick", Map.of("topic", topic, "count", count)), "kicked");
    }

    /** Makes one buried job ready; ConflictException if it is not buried. */
    public void kickId(String id) {
        call("kick", Map.of("id", id));
    }

    /** Kicks 1..1000 buried jobs by id; one Result per id, in order. */
    public List<Result> kickIds(Collection<String> ids) {
        return batch("kick", ids);
    }

    /** Gives a delayed, ready or buried job a new due time, delay seconds from now. */
    public Rescheduled reschedule(String id, double delay) {
        return rescheduled(call("reschedule", Map.of("id", id, "delay", delay)));
    }

    /** Gives a delayed, ready or buried job a new due time. */
    public Rescheduled reschedule(String id, Instant at) {
        return rescheduled(call("reschedule", Map.of("id", id, "at", at.toEpochMilli() / 1000.0)));
    }

    private static Rescheduled rescheduled(Json.JsonObject a) {
        return new Rescheduled(Answers.string(a, "state"), Answers.longOrNull(a, "due"));
    }

    // ------------------------------------------------------------ topics

    /** Pauses a topic: pop takes nothing from it and no callback of it is sent. Idempotent. */
    public void pause(String topic) {
        call("pause", Map.of("topic", topic));
    }

    /** Lets a paused topic's jobs be popped and sent again. Idempotent. */
    public void resume(String topic) {
        call("resume", Map.of("topic", topic));
    }

    /** Counters of one topic: {"topics": {topic: {...}}, "total": {...}}. */
    public Map<String, Object> stats(String topic) {
        return call("stats", Map.of("topic", topic));
    }

    /** Counters of the first page of topics (up to 1000, by name) and of the whole deployment. */
    public Map<String, Object> stats() {
        return call("stats", Map.of());
    }

    /**
     * One page of topics' counters: limit (1..1000) topics after cursor
     * (null: from the first); the answer's "cursor" is null on the last page.
     */
    public Map<String, Object> stats(int limit, String cursor) {
        Map<String, Object> fields = new LinkedHashMap<>();
        fields.put("limit", limit);
        JobOptions.putIfSet(fields, "cursor", cursor);
        return call("stats", fields);
    }

    // ------------------------------------------------------------ schedules

    /** Creates or replaces a schedule; returns {"id", "next" (Unix ms), "replaced"}. */
    public Map<String, Object> schedule(Schedule schedule) {
        return call("schedule", schedule.fields());
    }

    /** Removes a schedule (the jobs it made stay); NotFoundException if unknown. */
    public void unschedule(String id) {
        call("unschedule", Map.of("id", id));
    }

    /** Every schedule (without bodies). */
    @SuppressWarnings("unchecked")
    public List<Map<String, Object>> schedules() {
        return (List<Map<String, Object>>) (List<?>) listOrEmpty(call("schedules", Map.of()).get("schedules"));
    }

    /** One schedule with its body and, with preview 1..100 (0: none), its next fire times in "upcoming". */
    @SuppressWarnings("unchecked")
    public Map<String, Object> schedule(String id, int preview) {
        Map<String, Object> fields = new LinkedHashMap<>();
        fields.put("id", id);
        if (preview > 0) {
            fields.put("preview", preview);
        }
        List<?> list = listOrEmpty(call("schedules", fields).get("schedules"));
        if (list.size() != 1) {
            throw new ServerException("the server answered " + list.size() + " schedules for one id", "internal", 200,
                    null, null);
        }
        return (Map<String, Object>) list.get(0);
    }

    // ------------------------------------------------------------ service

    /** True when delayq answers and reaches Redis; false on any 5xx or connection failure. */
    public boolean health() {
        try {
            decode(send("GET", "health", null, 0, true));
            return true;
        } catch (ServerException e) {
            return false;
        }
    }

    /** The Prometheus text of /metrics. */
    public String metrics() {
        Sent sent = send("GET", "metrics", null, 0, true);
        if (sent.status != 200) {
            decode(sent);
        }
        return sent.body;
    }

    /**
     * Any command with its fields (a newer server's, say); returns the
     * decoded answer or throws its DelayqException. wait: seconds the
     * server may hold the request (a pop's timeout).
     */
    public Json.JsonObject call(String command, Map<String, Object> fields, double wait) {
        return decode(send("POST", command, Json.write(fields), wait, false));
    }

    public Json.JsonObject call(String command, Map<String, Object> fields) {
        return call(command, fields, 0);
    }

    // ------------------------------------------------------------ transport

    private List<Result> batch(String command, Collection<String> ids) {
        if (ids.isEmpty()) {
            return List.of();
        }
        return Result.listOf(call(command, Map.of("ids", new ArrayList<>(ids))).get("results"));
    }

    private static List<?> listOrEmpty(Object v) {
        return v instanceof List ? (List<?>) v : List.of();
    }

    static List<String> splitTopics(String topics) {
        List<String> out = new ArrayList<>();
        for (String t : topics.split(",", -1)) {
            out.add(t.strip());
        }
        return out;
    }

    /** An HTTP answer, and whether an earlier send of the request may have reached the server. */
    private static final class Sent {
        final int status;
        final String body;
        final boolean resent;

        Sent(int status, String body, boolean resent) {
            this.status = status;
            this.body = body;
            this.resent = resent;
        }
    }

    /**
     * One request. A connection that breaks under it (a keep-alive connection
     * the server closed at that very moment, say) gets the request sent once
     * more on a new one only when that cannot do harm: a read-only or
     * idempotent command, or an add with an explicit id. Otherwise
     * ConnectionLostException: the outcome is unknown. An interrupted
     * thread's request is cancelled (its connection closed) and answers
     * ConnectionLostException, with the thread's interrupt flag kept.
     */
    private Sent send(String method, String command, String json, double wait, boolean resendable) {
        boolean resend = resendable || RESEND_SAFE.contains(command);
        Duration limit = timeout.plusMillis((long) (Math.max(0, wait) * 1000));
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(prefix + "/" + command)).timeout(limit)
                .header("User-Agent", USER_AGENT).header("Accept", "application/json");
        if (token != null) {
            b.header("Authorization", "Bearer " + token);
        }
        if (json != null) {
            b.header("Content-Type", "application/json")
                    .POST(HttpRequest.BodyPublishers.ofString(json, StandardCharsets.UTF_8));
        } else {
            b.method(method, HttpRequest.BodyPublishers.noBody());
        }
        HttpRequest request = b.build();
        // Only a broken connection may have carried the request to the
        // server; a connect that failed sent nothing.
        boolean sentBefore = false;
        for (int attempt = 0;; attempt++) {
            try {
                HttpResponse<byte[]> r = http.send(request, HttpResponse.BodyHandlers.ofByteArray());
                return new Sent(r.statusCode(), new String(r.body(), StandardCharsets.UTF_8), sentBefore);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new ConnectionLostException("the request to delayq was interrupted; its outcome is unknown", e);
            } catch (HttpConnectTimeoutException | ConnectException e) {
                // Not connected: nothing was sent, so trying again is harmless.
                if (attempt == 0) {
                    continue;
                }
                throw new ConnectFailedException("cannot connect to delayq at " + url + ": " + e, e);
            } catch (HttpTimeoutException e) {
                throw new ConnectionLostException("no answer from delayq within " + limit.toMillis() / 1000.0
                        + " s; the outcome of the request is unknown", e);
            } catch (IOException e) {
                if (resend && attempt == 0) {
                    sentBefore = true;
                    continue;
                }
                throw new ConnectionLostException("the connection to delayq failed (" + e
                        + "); the outcome of the request is unknown", e);
            }
        }
    }

    private static Json.JsonObject decode(Sent sent) {
        Object parsed;
        try {
            parsed = Json.parse(sent.body);
        } catch (Json.ParseException e) {
            parsed = null;
        }
        if (parsed instanceof Json.JsonObject) {
            Json.JsonObject a = (Json.JsonObject) parsed;
            if (Boolean.TRUE.equals(a.get("success")) && sent.status == 200) {
                return a;
            }
            if (Boolean.FALSE.equals(a.get("success")) || sent.status != 200) {
                Object msg = a.get("error");
                Object code = a.get("code");
                throw DelayqException.of(sent.status, code instanceof String ? (String) code : null,
                        msg instanceof String && !((String) msg).isEmpty() ? (String) msg
                                : "request failed with HTTP " + sent.status, a);
            }
        }
        String text = sent.body.length() > 200 ? sent.body.substring(0, 200) : sent.body;
        if (sent.status == 200) {
            throw new ServerException("the server answered 200 without a delayq JSON object: " + text.strip(),
                    "internal", 200, null, null);
        }
        throw DelayqException.of(sent.status, null, "HTTP " + sent.status + ": "
                + (text.isBlank() ? "(empty body)" : text.strip()), null);
    }
}
