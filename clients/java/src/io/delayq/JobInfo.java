package io.delayq;

import java.util.Map;

/**
 * What get (and jobs) tell about a live job.
 *
 * @param state    "delay", "ready", "reserved" or "buried"
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

    static JobInfo of(Json.JsonObject a) {
        Number retries = (Number) a.get("retries");
        return new JobInfo(Answers.string(a, "id"), Answers.string(a, "topic"), Answers.string(a, "state"),
                Answers.rawOrNull(a, "value"), Answers.longOrNull(a, "due"), Answers.number(a, "ttr"),
                Answers.integer(a, "attempts"), retries == null ? null : retries.intValue(),
                (long) Answers.number(a, "created"), a);
    }
}
