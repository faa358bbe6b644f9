package io.delayq;

import java.util.Map;

/** 409 conflict: an add whose id is live, or touch/release/bury of a job that is not reserved. */
public class ConflictException extends ClientException {
    private static final long serialVersionUID = 1L;

    public ConflictException(String message, int status, Map<String, Object> response) {
        super(message, "conflict", status, response);
    }
}
