package io.delayq;

import java.util.List;

/** One page of {@link Client#jobs}: the jobs, and the cursor of the next page (null on the last). */
public record JobPage(List<JobInfo> jobs, String cursor) {
}
