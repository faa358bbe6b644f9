// delayq for Node.js: the Client, the Worker, the webhook verifier and the errors.
export { Client, DEFAULT_URL, MAX_IDS, resultError } from './src/client.js';
export { Worker, DEFAULT_BACKOFF } from './src/worker.js';
export { WebhookVerifier, WebhookVerificationError, DEFAULT_TOLERANCE } from './src/webhook.js';
export {
  DelayqError, ClientError, BadRequest, Unauthorized, NotFound, Conflict, TooLarge, ServerError,
  Unavailable, ConnectFailed, Timeout, ConnectionLost, errorFor,
} from './src/errors.js';
