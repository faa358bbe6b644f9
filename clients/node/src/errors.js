// Errors thrown by the delayq client, one class per protocol error code
// (docs/PROTOCOL.md), the same tree as the Python and PHP clients':
//
//   DelayqError                 every error; .code .status .message .response
//   +-- ClientError             4xx: the request was refused, nothing changed
//   |   +-- BadRequest          400 bad_request
//   |   +-- Unauthorized        401 unauthorized
//   |   +-- NotFound            404 not_found
//   |   +-- Conflict            409 conflict
//   |   +-- TooLarge            413 too_large
//   +-- ServerError             5xx (and 500 internal)
//       +-- Unavailable         503 unavailable: no effect, safe to send again
//       |   +-- ConnectFailed   could not connect: the request was never sent
//       +-- Timeout             504 timeout: the outcome is unknown
//           +-- ConnectionLost  the connection broke or timed out after the
//                               request may have arrived: outcome unknown

export class DelayqError extends Error {
  /**
   * @param {string} message the server's sentence, or what failed
   * @param {{code?: string, status?: number|null, response?: object|null, cause?: unknown}} [opts]
   */
  constructor(message, { code, status = null, response = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.code = code ?? new.target.defaultCode;
    this.status = status;
    this.response = response;
  }

  static defaultCode = 'error';
}

export class ClientError extends DelayqError {}
export class BadRequest extends ClientError { static defaultCode = 'bad_request'; }
export class Unauthorized extends ClientError { static defaultCode = 'unauthorized'; }
export class NotFound extends ClientError { static defaultCode = 'not_found'; }
export class Conflict extends ClientError { static defaultCode = 'conflict'; }
export class TooLarge extends ClientError { static defaultCode = 'too_large'; }
export class ServerError extends DelayqError { static defaultCode = 'internal'; }
export class Unavailable extends ServerError { static defaultCode = 'unavailable'; }
export class ConnectFailed extends Unavailable {}
export class Timeout extends ServerError { static defaultCode = 'timeout'; }
export class ConnectionLost extends Timeout {}

const BY_CODE = {
  bad_request: BadRequest,
  unauthorized: Unauthorized,
  not_found: NotFound,
  conflict: Conflict,
  too_large: TooLarge,
  unavailable: Unavailable,
  timeout: Timeout,
  internal: ServerError,
};

const CODE_BY_STATUS = {
  400: 'bad_request', 401: 'unauthorized', 404: 'not_found', 409: 'conflict',
  413: 'too_large', 500: 'internal', 503: 'unavailable', 504: 'timeout',
};

/**
 * The error for an error answer: by its `code` when known, else by the
 * HTTP status (5xx -> ServerError, anything else -> ClientError).
 */
export function errorFor(status, code, message, response = null) {
  if (!code && status != null) code = CODE_BY_STATUS[status];
  let Cls = BY_CODE[code ?? ''];
  if (!Cls) {
    Cls = status == null || status >= 500 ? ServerError : ClientError;
    code = code || (status != null ? `http_${status}` : 'error');
  }
  return new Cls(message, { code, status, response });
}
