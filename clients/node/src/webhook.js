// Verifies delayq's callbacks (push delivery, docs/PROTOCOL.md) as Standard
// Webhooks define them: webhook-signature holds one or more space-separated
// "v1,<base64 HMAC-SHA256>" of "{webhook-id}.{webhook-timestamp}.{body}",
// keyed with the bytes of the base64 text after "whsec_".

import { createHmac, timingSafeEqual } from 'node:crypto';

/** Seconds webhook-timestamp may be from now by default. */
export const DEFAULT_TOLERANCE = 300;
const PREFIX = 'whsec_';
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** Thrown when a request is not a valid signed delayq callback; its message says why. */
export class WebhookVerificationError extends Error {
  constructor(message) {
    super(message);
    this.name = 'WebhookVerificationError';
  }
}

function keyOf(secret) {
  const b64 = secret.startsWith(PREFIX) ? secret.slice(PREFIX.length) : secret;
  if (b64.length % 4 !== 0 || !BASE64.test(b64)) {
    throw new TypeError('a webhook secret must be whsec_ followed by base64');
  }
  const key = Buffer.from(b64, 'base64');
  if (key.length === 0) throw new TypeError('a webhook secret must not be empty');
  return key;
}

// One header from a Fetch Headers object, or a plain object such as Node's
// IncomingMessage.headers (names in any case; a repeated one: the first).
function header(headers, name) {
  if (typeof headers?.get === 'function') return headers.get(name);
  for (const [k, v] of Object.entries(headers ?? {})) {
    if (k.toLowerCase() === name) return Array.isArray(v) ? v[0] : v;
  }
  return null;
}

export class WebhookVerifier {
  /**
   * @param {string|string[]} secrets "whsec_<base64>" secrets (delayq's
   *   push_secret); a string may list several separated by spaces (during
   *   a rotation give the new and the old one).
   * @param {{tolerance?: number}} [opts] seconds webhook-timestamp may be
   *   from now (default 300), so an old request cannot be replayed.
   */
  constructor(secrets, { tolerance = DEFAULT_TOLERANCE } = {}) {
    const list = (Array.isArray(secrets) ? secrets : [secrets])
      .filter((s) => s != null)
      .flatMap((s) => String(s).trim().split(/\s+/))
      .filter(Boolean);
    if (list.length === 0) throw new TypeError('no webhook secret given (whsec_...)');
    this.keys = list.map(keyOf);
    this.tolerance = tolerance;
  }

  /**
   * Throws WebhookVerificationError unless the request is a valid signed
   * callback. body: the bytes exactly as received (a Buffer, Uint8Array or
   * string); re-serialised JSON would not match.
   */
  verify(headers, body) {
    const id = header(headers, 'webhook-id');
    const timestamp = header(headers, 'webhook-timestamp');
    const signature = header(headers, 'webhook-signature');
    if (!id || timestamp == null || !signature || !signature.trim()) {
      throw new WebhookVerificationError('missing webhook-id, webhook-timestamp or webhook-signature');
    }
    if (!/^[0-9]{1,18}$/.test(timestamp)) {
      throw new WebhookVerificationError(`webhook-timestamp is not Unix seconds: ${timestamp}`);
    }
    if (Math.abs(Date.now() / 1000 - Number(timestamp)) > this.tolerance) {
      throw new WebhookVerificationError(`webhook-timestamp is more than ${this.tolerance} s from now`);
    }
    const given = signature.trim().split(/ +/)
      .filter((entry) => entry.startsWith('v1,'))
      .map((entry) => Buffer.from(entry.slice(3), 'base64'));
    for (const key of this.keys) {
      const expected = sign(key, id, timestamp, body);
      // timingSafeEqual: the comparison's time tells nothing about the signature
      if (given.some((g) => g.length === expected.length && timingSafeEqual(g, expected))) return;
    }
    throw new WebhookVerificationError('no valid v1 signature for any of the secrets');
  }

  /** True when the request is a valid signed callback (see verify). */
  isValid(headers, body) {
    try {
      this.verify(headers, body);
      return true;
    } catch (e) {
      if (e instanceof WebhookVerificationError) return false;
      throw e;
    }
  }

  /** "v1,<base64>" for a request, as delayq signs it with the first secret (for tests and tools). */
  signature(id, timestamp, body) {
    return `v1,${sign(this.keys[0], id, String(timestamp), body).toString('base64')}`;
  }
}

function sign(key, id, timestamp, body) {
  return createHmac('sha256', key).update(`${id}.${timestamp}.`).update(body).digest();
}
