package io.delayq;

import java.util.Map;

/**
 * 504 timeout: the server did not learn in time whether the request took
 * effect. An add with an explicit id may be sent again (409 means the first
 * one took); other writes need a check (get) first.
 */
public class TimeoutException extends ServerException {
    private static final long serialVersionUID = 1L;

    public TimeoutException(String message, int status, Map<String, Object> response, Throwable cause) {
        super(message, "timeout", status, response, cause);
    }
}
