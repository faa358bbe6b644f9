package io.delayq;

/**
 * A job handed out by pop: it is now reserved for {@code ttr} seconds.
 *
 * @param id       the job's id
 * @param topic    its topic
 * @param bodyJson the body's exact JSON text, as it was added
 * @param attempts deliveries so far, this one included (1 on the first)
 * @param ttr      seconds to finish, delete, touch or release it before it is delivered again
 */
public record Job(String id, String topic, String bodyJson, int attempts, double ttr) {
    /** The body decoded (Map, List, String, Long, Double, Boolean or null; see {@link Json}). */
    public Object body() {
        return Json.parse(bodyJson);
    }

    static Job of(Json.JsonObject a) {
        return new Job(Answers.string(a, "id"), Answers.string(a, "topic"), Answers.rawOrNull(a, "value"),
                Answers.integer(a, "attempts"), Answers.number(a, "ttr"));
    }
}
