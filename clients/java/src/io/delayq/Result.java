package io.delayq;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * One element of a batch answer (addMany, finishMany, deleteMany, kickIds,
 * and the {@code finished} of a finish-and-pop).
 *
 * @param code     the protocol error code when it failed, else null
 * @param error    the server's sentence when it failed, else null
 * @param replaced addMany of a job with {@link NewJob#replace()}: TRUE when
 *                 it replaced a job, FALSE when it created it; else null
 */
public record Result(String id, boolean success, String code, String error, Boolean replaced) {
    /** A result that tells nothing of an upsert. */
    public Result(String id, boolean success, String code, String error) {
        this(id, success, code, error, null);
    }

    /** The exception this result stands for, null on success. */
    public DelayqException exception() {
        if (success) {
            return null;
        }
        return DelayqException.of(0, code, error != null ? error : "job '" + id + "' failed", null);
    }

    static List<Result> listOf(Object items) {
        List<Result> out = new ArrayList<>();
        if (items instanceof List) {
            for (Object o : (List<?>) items) {
                Map<?, ?> r = (Map<?, ?>) o;
                out.add(new Result((String) r.get("id"), Boolean.TRUE.equals(r.get("success")),
                        (String) r.get("code"), (String) r.get("error"), (Boolean) r.get("replaced")));
            }
        }
        return out;
    }
}
