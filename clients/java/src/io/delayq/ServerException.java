package io.delayq;

import java.util.Map;

/** A 5xx answer, or no usable answer at all. */
public class ServerException extends DelayqException {
    private static final long serialVersionUID = 1L;

    public ServerException(String message, String code, int status, Map<String, Object> response, Throwable cause) {
        super(message, code, status, response, cause);
    }
}
