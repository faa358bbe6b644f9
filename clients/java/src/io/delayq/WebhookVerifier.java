package io.delayq;

import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * Verifies delayq's callbacks (push delivery) as Standard Webhooks define
 * them: {@code webhook-signature} holds one or more space-separated
 * {@code v1,<base64 HMAC-SHA256>} of "{webhook-id}.{webhook-timestamp}.{body}",
 * keyed with the bytes of the base64 text after {@code whsec_}.
 *
 * <pre>
 * WebhookVerifier verifier = new WebhookVerifier(System.getenv("DELAYQ_WEBHOOK_SECRET"));
 * verifier.verify(exchange.getRequestHeaders(), body);   // throws WebhookVerifier.Invalid
 * </pre>
 *
 * While delayq rotates secrets, give the verifier the new and the old one:
 * a request signed with either passes. A timestamp more than the tolerance
 * (default 5 minutes) from now fails, so an old request cannot be replayed.
 * Thread-safe.
 */
public final class WebhookVerifier {
    /** How far webhook-timestamp may be from now by default. */
    public static final Duration DEFAULT_TOLERANCE = Duration.ofMinutes(5);
    private static final String PREFIX = "whsec_";

    private final List<byte[]> keys = new ArrayList<>();
    private final Duration tolerance;

    /** Thrown when a request is not a valid signed delayq callback; its message says why. */
    public static final class Invalid extends Exception {
        private static final long serialVersionUID = 1L;

        Invalid(String message) {
            super(message);
        }
    }

    /**
     * @param secrets "whsec_&lt;base64&gt;" secrets (delayq's push_secret);
     *                each argument may list several separated by spaces
     */
    public WebhookVerifier(String... secrets) {
        this(DEFAULT_TOLERANCE, secrets);
    }

    public WebhookVerifier(Duration tolerance, String... secrets) {
        this.tolerance = tolerance;
        for (String arg : secrets) {
            if (arg == null) {
                continue;
            }
            for (String secret : arg.strip().split("\\s+")) {
                if (secret.isEmpty()) {
                    continue;
                }
                String b64 = secret.startsWith(PREFIX) ? secret.substring(PREFIX.length()) : secret;
                byte[] key;
                try {
                    key = Base64.getDecoder().decode(b64);
                } catch (IllegalArgumentException e) {
                    throw new IllegalArgumentException("a webhook secret must be whsec_ followed by base64", e);
                }
                if (key.length == 0) {
                    throw new IllegalArgumentException("a webhook secret must not be empty");
                }
                keys.add(key);
            }
        }
        if (keys.isEmpty()) {
            throw new IllegalArgumentException("no webhook secret given (whsec_...)");
        }
    }

    /**
     * Verifies a request by its headers (names in any case, as
     * com.sun.net.httpserver.Headers or a servlet's give them) and its body
     * bytes exactly as received.
     */
    public void verify(Map<String, List<String>> headers, byte[] body) throws Invalid {
        verify(header(headers, "webhook-id"), header(headers, "webhook-timestamp"),
                header(headers, "webhook-signature"), body);
    }

    /** Verifies a request given its three webhook headers (null when absent) and its body bytes. */
    public void verify(String id, String timestamp, String signature, byte[] body) throws Invalid {
        if (id == null || id.isEmpty() || timestamp == null || signature == null || signature.isBlank()) {
            throw new Invalid("missing webhook-id, webhook-timestamp or webhook-signature");
        }
        long ts;
        try {
            if (!timestamp.matches("[0-9]{1,18}")) {
                throw new NumberFormatException();
            }
            ts = Long.parseLong(timestamp);
        } catch (NumberFormatException e) {
            throw new Invalid("webhook-timestamp is not Unix seconds: " + timestamp);
        }
        long now = Instant.now().getEpochSecond();
        if (Math.abs(now - ts) > tolerance.getSeconds()) {
            throw new Invalid("webhook-timestamp is more than " + tolerance.getSeconds() + " s from now");
        }
        byte[] head = (id + "." + timestamp + ".").getBytes(StandardCharsets.UTF_8);
        for (byte[] key : keys) {
            byte[] expected = sign(key, head, body);
            for (String entry : signature.strip().split(" +")) {
                int comma = entry.indexOf(',');
                if (comma < 0 || !entry.substring(0, comma).equals("v1")) {
                    continue;
                }
                byte[] given;
                try {
                    given = Base64.getDecoder().decode(entry.substring(comma + 1));
                } catch (IllegalArgumentException e) {
                    continue;
                }
                // MessageDigest.isEqual compares in constant time: timing tells nothing.
                if (MessageDigest.isEqual(expected, given)) {
                    return;
                }
            }
        }
        throw new Invalid("no valid v1 signature for any of the secrets");
    }

    /** True when the request is a valid signed callback (see {@link #verify(Map, byte[])}). */
    public boolean isValid(Map<String, List<String>> headers, byte[] body) {
        try {
            verify(headers, body);
            return true;
        } catch (Invalid e) {
            return false;
        }
    }

    /** "v1,&lt;base64&gt;" for a request, as delayq signs it with the first secret (for tests and tools). */
    public String signature(String id, String timestamp, byte[] body) {
        byte[] head = (id + "." + timestamp + ".").getBytes(StandardCharsets.UTF_8);
        return "v1," + Base64.getEncoder().encodeToString(sign(keys.get(0), head, body));
    }

    private static byte[] sign(byte[] key, byte[] head, byte[] body) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(key, "HmacSHA256"));
            mac.update(head);
            return mac.doFinal(body);
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 is part of every JDK", e);
        }
    }

    private static String header(Map<String, List<String>> headers, String name) {
        for (Map.Entry<String, List<String>> e : headers.entrySet()) {
            if (e.getKey() != null && e.getKey().equalsIgnoreCase(name) && !e.getValue().isEmpty()) {
                return e.getValue().get(0);
            }
        }
        return null;
    }
}
