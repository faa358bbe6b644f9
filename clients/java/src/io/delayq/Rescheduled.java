package io.delayq;

/** The answer to reschedule: "delay" with its due time (Unix ms), or "ready" with none. */
public record Rescheduled(String state, Long due) {
}
