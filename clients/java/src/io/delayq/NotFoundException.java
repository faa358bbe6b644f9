package io.delayq;

import java.util.Map;

/** 404 not_found: no live job (or schedule) with that id. */
public class NotFoundException extends ClientException {
    private static final long serialVersionUID = 1L;

    public NotFoundException(String message, int status, Map<String, Object> response) {
        super(message, "not_found", status, response);
    }
}
