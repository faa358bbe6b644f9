package io.delayq;

import java.net.ServerSocket;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** Every command of the Client against the real service at $DELAYQ_URL (with $DELAYQ_TOKEN). */
public class ClientTest {
    private final Client c = Check.client();

    public void testAddGetPopFinish() {
        String topic = Check.unique("order");
        String id = c.add(NewJob.of(topic, Map.of("order", 42)).id(topic + "-42").ttr(30).retries(3));
        Check.equal(topic + "-42", id);
        JobInfo info = c.get(id);
        Check.equal("ready", info.state());
        Check.equal(topic, info.topic());
        Check.equal(30.0, info.ttr());
        Check.equal(3, info.retries());
        Check.equal(Map.of("order", 42L), info.body());
        Job job = c.pop(topic, 0);
        Check.equal(id, job.id());
        Check.equal(1, job.attempts());
        Check.equal(Map.of("order", 42L), job.body());
        Check.equal("reserved", c.get(id).state());
        c.finish(id);
        Check.fails(NotFoundException.class, () -> c.get(id));
        Check.equal(null, c.pop(topic, 0));
        String made = c.add(topic, "plain text");
        Check.equal(24, made.length());
        Check.equal("plain text", c.pop(topic, 0).body());
        c.delete(made);
    }

    public void testKeptHistory() {
        String topic = Check.unique("kept");
        c.call("policy", Map.of("topic", topic, "keep", 60));
        String id = c.add(NewJob.of(topic, 1).id(topic + "-1"));
        Check.equal(id, c.pop(topic, 0).id());
        c.finish(id);
        JobInfo rec = c.get(id);
        Check.that(rec.kept(), "a kept record");
        Check.equal("finished", rec.state());
        Check.equal(1, rec.attempts());
        Check.equal("null", rec.bodyJson());
        Check.that(rec.firstDelivered() != null && rec.firstDelivered() <= rec.ended(), "first delivered, then ended");
        Check.equal(id, c.jobs(topic, "finished", null, null).jobs().get(0).id());
        ConflictException conflict = Check.fails(ConflictException.class, () -> c.add(NewJob.of(topic, 1).id(id)));
        Check.that(conflict.reason().contains("was finished at"), conflict.reason());
    }

    public void testUpsert() {
        String topic = Check.unique("upsert");
        String id = topic + "-1";
        Check.equal(false, c.upsert(NewJob.of(topic, Map.of("v", 1)).id(id).delay(30)), "none: created");
        Check.equal(true, c.upsert(NewJob.of(topic, Map.of("v", 2)).id(id).ttr(5)), "delayed: replaced");
        JobInfo info = c.get(id);
        Check.equal("ready", info.state());
        Check.equal(5.0, info.ttr());
        Check.equal(id, c.add(NewJob.of(topic, Map.of("v", 3)).id(id).replace()));
        Check.equal(Map.of("v", 3L), c.pop(topic, 0).body());
        ConflictException reserved = Check.fails(ConflictException.class,
                () -> c.upsert(NewJob.of(topic, Map.of("v", 4)).id(id)));
        Check.that(reserved.reason().contains("reserved"), reserved.reason());
        Check.fails(IllegalArgumentException.class, () -> c.upsert(NewJob.of(topic, 1)));
        BadRequestException noId = Check.fails(BadRequestException.class, () -> c.add(NewJob.of(topic, 1).replace()));
        Check.that(noId.reason().contains("'replace'"), noId.reason());
        List<Result> results = c.addMany(List.of(NewJob.of(topic, 5).id(topic + "-2").replace(), NewJob.of(topic, 6)));
        Check.equal(Boolean.FALSE, results.get(0).replaced());
        Check.equal(null, results.get(1).replaced());
        c.finish(id);
        c.delete(topic + "-2");
        c.delete(results.get(1).id());
    }

    public void testBodyComesBackExactly() {
        String topic = Check.unique("exact");
        String text = "{\"n\":12345678901234567890123,\"s\":\"caf\\u00e9\",\"f\":1.0e+2}";
        String id = c.add(NewJob.of(topic, Json.raw(text)));
        Check.equal(text, c.get(id).bodyJson());
        Check.equal(text, c.pop(topic, 0).bodyJson());
        c.finish(id);
        String id2 = c.add(NewJob.of(topic, null));
        Check.equal("null", c.pop(topic, 0).bodyJson());
        c.finish(id2);
    }

    public void testErrorsAreTyped() throws Exception {
        String topic = Check.unique("errors");
        String id = c.add(NewJob.of(topic, 1).id(topic + "-1").delay(600));
        ConflictException conflict = Check.fails(ConflictException.class, () -> c.add(NewJob.of(topic, 2).id(id)));
        Check.equal(409, conflict.status());
        Check.equal("conflict", conflict.code());
        Check.that(conflict.reason().contains("already exists"), conflict.reason());
        NotFoundException nf = Check.fails(NotFoundException.class, () -> c.finish(topic + "-nope"));
        Check.equal(404, nf.status());
        BadRequestException bad = Check.fails(BadRequestException.class, () -> c.add(NewJob.of(topic, 1).ttr(0)));
        Check.that(bad.reason().contains("'ttr'"), bad.reason());
        Check.equal(Boolean.FALSE, bad.response().get("success"));
        Check.fails(BadRequestException.class, () -> c.add("a b", 1));
        Check.fails(BadRequestException.class, () -> c.call("nope", Map.of()));
        Check.fails(ConflictException.class, () -> c.touch(id));   // delayed, not reserved
        Check.fails(TooLargeException.class, () -> c.add(topic, "x".repeat(70 * 1024)));
        Check.fails(ClientException.class, () -> c.release(id, 0));
        UnauthorizedException unauth = Check.fails(UnauthorizedException.class,
                () -> new Client(Check.env("DELAYQ_URL"), "not-the-token", null).add(topic, 1));
        Check.equal(401, unauth.status());
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        Client closed = new Client("http://127.0.0.1:" + port, "t", Duration.ofSeconds(2));
        ConnectFailedException cf = Check.fails(ConnectFailedException.class, () -> closed.add(topic, 1));
        Check.equal(0, cf.status());
        Check.that(cf instanceof UnavailableException, "ConnectFailed is an Unavailable");
        Check.that(!closed.health(), "health of a closed port");
        Check.fails(IllegalArgumentException.class, () -> new Client("ftp://x"));
        c.delete(id);
    }

    /**
     * A first connect that fails sent nothing: a conflict on the retried
     * connect is a real one (another job has that id), not the echo of an
     * earlier send.
     */
    public void testConflictAfterAFailedConnectIsReal() throws Exception {
        String topic = Check.unique("connect");
        String id = c.add(NewJob.of(topic, 1).id(topic + "-1").delay(600));
        try (SlowConnectProxy proxy = new SlowConnectProxy(Check.env("DELAYQ_URL"), 500)) {
            Client viaProxy = new Client(proxy.url(), System.getenv("DELAYQ_TOKEN"), Duration.ofMillis(800));
            Check.fails(ConflictException.class, () -> viaProxy.add(NewJob.of(topic, 2).id(id)));
        }
        Check.equal(1L, c.get(id).body());
        c.delete(id);
    }

    public void testBatches() {
        String topic = Check.unique("batch");
        List<Result> added = c.addMany(List.of(NewJob.of(topic, 1).id(topic + "-a"), NewJob.of(topic, 2).id(topic + "-b")));
        Check.equal(List.of(new Result(topic + "-a", true, null, null), new Result(topic + "-b", true, null, null)), added);
        List<Result> again = c.addMany(List.of(NewJob.of(topic, 3).id(topic + "-c"), NewJob.of(topic, 4).id(topic + "-a")));
        Check.that(again.get(0).success(), "c added");
        Check.equal("conflict", again.get(1).code());
        Check.that(again.get(1).exception() instanceof ConflictException, "a Result's exception is typed");
        BadRequestException bad = Check.fails(BadRequestException.class,
                () -> c.addMany(List.of(NewJob.of(topic, 1), NewJob.of(topic, 1).ttr(-1))));
        Check.that(bad.reason().contains("jobs[1].ttr"), bad.reason());
        List<Result> finished = c.finishMany(List.of(topic + "-a", topic + "-nope"));
        Check.that(finished.get(0).success(), "a finished");
        Check.equal("not_found", finished.get(1).code());
        List<Result> deleted = c.deleteMany(List.of(topic + "-b", topic + "-c"));
        Check.that(deleted.get(0).success() && deleted.get(1).success(), "deleted: " + deleted);
        Check.equal(List.of(), c.finishMany(List.of()));
    }

    public void testLongPoll() throws Exception {
        String topic = Check.unique("poll");
        long t0 = System.nanoTime();
        Check.equal(null, c.pop(topic, 1));
        double waited = (System.nanoTime() - t0) / 1e9;
        Check.that(waited >= 0.9, "an empty long-poll returned after " + waited + " s");
        Thread producer = new Thread(() -> {
            try {
                Thread.sleep(500);
            } catch (InterruptedException e) {
                return;
            }
            c.add(NewJob.of(topic, "late").id(topic + "-late"));
        });
        producer.start();
        t0 = System.nanoTime();
        Job job = c.pop(List.of(Check.unique("other"), topic), 10);
        waited = (System.nanoTime() - t0) / 1e9;
        producer.join();
        Check.equal(topic + "-late", job.id());
        Check.that(waited < 5, "the long-poll answered after " + waited + " s");
        c.finish(job.id());
    }

    public void testPopManyAndFinishAndPop() {
        String topic = Check.unique("work");
        List<NewJob> jobs = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            jobs.add(NewJob.of(topic, i).id(topic + "-" + i));
        }
        c.addMany(jobs);
        List<Job> two = c.popMany(List.of(topic), 2, 0);
        Check.equal(2, two.size());
        Popped p = c.finishAndPop(List.of(topic), 0, List.of(two.get(0).id(), two.get(1).id(), topic + "-nope"));
        Check.that(p.job() != null, "finish-and-pop took a job");
        Check.equal(3, p.finished().size());
        Check.that(p.finished().get(0).success() && p.finished().get(1).success(), "finished: " + p.finished());
        Check.equal("not_found", p.finished().get(2).code());
        Check.fails(NotFoundException.class, () -> c.get(two.get(0).id()));
        Popped many = c.finishAndPopMany(List.of(topic), 10, 0, List.of(p.job().id()));
        Check.equal(2, many.jobs().size());
        Check.that(many.finished().get(0).success(), "finished with popMany");
        Popped last = c.finishAndPop(List.of(topic), 0.2, List.of(many.jobs().get(0).id(), many.jobs().get(1).id()));
        Check.equal(null, last.job());
        Check.equal(2, last.finished().size());
        Popped none = c.finishAndPop(List.of(topic), 0, List.of());
        Check.equal(List.of(), none.finished());
    }

    public void testTouchReleaseBuryKick() {
        String topic = Check.unique("mail");
        String id = c.add(NewJob.of(topic, "hi").id(topic + "-1").ttr(60));
        c.pop(topic, 0);
        long due = c.touch(id);
        Check.that(Math.abs(due - (System.currentTimeMillis() + 60000)) < 5000, "touch's due " + due);
        Check.equal("ready", c.release(id, 0));
        Check.fails(ConflictException.class, () -> c.touch(id));
        Check.equal(2, c.pop(topic, 0).attempts());
        Check.equal("delay", c.release(id, 30));
        c.reschedule(id, 0);
        c.pop(topic, 0);
        c.bury(id);
        Check.equal("buried", c.get(id).state());
        Check.equal(null, c.pop(topic, 0));
        Check.equal(1, c.kick(topic, 10));
        Check.equal("ready", c.get(id).state());
        c.pop(topic, 0);
        c.bury(id);
        c.kickId(id);
        Check.fails(ConflictException.class, () -> c.kickId(id));
        List<Result> r = c.kickIds(List.of(id, topic + "-nope"));
        Check.equal("conflict", r.get(0).code());
        Check.equal("not_found", r.get(1).code());
        c.finish(id);
    }

    public void testJobsAndReschedule() {
        String topic = Check.unique("list");
        for (int i = 0; i < 3; i++) {
            c.add(NewJob.of(topic, i).id(topic + "-" + i).delay(600 + i));
        }
        JobPage first = c.jobs(topic, "delay", 2, null);
        Check.equal(2, first.jobs().size());
        Check.that(first.cursor() != null, "a cursor to the next page");
        JobPage second = c.jobs(topic, "delay", 2, first.cursor());
        Check.equal(1, second.jobs().size());
        Check.equal(null, second.cursor());
        Check.equal(topic + "-2", second.jobs().get(0).id());
        Check.fails(BadRequestException.class, () -> c.jobs(topic, "done", null, null));
        Rescheduled now = c.reschedule(topic + "-0", 0);
        Check.equal(new Rescheduled("ready", null), now);
        Instant at = Instant.now().plusSeconds(3600);
        Rescheduled later = c.reschedule(topic + "-0", at);
        Check.equal("delay", later.state());
        Check.that(Math.abs(later.due() - at.toEpochMilli()) < 2, "due " + later.due() + " for " + at);
        c.deleteMany(List.of(topic + "-0", topic + "-1", topic + "-2"));
    }

    public void testPauseResume() throws Exception {
        String topic = Check.unique("paused");
        c.pause(topic);
        c.add(NewJob.of(topic, 1).id(topic + "-1"));
        Check.equal(null, c.pop(topic, 0));
        Check.equal(Boolean.TRUE, topicStats(topic).get("paused"));
        Thread resumer = new Thread(() -> {
            try {
                Thread.sleep(300);
            } catch (InterruptedException e) {
                return;
            }
            c.resume(topic);
        });
        resumer.start();
        Job job = c.pop(topic, 10);   // a long-poll on a paused topic gets the job on resume
        resumer.join();
        Check.equal(topic + "-1", job.id());
        c.finish(job.id());
    }

    public void testSchedules() {
        String id = Check.unique("nightly");
        Map<String, Object> made = c.schedule(Schedule.cron(id, "report", Map.of("kind", "daily"), "0 3 * * *")
                .tz("Asia/Shanghai").ttr(120));
        Check.equal(Boolean.FALSE, made.get("replaced"));
        Check.that(made.get("next") instanceof Long, "next: " + made);
        Map<String, Object> one = c.schedule(id, 3);
        Check.equal("0 3 * * *", one.get("cron"));
        Check.equal(3, ((List<?>) one.get("upcoming")).size());
        Check.that(c.schedules().stream().anyMatch(s -> id.equals(s.get("id"))), "listed");
        Map<String, Object> replaced = c.schedule(Schedule.every(id, "report", 1, 60));
        Check.equal(Boolean.TRUE, replaced.get("replaced"));
        Check.fails(BadRequestException.class, () -> c.schedule(Schedule.every("a@b", "report", 1, 60)));
        c.unschedule(id);
        Check.fails(NotFoundException.class, () -> c.unschedule(id));
    }

    public void testStatsHealthMetrics() {
        String topic = Check.unique("counted");
        c.add(topic, 1);
        Map<?, ?> t = topicStats(topic);
        Check.equal(1L, t.get("ready"));
        Check.equal(1L, t.get("added"));
        Check.that(c.stats().get("total") instanceof Map, "total");
        Map<String, Object> page = c.stats(1, null);
        Check.equal(1, ((Map<?, ?>) page.get("topics")).size());
        Check.that(page.get("cursor") instanceof String, "a cursor after the first of several topics: " + page);
        String next = (String) page.get("cursor");
        Check.that(!((Map<?, ?>) c.stats(1, next).get("topics")).containsKey(next), "the next page starts after the cursor");
        Check.that(c.health(), "health");
        Check.that(c.metrics().contains("delayq_jobs"), "metrics");
        c.deleteMany(List.of(c.pop(topic, 0).id()));
    }

    private Map<?, ?> topicStats(String topic) {
        return (Map<?, ?>) ((Map<?, ?>) c.stats(topic).get("topics")).get(topic);
    }

    public void testSharedBetweenThreads() throws Exception {
        String topic = Check.unique("threads");
        List<Thread> threads = new ArrayList<>();
        List<Throwable> errors = java.util.Collections.synchronizedList(new ArrayList<>());
        for (int t = 0; t < 8; t++) {
            int n = t;
            Thread th = new Thread(() -> {
                try {
                    for (int i = 0; i < 20; i++) {
                        c.add(NewJob.of(topic, i).id(topic + "-" + n + "-" + i));
                    }
                } catch (Throwable e) {
                    errors.add(e);
                }
            });
            threads.add(th);
            th.start();
        }
        for (Thread th : threads) {
            th.join();
        }
        Check.equal(List.of(), errors);
        Check.equal(160L, topicStats(topic).get("ready"));
        int popped = 0;
        List<Job> jobs;
        while (!(jobs = c.popMany(List.of(topic), 100, 0)).isEmpty()) {
            popped += jobs.size();
            c.finishMany(jobs.stream().map(Job::id).toList());
        }
        Check.equal(160, popped);
    }
}
