package io.delayq;

import java.util.Map;

/** 400 bad_request: not a JSON object, unknown command, bad field type, range or characters. */
public class BadRequestException extends ClientException {
    private static final long serialVersionUID = 1L;

    public BadRequestException(String message, int status, Map<String, Object> response) {
        super(message, "bad_request", status, response);
    }
}
