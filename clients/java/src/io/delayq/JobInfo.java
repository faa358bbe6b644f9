package io.delayq;

import java.util.Map;

/**
 * What get (and jobs) tell about a live job, or about the kept record of a
 * finished or deleted one (a topic's {@code keep}: see {@link #kept()}).
 *
 * @param state    "delay", "ready", "reserved" or "buried"; "finished" or
 *                 "deleted" for a kept record
 * @param bodyJson the body's exact JSON text
 * @param due      Unix ms: the due time while "delay", the TTR deadline while
 *                 "reserved"; null while "ready" or "buried"
 * @param retries  the job's redelivery limit, null for unlimited
 * @param created  Unix ms
 * @param answer   the whole answer (with callback, last_attempt, backoff
 *                 when the job has them)
 */
public record JobInfo(String id, String topic, String state, String bodyJson, Long due, double ttr,
                      int attempts, Integer retries, long created, Map<String, Object> answer) {
    /** The body decoded (see {@link Json}). */
    public Object body() {
        return Json.parse(bodyJson);
    }

    /**
     * True for the kept record of a finished or deleted job: it has no body
     * ({@code bodyJson} "null"), ttr (0) or retries (null); {@link #ended()}
     * says when, {@link #firstDelivered()} its first delivery.
     */
    public boolean kept() {
        return ended() != null;
    }

    /** A kept record's Unix ms when the job was finished or deleted; null for a live job. */
    public Long ended() {
        Object v = answer.get("ended");
        return v instanceof Number ? ((Number) v).longValue() : null;
    }

    /** Unix ms of the job's first delivery, where the server knows it (a topic that keeps history), else null. */
    public Long firstDelivered() {
        Object v = answer.get("first_delivered");
        return v instanceof Number ? ((Number) v).longValue() : null;
    }

    static JobInfo of(Json.JsonObject a) {
        Number retries = (Number) a.get("retries");
        return new JobInfo(Answers.string(a, "id"), Answers.string(a, "topic"), Answers.string(a, "state"),
                Answers.rawOrNull(a, "value"), Answers.longOrNull(a, "due"),
                a.get("ended") instanceof Number ? 0 : Answers.number(a, "ttr"),
                Answers.integer(a, "attempts"), retries == null ? null : retries.intValue(),
                (long) Answers.number(a, "created"), a);
    }
}
