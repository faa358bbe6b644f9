package io.delayq;

import java.util.Map;

/**
 * A request delayq refused or could not complete. Unchecked, one subclass
 * per protocol error code:
 *
 * <pre>
 * DelayqException                    every error: code(), status(), response()
 * +-- ClientException                4xx: the request was refused, nothing changed
 * |   +-- BadRequestException        400 bad_request
 * |   +-- UnauthorizedException      401 unauthorized
 * |   +-- NotFoundException          404 not_found
 * |   +-- ConflictException          409 conflict
 * |   +-- TooLargeException          413 too_large
 * +-- ServerException                5xx (and 500 internal)
 *     +-- UnavailableException       503 unavailable: no effect, safe to retry
 *     |   +-- ConnectFailedException could not connect: the request was never sent
 *     +-- TimeoutException           504 timeout: the outcome is unknown
 *         +-- ConnectionLostException the connection broke after the request
 *                                     may have reached the server
 * </pre>
 */
public class DelayqException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final String code;
    private final int status;
    private final transient Map<String, Object> response;

    /**
     * @param code     the protocol's machine word ("not_found", ...)
     * @param status   the HTTP status, 0 when no HTTP answer arrived
     * @param response the decoded JSON answer, or null
     */
    public DelayqException(String message, String code, int status, Map<String, Object> response, Throwable cause) {
        super(message, cause);
        this.code = code;
        this.status = status;
        this.response = response;
    }

    /** The protocol's error code ("bad_request", "unavailable", ..., or "http_NNN"). */
    public String code() {
        return code;
    }

    /** The HTTP status, or 0 when no HTTP answer arrived. */
    public int status() {
        return status;
    }

    /** The server's decoded JSON answer, or null. */
    public Map<String, Object> response() {
        return response;
    }

    /** The server's sentence (or a description of the failure). */
    public String reason() {
        return super.getMessage();
    }

    @Override
    public String getMessage() {
        return super.getMessage() + " (" + (status != 0 ? "HTTP " + status + ", " : "") + code + ")";
    }

    /**
     * The exception for an error answer: by its {@code code} when known,
     * else by the HTTP status (5xx or none: ServerException, else ClientException).
     */
    public static DelayqException of(int status, String code, String message, Map<String, Object> response) {
        if (code == null) {
            code = codeOfStatus(status);
        }
        switch (code == null ? "" : code) {
        case "bad_request": return new BadRequestException(message, status, response);
        case "unauthorized": return new UnauthorizedException(message, status, response);
        case "not_found": return new NotFoundException(message, status, response);
        case "conflict": return new ConflictException(message, status, response);
        case "too_large": return new TooLargeException(message, status, response);
        case "unavailable": return new UnavailableException(message, status, response, null);
        case "timeout": return new TimeoutException(message, status, response, null);
        case "internal": return new ServerException(message, "internal", status, response, null);
        default:
            String c = code != null ? code : status != 0 ? "http_" + status : "error";
            return status == 0 || status >= 500 ? new ServerException(message, c, status, response, null)
                    : new ClientException(message, c, status, response);
        }
    }

    private static String codeOfStatus(int status) {
        switch (status) {
        case 400: return "bad_request";
        case 401: return "unauthorized";
        case 404: return "not_found";
        case 409: return "conflict";
        case 413: return "too_large";
        case 500: return "internal";
        case 503: return "unavailable";
        case 504: return "timeout";
        default: return null;
        }
    }
}
