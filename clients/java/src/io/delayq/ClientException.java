package io.delayq;

import java.util.Map;

/** A 4xx answer: the request was refused and changed nothing; sent again unchanged it fails the same way. */
public class ClientException extends DelayqException {
    private static final long serialVersionUID = 1L;

    public ClientException(String message, String code, int status, Map<String, Object> response) {
        super(message, code, status, response, null);
    }
}
