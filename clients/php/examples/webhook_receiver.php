<?php
// webhook_receiver.php: an endpoint that receives delayq callbacks (push
// delivery, docs/PROTOCOL.md "Push delivery (callbacks)").
//
// delayq-push POSTs a due job's body to the job's callback URL with the
// Standard Webhooks headers webhook-id, webhook-timestamp and
// webhook-signature, plus delayq-topic and delayq-attempt. What it does with
// our answer:
//   2xx                   done: the job is finished
//   410 Gone              we want no more: the job is deleted, never retried
//   429/503 + Retry-After busy: tried again after that many seconds
//   anything else         (401, 500, a timeout, ...) tried again after the
//                         job's next backoff step, then buried
//
// So this script: verifies the signature (401 if wrong), de-duplicates by
// webhook-id (delivery is at least once: a retry after a lost answer is a
// duplicate, and gets 200 again without being processed twice), and
// answers quickly.
//
// Try it:
//   DELAYQ_WEBHOOK_SECRET=whsec_... php -S 127.0.0.1:8090 webhook_receiver.php
// and add a job with "url": "http://127.0.0.1:8090/" (the pusher's
// push_allow must list loopback for that). Settings, from the environment:
//   DELAYQ_WEBHOOK_SECRET  the push_secret of delayq, "whsec_<base64>";
//                          while delayq rotates secrets, list the new and the
//                          old one separated by spaces: either one may sign
//   DELAYQ_WEBHOOK_STATE   a directory for the processed ids (default: a
//                          "delayq-webhooks" directory in the temp dir)
//   DELAYQ_WEBHOOK_GONE    topics we no longer want, comma-separated (410)
// A file named "paused" in the state directory makes every request a 503.

declare(strict_types=1);

const TOLERANCE = 300;    // seconds a webhook-timestamp may be off (replays)
const RETRY_AFTER = 30;   // seconds delayq waits after our 503

/** Sends the answer and ends the request. */
function answer(int $status, string $text, array $headers = []): void
{
    http_response_code($status);
    header('Content-Type: text/plain');
    foreach ($headers as $name => $value) {
        header("$name: $value");
    }
    echo $text, "\n";
    exit;
}

/**
 * Standard Webhooks: the signature is base64(HMAC-SHA256(key, "id.timestamp.body"))
 * where key is the base64 text after "whsec_"; the header holds one or more
 * "v1,<signature>" separated by spaces. True when any of them matches any
 * of our secrets.
 */
function signature_ok(array $secrets, string $id, string $timestamp, string $body, string $header): bool
{
    $signed = "$id.$timestamp.$body";
    foreach ($secrets as $secret) {
        $key = base64_decode(preg_replace('/^whsec_/', '', $secret), true);
        if ($key === false || $key === '') {
            continue;   // a misconfigured secret never matches
        }
        $expected = base64_encode(hash_hmac('sha256', $signed, $key, true));
        foreach (preg_split('/ +/', trim($header)) as $entry) {
            [$version, $signature] = array_pad(explode(',', $entry, 2), 2, '');
            // hash_equals: a constant-time compare, so timing tells nothing
            if ($version === 'v1' && hash_equals($expected, $signature)) {
                return true;
            }
        }
    }
    return false;
}

/**
 * The application's work. It must be quick (delayq waits at most the
 * callback's timeout, 10 s by default): queue anything slow and answer.
 * Here it appends the event to events.log in the state directory.
 */
function process_event(string $stateDir, string $topic, string $id, $event): void
{
    $line = json_encode(['id' => $id, 'topic' => $topic, 'event' => $event], JSON_UNESCAPED_SLASHES);
    file_put_contents("$stateDir/events.log", $line . "\n", FILE_APPEND | LOCK_EX);
}

// ---------------------------------------------------------------- request

if ($_SERVER['REQUEST_METHOD'] !== 'POST') {
    answer(405, 'POST only', ['Allow' => 'POST']);
}
$secrets = preg_split('/\s+/', trim((string) getenv('DELAYQ_WEBHOOK_SECRET')), -1, PREG_SPLIT_NO_EMPTY);
$stateDir = getenv('DELAYQ_WEBHOOK_STATE') ?: sys_get_temp_dir() . '/delayq-webhooks';
$gone = array_filter(explode(',', (string) getenv('DELAYQ_WEBHOOK_GONE')));

$id = $_SERVER['HTTP_WEBHOOK_ID'] ?? '';
$timestamp = $_SERVER['HTTP_WEBHOOK_TIMESTAMP'] ?? '';
$signature = $_SERVER['HTTP_WEBHOOK_SIGNATURE'] ?? '';
$topic = $_SERVER['HTTP_DELAYQ_TOPIC'] ?? '';
$body = (string) file_get_contents('php://input');   // the raw bytes: they are what was signed

// 1. Verify before anything else. Unsigned, stale or forged: 401.
if (!$secrets || $id === '' || !ctype_digit($timestamp) || $signature === '') {
    answer(401, 'missing webhook headers or no secret configured');
}
if (abs(time() - (int) $timestamp) > TOLERANCE) {
    answer(401, 'webhook-timestamp too far from now');
}
if (!signature_ok($secrets, $id, $timestamp, $body, $signature)) {
    answer(401, 'bad signature');
}

// 2. Do we still want these? 410 tells delayq to drop the job for good.
if (in_array($topic, $gone, true)) {
    answer(410, "no longer interested in $topic");
}

// 3. Too busy (here: a "paused" file)? 503 + Retry-After: delayq comes back later.
if (!is_dir($stateDir) && !@mkdir($stateDir, 0700, true) && !is_dir($stateDir)) {
    answer(503, 'state directory unavailable', ['Retry-After' => (string) RETRY_AFTER]);
}
if (file_exists("$stateDir/paused")) {
    answer(503, 'paused', ['Retry-After' => (string) RETRY_AFTER]);
}

// 4. De-duplicate by webhook-id: one file per id (named by its hash, so any
// id is a safe name), locked while the event is processed and marked "done"
// after. With a database, insert the id into a table with a unique key in
// the same transaction as the work (INSERT OR IGNORE / ON CONFLICT DO
// NOTHING; no row inserted means a duplicate).
$file = fopen("$stateDir/" . hash('sha256', $id), 'c+');
if ($file === false) {
    answer(503, 'cannot record the webhook id', ['Retry-After' => (string) RETRY_AFTER]);
}
if (!flock($file, LOCK_EX | LOCK_NB)) {
    // the same delivery is being processed by another request right now
    answer(503, 'in progress', ['Retry-After' => '5']);
}
if (stream_get_contents($file) === 'done') {
    answer(200, 'duplicate');   // processed before: say "done" again, do nothing
}

$event = json_decode($body, true);
process_event($stateDir, $topic, $id, json_last_error() === JSON_ERROR_NONE ? $event : $body);
fwrite($file, 'done');
fflush($file);
flock($file, LOCK_UN);
answer(200, 'ok');
