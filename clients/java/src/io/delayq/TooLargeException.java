package io.delayq;

import java.util.Map;

/** 413 too_large: the job body or the whole request is over the server's limit. */
public class TooLargeException extends ClientException {
    private static final long serialVersionUID = 1L;

    public TooLargeException(String message, int status, Map<String, Object> response) {
        super(message, "too_large", status, response);
    }
}
