package io.delayq;

import java.util.Map;

/** 503 unavailable: Redis (or every delayq backend) is unreachable; the request had no effect and may be sent again. */
public class UnavailableException extends ServerException {
    private static final long serialVersionUID = 1L;

    public UnavailableException(String message, int status, Map<String, Object> response, Throwable cause) {
        super(message, "unavailable", status, response, cause);
    }
}
