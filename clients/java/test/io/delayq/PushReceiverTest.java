package io.delayq;

import com.sun.net.httpserver.HttpServer;
import io.delayq.examples.WebhookReceiver;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/**
 * delayq-push delivers real signed callbacks to the receiver example
 * (com.sun.net.httpserver + WebhookVerifier); the deployment signs with
 * $DELAYQ_TEST_PUSH_SECRET.
 */
public class PushReceiverTest {
    private final Client c = Check.client();

    private HttpServer receiver(String secret, Map<String, String> events) throws Exception {
        return WebhookReceiver.start(new InetSocketAddress("127.0.0.1", 0), new WebhookVerifier(secret), events::put);
    }

    private static String url(HttpServer s) {
        return "http://127.0.0.1:" + s.getAddress().getPort() + "/hooks/delayq";
    }

    public void testSignedCallbackVerifiedAndFinished() throws Exception {
        Map<String, String> events = new java.util.concurrent.ConcurrentHashMap<>();
        HttpServer s = receiver(Check.env("DELAYQ_TEST_PUSH_SECRET"), events);
        try {
            String topic = Check.unique("refund");
            String id = c.add(NewJob.of(topic, Json.raw("{\"refund\":7,\"note\":\"caf\\u00e9\"}")).id(topic + ".7")
                    .callback(url(s), 5));
            Check.eventually(15, "the callback received", () -> !events.isEmpty());
            // webhook-id is the job id with '.' written %2E
            Check.equal(Map.of(topic + "%2E7", "{\"refund\":7,\"note\":\"caf\\u00e9\"}"), events);
            Check.eventually(5, "the job finished by the 200", () -> {
                try {
                    c.get(id);
                    return false;
                } catch (NotFoundException e) {
                    return true;
                }
            });
        } finally {
            s.stop(0);
        }
    }

    public void testWrongSecretIsRefused() throws Exception {
        Map<String, String> events = new java.util.concurrent.ConcurrentHashMap<>();
        HttpServer s = receiver(WebhookVerifierTest.OTHER, events);
        try {
            String topic = Check.unique("forged");
            String id = c.add(NewJob.of(topic, 1).id(topic + "-1").callback(url(s)).backoff(60));
            Check.eventually(15, "a failed attempt recorded", () -> c.get(id).answer().get("last_attempt") instanceof Map);
            Map<?, ?> last = (Map<?, ?>) c.get(id).answer().get("last_attempt");
            Check.equal(401L, last.get("status"), "the receiver's answer to a signature it cannot verify");
            Check.equal(Map.of(), events);
            c.delete(id);
        } finally {
            s.stop(0);
        }
    }

    public void testReceiverRefusesForgedRequests() throws Exception {
        Map<String, String> events = new java.util.concurrent.ConcurrentHashMap<>();
        String secret = Check.env("DELAYQ_TEST_PUSH_SECRET");
        HttpServer s = receiver(secret, events);
        try {
            long ts = System.currentTimeMillis() / 1000;
            byte[] body = "{\"x\":1}".getBytes(StandardCharsets.UTF_8);
            String good = WebhookVerifierTest.sign(secret, "hand-1", ts, body);
            Check.equal(200, post(url(s), "hand-1", ts, good, body), "genuine");
            Check.equal(401, post(url(s), "hand-2", ts, good, body), "signed for another id");
            Check.equal(401, post(url(s), "hand-1", ts - 600, WebhookVerifierTest.sign(secret, "hand-1", ts - 600, body),
                    body), "10 minutes old");
            Check.equal(200, post(url(s), "hand-1", ts, good, body), "a duplicate");
            Check.equal(Map.of("hand-1", "{\"x\":1}"), events);
        } finally {
            s.stop(0);
        }
    }

    private static int post(String url, String id, long ts, String signature, byte[] body) throws Exception {
        HttpRequest r = HttpRequest.newBuilder(URI.create(url)).POST(HttpRequest.BodyPublishers.ofByteArray(body))
                .header("webhook-id", id).header("webhook-timestamp", Long.toString(ts))
                .header("webhook-signature", signature).build();
        return HttpClient.newHttpClient().send(r, HttpResponse.BodyHandlers.discarding()).statusCode();
    }
}
