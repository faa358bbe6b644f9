package io.delayq;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The client's own strict JSON (RFC 8259) reader and writer, so that the
 * client needs nothing beyond the JDK.
 *
 * <p>Reading gives {@link Map} (a {@link JsonObject}, key order kept),
 * {@link List}, {@link String}, {@link Long} (or {@link BigInteger} when it
 * does not fit), {@link Double} (or {@link BigDecimal} when a double would
 * round it to infinity), {@link Boolean} and {@code null}. A
 * {@link JsonObject} also keeps each member's exact source text
 * ({@link JsonObject#raw}): a job's body comes back exactly as it was added,
 * every digit and escape kept, whatever the parsed values would lose.
 *
 * <p>Writing takes the same types, any {@link Number}, arrays of objects,
 * {@link Collection}s, and {@link Raw} (JSON text written as it stands).
 */
public final class Json {
    private Json() {
    }

    /** JSON text to be written as it stands (it is checked when made). */
    public static final class Raw {
        private final String text;

        private Raw(String text) {
            this.text = text;
        }

        public String text() {
            return text;
        }

        @Override
        public String toString() {
            return text;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Raw && ((Raw) o).text.equals(text);
        }

        @Override
        public int hashCode() {
            return text.hashCode();
        }
    }

    /** A parsed object that remembers the source text of each member's value. */
    public static final class JsonObject extends LinkedHashMap<String, Object> {
        private static final long serialVersionUID = 1L;
        private final Map<String, String> rawText = new LinkedHashMap<>();

        /** The exact JSON text of a member's value, or null when absent. */
        public String raw(String key) {
            return rawText.get(key);
        }
    }

    /** Thrown for text that is not strict JSON. */
    public static final class ParseException extends IllegalArgumentException {
        private static final long serialVersionUID = 1L;

        ParseException(String message) {
            super(message);
        }
    }

    /** Wraps JSON text to be sent as it stands; throws ParseException if it is not JSON. */
    public static Raw raw(String text) {
        parse(text);
        return new Raw(text.strip());
    }

    /** Parses one JSON value (and nothing after it but whitespace). */
    public static Object parse(String text) {
        Reader r = new Reader(text);
        r.skipSpace();
        Object v = r.value(0);
        r.skipSpace();
        if (r.pos != text.length()) {
            throw r.error("unexpected text after the JSON value");
        }
        return v;
    }

    /** Compact JSON text of a value (see the class comment for the types taken). */
    public static String write(Object value) {
        StringBuilder out = new StringBuilder();
        write(out, value);
        return out.toString();
    }

    // ------------------------------------------------------------ writer

    static void write(StringBuilder out, Object v) {
        if (v == null) {
            out.append("null");
        } else if (v instanceof Raw) {
            out.append(((Raw) v).text);
        } else if (v instanceof CharSequence || v instanceof Character) {
            string(out, v.toString());
        } else if (v instanceof Boolean) {
            out.append(v.toString());
        } else if (v instanceof Double || v instanceof Float) {
            double d = ((Number) v).doubleValue();
            if (Double.isNaN(d) || Double.isInfinite(d)) {
                throw new IllegalArgumentException("JSON has no NaN or Infinity: " + d);
            }
            if (d == Math.rint(d) && Math.abs(d) < 1e15) {
                out.append((long) d);   // 30.0 -> 30: the server takes both, people read this
            } else {
                out.append(BigDecimal.valueOf(d).toPlainString());
            }
        } else if (v instanceof Number) {
            out.append(v instanceof BigDecimal ? ((BigDecimal) v).toString() : v.toString());
        } else if (v instanceof Map) {
            out.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (!(e.getKey() instanceof String)) {
                    throw new IllegalArgumentException("JSON object keys must be strings, not " + e.getKey());
                }
                if (!first) {
                    out.append(',');
                }
                first = false;
                string(out, (String) e.getKey());
                out.append(':');
                write(out, e.getValue());
            }
            out.append('}');
        } else if (v instanceof Collection || v instanceof Object[]) {
            Collection<?> items = v instanceof Object[] ? List.of((Object[]) v) : (Collection<?>) v;
            out.append('[');
            boolean first = true;
            for (Object item : items) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                write(out, item);
            }
            out.append(']');
        } else {
            throw new IllegalArgumentException("cannot write a " + v.getClass().getName() + " as JSON");
        }
    }

    private static void string(StringBuilder out, String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
            case '"': out.append("\\\""); break;
            case '\\': out.append("\\\\"); break;
            case '\n': out.append("\\n"); break;
            case '\r': out.append("\\r"); break;
            case '\t': out.append("\\t"); break;
            default:
                // Control characters, and lone surrogates (the server refuses
                // them raw and escaped alike; writing them escaped lets its
                // error name the field instead of the encoding).
                if (c < 0x20 || (Character.isSurrogate(c) && !pairAt(s, i))) {
                    out.append(String.format("\\u%04x", (int) c));
                } else {
                    out.append(c);
                    if (Character.isHighSurrogate(c)) {
                        out.append(s.charAt(++i));
                    }
                }
            }
        }
        out.append('"');
    }

    private static boolean pairAt(String s, int i) {
        return Character.isHighSurrogate(s.charAt(i)) && i + 1 < s.length()
                && Character.isLowSurrogate(s.charAt(i + 1));
    }

    // ------------------------------------------------------------ reader

    /** One pass over the text; depth is limited as the server limits it. */
    private static final class Reader {
        private static final int MAX_DEPTH = 512;
        private final String s;
        private int pos;

        Reader(String s) {
            this.s = s;
        }

        ParseException error(String what) {
            return new ParseException("invalid JSON: " + what + " at offset " + pos);
        }

        void skipSpace() {
            while (pos < s.length()) {
                char c = s.charAt(pos);
                if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                    return;
                }
                pos++;
            }
        }

        Object value(int depth) {
            if (depth > MAX_DEPTH) {
                throw error("nesting deeper than " + MAX_DEPTH);
            }
            if (pos >= s.length()) {
                throw error("unexpected end");
            }
            char c = s.charAt(pos);
            switch (c) {
            case '{': return object(depth);
            case '[': return array(depth);
            case '"': return string();
            case 't': return literal("true", Boolean.TRUE);
            case 'f': return literal("false", Boolean.FALSE);
            case 'n': return literal("null", null);
            default:
                if (c == '-' || (c >= '0' && c <= '9')) {
                    return number();
                }
                throw error("unexpected character '" + c + "'");
            }
        }

        private Object literal(String word, Object v) {
            if (!s.startsWith(word, pos)) {
                throw error("unexpected word");
            }
            pos += word.length();
            return v;
        }

        private JsonObject object(int depth) {
            JsonObject o = new JsonObject();
            pos++;
            skipSpace();
            if (peek() == '}') {
                pos++;
                return o;
            }
            while (true) {
                if (peek() != '"') {
                    throw error("expected a string key");
                }
                String key = string();
                skipSpace();
                expect(':');
                skipSpace();
                int start = pos;
                Object v = value(depth + 1);
                if (o.containsKey(key)) {
                    throw error("duplicate key \"" + key + "\"");
                }
                o.put(key, v);
                o.rawText.put(key, s.substring(start, pos));
                skipSpace();
                if (peek() == ',') {
                    pos++;
                    skipSpace();
                    continue;
                }
                expect('}');
                return o;
            }
        }

        private List<Object> array(int depth) {
            List<Object> a = new ArrayList<>();
            pos++;
            skipSpace();
            if (peek() == ']') {
                pos++;
                return a;
            }
            while (true) {
                a.add(value(depth + 1));
                skipSpace();
                if (peek() == ',') {
                    pos++;
                    skipSpace();
                    continue;
                }
                expect(']');
                return a;
            }
        }

        private char peek() {
            if (pos >= s.length()) {
                throw error("unexpected end");
            }
            return s.charAt(pos);
        }

        private void expect(char c) {
            if (peek() != c) {
                throw error("expected '" + c + "'");
            }
            pos++;
        }

        private String string() {
            pos++;
            StringBuilder b = new StringBuilder();
            while (true) {
                char c = peek();
                pos++;
                if (c == '"') {
                    return b.toString();
                }
                if (c < 0x20) {
                    throw error("control character in a string");
                }
                if (c != '\\') {
                    b.append(c);
                    continue;
                }
                char e = peek();
                pos++;
                switch (e) {
                case '"': b.append('"'); break;
                case '\\': b.append('\\'); break;
                case '/': b.append('/'); break;
                case 'b': b.append('\b'); break;
                case 'f': b.append('\f'); break;
                case 'n': b.append('\n'); break;
                case 'r': b.append('\r'); break;
                case 't': b.append('\t'); break;
                case 'u':
                    if (pos + 4 > s.length()) {
                        throw error("short \\u escape");
                    }
                    try {
                        b.append((char) Integer.parseInt(s.substring(pos, pos + 4), 16));
                    } catch (NumberFormatException x) {
                        throw error("bad \\u escape");
                    }
                    pos += 4;
                    break;
                default:
                    throw error("bad escape \\" + e);
                }
            }
        }

        private Object number() {
            int start = pos;
            if (s.charAt(pos) == '-') {
                pos++;
            }
            if (peek() == '0') {
                pos++;
            } else {
                digits();
            }
            boolean integral = true;
            if (pos < s.length() && s.charAt(pos) == '.') {
                pos++;
                digits();
                integral = false;
            }
            if (pos < s.length() && (s.charAt(pos) == 'e' || s.charAt(pos) == 'E')) {
                pos++;
                if (pos < s.length() && (s.charAt(pos) == '+' || s.charAt(pos) == '-')) {
                    pos++;
                }
                digits();
                integral = false;
            }
            String text = s.substring(start, pos);
            if (integral) {
                BigInteger n = new BigInteger(text);
                return n.bitLength() < 64 ? (Object) n.longValue() : n;
            }
            double d = Double.parseDouble(text);
            return Double.isInfinite(d) ? new BigDecimal(text) : (Object) d;
        }

        private void digits() {
            int start = pos;
            while (pos < s.length() && s.charAt(pos) >= '0' && s.charAt(pos) <= '9') {
                pos++;
            }
            if (pos == start) {
                throw error("expected a digit");
            }
        }
    }
}
