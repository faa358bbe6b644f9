package io.delayq.examples;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import io.delayq.WebhookVerifier;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.BiConsumer;

/**
 * A receiver of delayq's callbacks (push delivery) in a plain
 * com.sun.net.httpserver server: it verifies the Standard Webhooks
 * signature (401 if wrong), de-duplicates by webhook-id (delivery is at
 * least once) and answers 200, which finishes the job.
 *
 * <pre>
 * DELAYQ_WEBHOOK_SECRET=whsec_... java -cp delayq.jar:examples io.delayq.examples.WebhookReceiver 8090
 * </pre>
 */
public final class WebhookReceiver {
    private WebhookReceiver() {
    }

    /**
     * Serves POST /hooks/delayq on address; each verified, new event goes to
     * process(webhook-id, body). Returns the started server.
     */
    public static HttpServer start(InetSocketAddress address, WebhookVerifier verifier,
                                   BiConsumer<String, String> process) throws IOException {
        // The ids seen; a real receiver keeps them where its work is stored
        // (a unique key in the same transaction as the work).
        Set<String> seen = ConcurrentHashMap.newKeySet();
        HttpServer server = HttpServer.create(address, 0);
        server.createContext("/hooks/delayq", exchange -> {
            try (exchange) {
                if (!"POST".equals(exchange.getRequestMethod())) {
                    answer(exchange, 405, "POST only");
                    return;
                }
                byte[] body = exchange.getRequestBody().readAllBytes();   // the bytes that were signed
                try {
                    verifier.verify(exchange.getRequestHeaders(), body);
                } catch (WebhookVerifier.Invalid e) {
                    answer(exchange, 401, e.getMessage());
                    return;
                }
                String id = exchange.getRequestHeaders().getFirst("webhook-id");
                if (!seen.add(id)) {
                    answer(exchange, 200, "duplicate");   // processed before: "done" again
                    return;
                }
                process.accept(id, new String(body, StandardCharsets.UTF_8));
                answer(exchange, 200, "ok");
            }
        });
        server.start();
        return server;
    }

    private static void answer(HttpExchange exchange, int status, String text) throws IOException {
        byte[] bytes = (text + "\n").getBytes(StandardCharsets.UTF_8);
        exchange.getResponseHeaders().set("Content-Type", "text/plain");
        exchange.sendResponseHeaders(status, bytes.length);
        try (OutputStream out = exchange.getResponseBody()) {
            out.write(bytes);
        }
    }

    public static void main(String[] args) throws IOException {
        int port = args.length > 0 ? Integer.parseInt(args[0]) : 8090;
        WebhookVerifier verifier = new WebhookVerifier(System.getenv("DELAYQ_WEBHOOK_SECRET"));
        start(new InetSocketAddress("127.0.0.1", port), verifier,
                (id, body) -> System.out.println("event " + id + ": " + body));
        System.out.println("listening on http://127.0.0.1:" + port + "/hooks/delayq");
    }
}
