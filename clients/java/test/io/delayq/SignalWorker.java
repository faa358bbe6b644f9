package io.delayq;

import java.util.List;

/**
 * A worker process for the SIGTERM test: handles jobs of the topic in
 * args[0], each taking args[1] seconds, printing "start ID" and "end ID";
 * prints "stopped N" once run() returned.
 */
public final class SignalWorker {
    private SignalWorker() {
    }

    public static void main(String[] args) {
        double seconds = Double.parseDouble(args[1]);
        Worker w = Worker.builder(Check.client(), List.of(args[0]), job -> {
            System.out.println("start " + job.id());
            Thread.sleep((long) (seconds * 1000));
            System.out.println("end " + job.id());
        }).concurrency(2).pollTimeout(20).build();
        System.out.println("running");
        w.run();
        System.out.println("stopped " + w.handled());
    }
}
