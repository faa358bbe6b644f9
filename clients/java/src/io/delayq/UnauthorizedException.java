package io.delayq;

import java.util.Map;

/** 401 unauthorized: the token is missing, wrong, or not allowed this command or topic. */
public class UnauthorizedException extends ClientException {
    private static final long serialVersionUID = 1L;

    public UnauthorizedException(String message, int status, Map<String, Object> response) {
        super(message, "unauthorized", status, response);
    }
}
