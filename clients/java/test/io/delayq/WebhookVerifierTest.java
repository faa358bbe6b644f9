package io.delayq;

import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * The verifier against signatures made here with javax.crypto directly
 * (Standard Webhooks: base64 HMAC-SHA256 over "id.timestamp.body", keyed
 * with the bytes after "whsec_"), not with the verifier's own signer.
 */
public class WebhookVerifierTest {
    static final String NEW = secret("the new secret, 32 bytes long..!");
    static final String OLD = secret("the old secret, also 32 bytes.!");
    static final String OTHER = secret("somebody else's secret, 32 b.");

    static String secret(String key) {
        return "whsec_" + Base64.getEncoder().encodeToString(key.getBytes(StandardCharsets.UTF_8));
    }

    static String sign(String secret, String id, long ts, byte[] body) throws Exception {
        Mac mac = Mac.getInstance("HmacSHA256");
        mac.init(new SecretKeySpec(Base64.getDecoder().decode(secret.substring(6)), "HmacSHA256"));
        mac.update((id + "." + ts + ".").getBytes(StandardCharsets.UTF_8));
        return "v1," + Base64.getEncoder().encodeToString(mac.doFinal(body));
    }

    static Map<String, List<String>> headers(String id, long ts, String signature) {
        return Map.of("Webhook-Id", List.of(id), "Webhook-Timestamp", List.of(Long.toString(ts)),
                "Webhook-Signature", List.of(signature));
    }

    public void testGenuineAndForged() throws Exception {
        WebhookVerifier v = new WebhookVerifier(NEW + " " + OLD);
        byte[] body = "{\"order\":42,\"note\":\"caf\u00e9\"}".getBytes(StandardCharsets.UTF_8);
        long ts = Instant.now().getEpochSecond();
        String id = "order-42%2E1";
        v.verify(headers(id, ts, sign(NEW, id, ts, body)), body);
        v.verify(headers(id, ts, sign(OLD, id, ts, body)), body);
        v.verify(headers(id, ts, sign(OTHER, id, ts, body) + " " + sign(OLD, id, ts, body)), body);
        Check.equal(sign(NEW, id, ts, body), v.signature(id, Long.toString(ts), body));
        String good = sign(NEW, id, ts, body);
        Object[][] forged = {
            {"another secret", headers(id, ts, sign(OTHER, id, ts, body)), body},
            {"no v1 prefix", headers(id, ts, good.substring(3)), body},
            {"v2 scheme", headers(id, ts, "v2," + good.substring(3)), body},
            {"another body", headers(id, ts, good), "{\"order\":43}".getBytes(StandardCharsets.UTF_8)},
            {"another id", headers(id + "x", ts, good), body},
            {"another timestamp", headers(id, ts - 1, good), body},
            {"empty signature", headers(id, ts, " "), body},
            {"not base64", headers(id, ts, "v1,***"), body},
            {"headers missing", Map.of("webhook-id", List.of(id)), body},
        };
        for (Object[] f : forged) {
            @SuppressWarnings("unchecked")
            Map<String, List<String>> h = (Map<String, List<String>>) f[1];
            Check.that(!v.isValid(h, (byte[]) f[2]), "accepted: " + f[0]);
        }
    }

    public void testTimestampTolerance() throws Exception {
        WebhookVerifier v = new WebhookVerifier(NEW);
        byte[] body = "\"late\"".getBytes(StandardCharsets.UTF_8);
        long now = Instant.now().getEpochSecond();
        for (long ts : new long[] {now - 360, now + 360, now - 86400}) {
            WebhookVerifier.Invalid e = Check.fails(WebhookVerifier.Invalid.class,
                    () -> v.verify(headers("x", ts, sign(NEW, "x", ts, body)), body));
            Check.that(e.getMessage().contains("from now"), e.getMessage());
        }
        v.verify(headers("x", now - 240, sign(NEW, "x", now - 240, body)), body);
        Check.that(!v.isValid(Map.of("webhook-id", List.of("x"), "webhook-timestamp", List.of("12a"),
                "webhook-signature", List.of(sign(NEW, "x", now, body))), body), "a bad timestamp passed");
    }

    public void testBadSecrets() {
        Check.fails(IllegalArgumentException.class, () -> new WebhookVerifier());
        Check.fails(IllegalArgumentException.class, () -> new WebhookVerifier("  "));
        Check.fails(IllegalArgumentException.class, () -> new WebhookVerifier("whsec_***"));
        Check.fails(IllegalArgumentException.class, () -> new WebhookVerifier("whsec_"));
    }
}
