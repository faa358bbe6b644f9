package io.delayq.examples;

import io.delayq.Client;
import io.delayq.Job;
import io.delayq.NewJob;
import io.delayq.Worker;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Close an order that is not paid in time: placing an order adds a
 * "close-order" job due when the time to pay runs out; the worker closes the
 * order if it is still unpaid and returns its stock, and leaves a paid one
 * alone. The orders live in memory here; a shop keeps them in its database.
 *
 * <pre>
 * java -cp delayq.jar:examples io.delayq.examples.CloseUnpaidOrder
 * </pre>
 */
public final class CloseUnpaidOrder {
    /** The shop's orders: id -&gt; "unpaid", "paid" or "closed". */
    public final Map<Long, String> orders = new ConcurrentHashMap<>();
    private final Client client;

    public CloseUnpaidOrder(Client client) {
        this.client = client;
    }

    /** The producer: records the order and the job that closes it unless paid within payWithin seconds. */
    public void placeOrder(long order, double payWithin) {
        orders.put(order, "unpaid");
        client.add(NewJob.of("close-order", Map.of("order", order))
                .id("close-order-" + order)    // one job per order: adding it twice is a ConflictException
                .delay(payWithin)
                .ttr(30));
    }

    public void pay(long order) {
        orders.replace(order, "unpaid", "paid");
    }

    /** The consumer: closes unpaid orders as their jobs come due; run() until SIGTERM. */
    public Worker worker() {
        return Worker.builder(client, List.of("close-order"), this::closeIfUnpaid)
                .concurrency(4)
                .backoff(5, 30, 60, 300)   // if closing fails (an exception), try again later
                .build();
    }

    private void closeIfUnpaid(Job job) {
        long order = ((Number) ((Map<?, ?>) job.body()).get("order")).longValue();
        if (orders.replace(order, "unpaid", "closed")) {
            System.out.println("order " + order + " was not paid in time: closed, stock returned");
        } else {
            System.out.println("order " + order + " is " + orders.get(order) + ": nothing to do");
        }
    }

    public static void main(String[] args) {
        CloseUnpaidOrder shop = new CloseUnpaidOrder(new Client());   // $DELAYQ_URL, $DELAYQ_TOKEN
        long base = System.currentTimeMillis();
        shop.placeOrder(base, 2);
        shop.placeOrder(base + 1, 2);
        shop.pay(base + 1);
        System.out.println("orders " + base + " (unpaid) and " + (base + 1) + " (paid); Ctrl-C stops");
        shop.worker().run();
    }
}
