// The WebhookVerifier against real callbacks: delayq-push (push_secret set
// to two secrets, as during a rotation, by tests/clients/test_node_client.py)
// POSTs a job to a server here, and the verifier must accept it with either
// secret, refuse it with another secret, a changed body or id, and refuse a
// stale or missing timestamp.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WebhookVerificationError, WebhookVerifier } from '../index.js';
import { client, serve, unique, waitFor } from './helpers.js';

const NEW = process.env.DELAYQ_TEST_PUSH_SECRET;
const OLD = process.env.DELAYQ_TEST_OLD_SECRET;
const OTHER = `whsec_${Buffer.from('somebody else entirely, 32 bytes').toString('base64')}`;
const skip = !(NEW && OLD) && 'DELAYQ_TEST_PUSH_SECRET / DELAYQ_TEST_OLD_SECRET not set';

/** The first callback delayq-push sends for a job added with a `.` in its id. */
async function realCallback() {
  const received = [];
  const receiver = await serve((req, body, res) => {
    received.push({ headers: req.headers, body });
    res.writeHead(200);
    res.end();
  });
  try {
    const c = client();
    const topic = unique('hooks');
    const id = `${topic}.42`;
    await c.add(topic, { order: 42, name: 'Zoë' }, { id, url: `${receiver.url}/hooks/delayq` });
    await waitFor(async () => received.length > 0, 'the callback');
    await waitFor(async () => (await c.stats(topic)).topics[topic]?.finished === 1, 'the finish');
    return { id, ...received[0] };
  } finally {
    await receiver.close();
  }
}

test('a real callback verifies with either secret, and no other', { skip }, async () => {
  const { id, headers, body } = await realCallback();
  assert.equal(headers['webhook-id'], id.replace('.', '%2E'));
  assert.deepEqual(JSON.parse(body), { order: 42, name: 'Zoë' });
  new WebhookVerifier(NEW).verify(headers, body);
  new WebhookVerifier(OLD).verify(headers, body);
  new WebhookVerifier(`${OTHER} ${OLD}`).verify(headers, body);
  new WebhookVerifier([OTHER, NEW]).verify(new Headers(headers), new Uint8Array(body));
  assert.throws(() => new WebhookVerifier(OTHER).verify(headers, body),
    { name: 'WebhookVerificationError', message: 'no valid v1 signature for any of the secrets' });
  const verifier = new WebhookVerifier(NEW);
  assert.equal(verifier.isValid(headers, Buffer.from(body.toString().replace('42', '43'))), false);
  assert.equal(verifier.isValid({ ...headers, 'webhook-id': 'other' }, body), false);
  const capitalised = Object.fromEntries(['Webhook-Id', 'Webhook-Timestamp', 'Webhook-Signature']
    .map((name) => [name, headers[name.toLowerCase()]]));
  assert.equal(verifier.isValid(capitalised, body), true, 'header names in any case');
});

test('stale, future, malformed or missing headers are refused', { skip }, () => {
  const verifier = new WebhookVerifier(NEW);
  const body = '{"a":1}';
  const at = (ts) => ({ 'webhook-id': 'j1', 'webhook-timestamp': String(ts),
    'webhook-signature': verifier.signature('j1', ts, body) });
  const now = Math.floor(Date.now() / 1000);
  verifier.verify(at(now - 200), body);
  assert.throws(() => verifier.verify(at(now - 400), body), /more than 300 s from now/);
  assert.throws(() => verifier.verify(at(now + 400), body), WebhookVerificationError);
  new WebhookVerifier(NEW, { tolerance: 600 }).verify(at(now - 400), body);
  assert.throws(() => verifier.verify({ ...at(now), 'webhook-timestamp': '12.5' }, body), /not Unix seconds/);
  assert.throws(() => verifier.verify({ 'webhook-id': 'j1' }, body), /missing webhook-id/);
  assert.throws(() => verifier.verify({ ...at(now), 'webhook-signature': 'v2,abc v1,!!' }, body),
    /no valid v1 signature/);
  assert.throws(() => new WebhookVerifier(''), TypeError);
  assert.throws(() => new WebhookVerifier('whsec_not base64!'), TypeError);
});
