package io.delayq;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** The fields an added job and a schedule's fires share: ttr, retries, backoff, callback. */
final class JobOptions {
    private Double ttr;
    private Integer retries;
    private Object backoff;
    private String callbackUrl;
    private Double callbackTimeout;

    void ttr(double seconds) {
        ttr = seconds;
    }

    void retries(int n) {
        retries = n;
    }

    void backoff(double... steps) {
        List<Double> list = new ArrayList<>();
        for (double s : steps) {
            list.add(s);
        }
        backoff = list;
    }

    void steppedBackoff() {
        backoff = "stepped";
    }

    void callback(String url, Double timeout) {
        callbackUrl = url;
        callbackTimeout = timeout;
    }

    void putInto(Map<String, Object> fields) {
        putIfSet(fields, "ttr", ttr);
        putIfSet(fields, "retries", retries);
        putIfSet(fields, "backoff", backoff);
        if (callbackUrl != null && callbackTimeout == null) {
            fields.put("url", callbackUrl);
        } else if (callbackUrl != null) {
            fields.put("callback", Map.of("url", callbackUrl, "timeout", callbackTimeout));
        }
    }

    static void putIfSet(Map<String, Object> fields, String name, Object value) {
        if (value != null) {
            fields.put(name, value);
        }
    }
}
