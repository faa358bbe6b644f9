package io.delayq;

/** The client could not connect to delayq: the request was never sent. */
public class ConnectFailedException extends UnavailableException {
    private static final long serialVersionUID = 1L;

    public ConnectFailedException(String message, Throwable cause) {
        super(message, 0, null, cause);
    }
}
