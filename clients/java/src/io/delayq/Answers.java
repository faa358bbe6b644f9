package io.delayq;

import java.util.Map;

/** Reading fields of the server's answers; a missing or mistyped field is a ServerException. */
final class Answers {
    private Answers() {
    }

    static ServerException malformed(Map<String, Object> a, String field, String want) {
        return new ServerException("the server's answer has no " + want + " '" + field + "': " + Json.write(a),
                "internal", 200, a, null);
    }

    static String string(Map<String, Object> a, String field) {
        Object v = a.get(field);
        if (!(v instanceof String)) {
            throw malformed(a, field, "string");
        }
        return (String) v;
    }

    static double number(Map<String, Object> a, String field) {
        Object v = a.get(field);
        if (!(v instanceof Number)) {
            throw malformed(a, field, "number");
        }
        return ((Number) v).doubleValue();
    }

    static int integer(Map<String, Object> a, String field) {
        return (int) number(a, field);
    }

    static Long longOrNull(Map<String, Object> a, String field) {
        Object v = a.get(field);
        return v instanceof Number ? ((Number) v).longValue() : null;
    }

    /** The exact JSON text of a member ("null" when it is JSON null or absent). */
    static String rawOrNull(Json.JsonObject a, String field) {
        String raw = a.raw(field);
        return raw != null ? raw : "null";
    }
}
