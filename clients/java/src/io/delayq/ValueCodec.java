package io.delayq;

/**
 * How a {@link DelayQueue} turns its elements into job bodies and back.
 * {@link #string()} keeps a String as the body's JSON string, byte for
 * byte; {@link #json()} takes what {@link Json} writes (Map, List, String,
 * numbers, Boolean, null) and gives back what it parses.
 *
 * @param <T> the queue's element type
 */
public interface ValueCodec<T> {
    /** The job body for value: anything {@link Json#write} takes. */
    Object encode(T value);

    /** The element a job's body stands for. */
    T decode(Job job);

    /** Strings as JSON strings (a body that is not a string is refused on take). */
    static ValueCodec<String> string() {
        return new ValueCodec<>() {
            public Object encode(String value) {
                return value;
            }

            public String decode(Job job) {
                Object body = job.body();
                if (!(body instanceof String s)) {
                    throw new IllegalStateException("job " + job.id() + ": the body is not a string: " + job.bodyJson());
                }
                return s;
            }
        };
    }

    /** Values as JSON, through the client's own {@link Json}. */
    static ValueCodec<Object> json() {
        return new ValueCodec<>() {
            public Object encode(Object value) {
                return value;
            }

            public Object decode(Job job) {
                return job.body();
            }
        };
    }
}
