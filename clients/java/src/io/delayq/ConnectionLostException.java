package io.delayq;

/**
 * The connection failed (closed, reset, timed out, interrupted) after the
 * request may have reached the server: its outcome is unknown, as with a 504.
 */
public class ConnectionLostException extends TimeoutException {
    private static final long serialVersionUID = 1L;

    public ConnectionLostException(String message, Throwable cause) {
        super(message, 0, null, cause);
    }
}
