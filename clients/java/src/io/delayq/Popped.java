package io.delayq;

import java.util.List;

/**
 * The answer to a finish-and-pop: the jobs taken (none, one, or up to the
 * count asked) and one {@link Result} per id sent to be finished, in order.
 * A {@code not_found} result means that job was gone already (its TTR
 * passed and it was delivered again, or it was deleted).
 */
public record Popped(List<Job> jobs, List<Result> finished) {
    /** The first job taken, or null when none was ready in time. */
    public Job job() {
        return jobs.isEmpty() ? null : jobs.get(0);
    }
}
