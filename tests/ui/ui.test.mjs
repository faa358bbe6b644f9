// The dashboard in a real browser: Debian's chromium, headless, driven by
// playwright-core, against a running delayq (tests/integration/test_ui.py
// starts one and runs this). Environment:
//   DQ_URL        http://127.0.0.1:PORT (nginx of the deployment)
//   DQ_ADMIN      a token that may do everything
//   DQ_READONLY   a token limited to get, stats, schedules
//   DQ_ARTIFACTS  directory for screenshots
//   DQ_CLOSED_PORT a loopback port nothing listens on (a failing callback)
//   CHROMIUM      the browser (default /usr/bin/chromium)
//   DQ_NPM_PREFIX where `npm ci --prefix` put node_modules/playwright-core
//                 (default this folder; a dist tree has none of its own)
// Exits non-zero on the first failed check.

import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

// playwright-core is CommonJS, so it is required from the prefix's
// node_modules, wherever that is.
const prefix = process.env.DQ_NPM_PREFIX || path.dirname(fileURLToPath(import.meta.url));
const { chromium } = createRequire(path.join(prefix, "package.json"))("playwright-core");

const URL_ = process.env.DQ_URL;
const ADMIN = process.env.DQ_ADMIN;
const READONLY = process.env.DQ_READONLY;
const ART = process.env.DQ_ARTIFACTS || fs.mkdtempSync(path.join(os.tmpdir(), "dq-ui-art-"));
if (!URL_ || !ADMIN || !READONLY) throw new Error("DQ_URL, DQ_ADMIN and DQ_READONLY are required");
fs.mkdirSync(ART, { recursive: true });

const T = 10000; // ms a change may take to show (stats polls every 2 s)
let step = "start";
const log = (m) => console.log(`ui: ${m}`);
function check(cond, what) {
    if (!cond) throw new Error(`${step}: ${what}`);
}

// ------------------------------------------------------------ the API, directly
async function api(cmd, fields, token = ADMIN, raw = null) {
    const r = await fetch(`${URL_}/${cmd}`, {
        method: "POST",
        headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
        body: raw ?? JSON.stringify(fields),
    });
    return { status: r.status, body: await r.json() };
}
async function apiOk(cmd, fields, raw) {
    const r = await api(cmd, fields, ADMIN, raw);
    check(r.status === 200 && r.body.success, `${cmd} ${raw ?? JSON.stringify(fields)} -> ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
}
async function getJob(id) {
    const r = await fetch(`${URL_}/get?id=${encodeURIComponent(id)}`, { headers: { Authorization: `Bearer ${ADMIN}` } });
    return { status: r.status, body: await r.json() };
}
async function makeBuried(topic, id) {
    await apiOk("add", { topic, id, retries: 0, body: { buried: id } });
    const p = await apiOk("pop", { topic });
    check(p.id === id, `pop ${topic} gave ${p.id}`);
    await apiOk("bury", { id });
}

// ------------------------------------------------------------ the browser
const userDir = fs.mkdtempSync(path.join(os.tmpdir(), "dq-ui-chromium-"));
const browser = await chromium.launchPersistentContext(userDir, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1280, height: 800 },
});
const problems = [];
async function newPage(viewport) {
    const page = await browser.newPage();
    if (viewport) await page.setViewportSize(viewport);
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    page.on("console", (m) => { if (m.type() === "error") problems.push(`console error: ${m.text()}`); });
    // Expected: 4xx answers of the capability probes show as failed loads.
    return page;
}
const cell = (page, topic, col) => page.locator(`#topics-body tr[data-topic="${topic}"] .c-${col}`);
async function expectText(loc, want, what) {
    try {
        await loc.waitFor({ state: "attached", timeout: T });
        const deadline = Date.now() + T;
        for (;;) {
            const got = (await loc.textContent()) ?? "";
            if (want instanceof RegExp ? want.test(got) : got === want) return;
            if (Date.now() > deadline) throw new Error(`got ${JSON.stringify(got)}`);
            await new Promise((r) => setTimeout(r, 100));
        }
    } catch (e) {
        throw new Error(`${step}: ${what}: wanted ${want}: ${e.message.split("\n")[0]}`);
    }
}
async function useToken(page, token) {
    await page.goto(`${URL_}/ui/`);
    await page.fill("#token", token);
    await page.click("#token-form button[type=submit]");
}

let exitCode = 0;
try {
    // -------------------------------------------------------- load, counts
    step = "load";
    const page = await newPage();
    await page.goto(`${URL_}/ui/`);
    await expectText(page.locator("#access"), "token needed", "without a token the page asks for one");
    await useToken(page, ADMIN);
    await expectText(page.locator("#access"), "full access", "the admin token has full access");
    await expectText(page.locator("#health"), "healthy", "health badge");

    step = "counts change as jobs are added";
    for (let i = 1; i <= 3; i++) await apiOk("add", { topic: "ui.orders", id: `ui-order-${i}`, delay: 600, body: { order: i } });
    await expectText(cell(page, "ui.orders", "delay"), "3", "ui.orders delay count");
    for (let i = 1; i <= 2; i++) await apiOk("add", { topic: "ui.orders", id: `ui-now-${i}`, body: i });
    await expectText(cell(page, "ui.orders", "ready"), "2", "ui.orders ready count");
    await expectText(page.locator("#totals"), /added 5\b/, "totals count the adds");

    step = "token kept for the session";
    await page.reload();
    await expectText(page.locator("#access"), "full access", "after a reload the token is still used");
    check((await page.inputValue("#token")) === ADMIN, "the token field is filled from sessionStorage");

    // -------------------------------------------------------- topic names
    step = "topics named after Object.prototype's properties";
    // Each is a valid topic; a plain object keyed by topic would find the
    // inherited property instead (and once stopped every poll at start).
    const inherited = ["constructor", "toString", "valueOf", "__proto__", "hasOwnProperty"];
    for (const topic of inherited) await apiOk("add", { topic, id: `ui-proto-${topic}`, body: topic });
    await page.reload(); // the first round of a start, where an error stopped the page for good
    for (const topic of inherited) {
        await expectText(cell(page, topic, "ready"), "1", `${topic}: its ready count`);
        await expectText(page.locator(`#topics-body tr[data-topic="${topic}"] td.ready-age`), /^\d+\.\d s$/,
            `${topic}: the age of its oldest ready job, from /metrics`);
    }
    await apiOk("add", { topic: "constructor", id: "ui-proto-constructor-2", body: 2 });
    await expectText(cell(page, "constructor", "ready"), "2", "the page polls on");
    for (const topic of inherited) await apiOk("purge", { topic });

    step = "an unexpected answer is shown and the page polls on";
    const isStats = (url) => url.pathname === "/stats";
    await page.route(isStats, (route) => route.fulfill({ status: 200, contentType: "application/json",
        body: '{"success":true,"topics":{"ui.broken":null},"total":null}' }));
    await page.reload();
    await expectText(page.locator("#flash"), /dashboard error \(stats\)/, "the error is shown");
    await page.unroute(isStats);
    await apiOk("add", { topic: "ui.recover", id: "ui-recover", body: 1 });
    await expectText(cell(page, "ui.recover", "ready"), "1", "stats answered again: the page shows it");
    await apiOk("purge", { topic: "ui.recover" });

    // -------------------------------------------------------- search
    step = "search by id";
    const exact = '{"n":12345678901234567890123,"s":"caf\\u00e9","z":[1.0e+2,null]}';
    await apiOk("add", null, `{"topic":"ui.exact","id":"ui-exact","delay":900,"body":${exact}}`);
    await page.fill("#search-id", "ui-exact");
    await page.click("#search-form button");
    await expectText(page.locator("#job-body"), exact, "the body as the server returned it, byte for byte");
    await expectText(page.locator('#job-fields dd[data-field="state"]'), "delay", "state");
    await expectText(page.locator('#job-fields dd[data-field="topic"]'), "ui.exact", "topic");

    // -------------------------------------------------------- delete
    step = "delete, cancelled then confirmed";
    await page.click("#job-delete");
    await expectText(page.locator("#confirm-text"), /Delete job ui-exact\?/, "confirmation names the job");
    await page.click("#confirm-cancel");
    check((await getJob("ui-exact")).status === 200, "a cancelled delete deleted nothing");
    await page.click("#job-delete");
    await page.click("#confirm-ok");
    await expectText(page.locator("#search-missing"), /No job with id ui-exact/, "the deleted job is gone from the page");
    check((await getJob("ui-exact")).status === 404, "the server deleted it");
    await expectText(page.locator("#flash"), /Deleted 1 of 1/, "flash message");

    // -------------------------------------------------------- kick
    step = "kick a buried job";
    await makeBuried("ui.bury", "ui-buried-1");
    await expectText(cell(page, "ui.bury", "buried"), "1", "ui.bury shows the buried job");
    const kickById = (await page.locator("#search-id").count()) > 0 && (await api("kick", { id: "ui-no-such-job" })).status === 404;
    if (kickById) {
        await page.fill("#search-id", "ui-buried-1");
        await page.click("#search-form button");
        await page.click("#job-kick");
        await expectText(page.locator("#confirm-text"), /Kick job ui-buried-1\?/, "confirmation");
    } else {
        log("kick by id: this server has none (kick needs a topic): the topic's bulk kick is used");
        await page.click('#topics-body tr[data-topic="ui.bury"] .kick-topic');
        await expectText(page.locator("#confirm-text"), /Kick 1 buried job of topic ui\.bury\?/, "confirmation gives the count");
    }
    await page.click("#confirm-ok");
    await expectText(cell(page, "ui.bury", "buried"), "0", "no longer buried");
    await expectText(cell(page, "ui.bury", "ready"), "1", "ready again");
    check((await getJob("ui-buried-1")).body.state === "ready", "the server made it ready");

    step = "bulk kick of several, with the count";
    await makeBuried("ui.bulk", "ui-bulk-1");
    await makeBuried("ui.bulk", "ui-bulk-2");
    await expectText(cell(page, "ui.bulk", "buried"), "2", "two buried");
    await page.click('#topics-body tr[data-topic="ui.bulk"] .kick-topic');
    await expectText(page.locator("#confirm-text"), /Kick 2 buried jobs of topic ui\.bulk\?/, "confirmation gives the count");
    await page.click("#confirm-ok");
    await expectText(cell(page, "ui.bulk", "ready"), "2", "both ready");

    // -------------------------------------------------------- pause
    step = "pause";
    const pauseKnown = (await api("pause", {})).body.code !== "unknown_command";
    const pauseButtons = await page.locator("#topics-body .pause-topic").count();
    if (pauseKnown) {
        check(pauseButtons > 0, "the server knows pause: the topics have Pause buttons");
        await page.click('#topics-body tr[data-topic="ui.orders"] .pause-topic');
        await expectText(page.locator('#topics-body tr[data-topic="ui.orders"] .badge.paused'), "paused", "paused badge from stats");
        await page.click('#topics-body tr[data-topic="ui.orders"] .pause-topic');
        await page.locator('#topics-body tr[data-topic="ui.orders"] .badge.paused').waitFor({ state: "detached", timeout: T });
    } else {
        check(pauseButtons === 0, "the server does not know pause: no Pause buttons");
        log("pause: skipped, this server does not know pause/resume (checked: no Pause button is shown)");
    }

    // -------------------------------------------------------- purge
    step = "purge";
    const purgeKnown = (await api("purge", {})).body.reason !== "unknown_command";
    for (let i = 1; i <= 3; i++) await apiOk("add", { topic: "ui.purge", id: `ui-purge-${i}`, delay: 600, body: i });
    await makeBuried("ui.purge", "ui-purge-buried");
    await apiOk("add", { topic: "ui.purge", id: "ui-purge-ready", body: 0 });
    await expectText(cell(page, "ui.purge", "delay"), "3", "three delayed to purge");
    await expectText(cell(page, "ui.purge", "buried"), "1", "one buried to purge");
    if (purgeKnown) {
        step = "purge one state, cancelled then confirmed";
        await page.selectOption("#jobs-topic", "ui.purge");
        await page.selectOption("#jobs-state", "delay");
        await page.click("#jobs-purge");
        await expectText(page.locator("#confirm-text"), /^Purge 3 delay jobs of topic ui\.purge\?/, "confirmation names the state and the count");
        await page.click("#confirm-cancel");
        check((await getJob("ui-purge-1")).status === 200, "cancelled: nothing purged");
        await page.click("#jobs-purge");
        await page.click("#confirm-ok");
        await expectText(page.locator("#flash"), "Purged 3 jobs of ui.purge.", "the answer's count");
        await expectText(cell(page, "ui.purge", "delay"), "0", "no delayed job left");
        check((await getJob("ui-purge-buried")).body.state === "buried", "other states untouched");

        step = "purge every state of a topic";
        await page.click('#topics-body tr[data-topic="ui.purge"] .purge-topic');
        await expectText(page.locator("#confirm-text"), /^Purge 2 jobs of topic ui\.purge \(every state\)\?/, "confirmation gives the count");
        await page.click("#confirm-ok");
        await expectText(page.locator("#flash"), "Purged 2 jobs of ui.purge.", "the answer's count");
        await expectText(cell(page, "ui.purge", "buried"), "0", "no buried job left");
        await expectText(cell(page, "ui.purge", "ready"), "0", "no ready job left");
        check((await getJob("ui-purge-ready")).status === 404, "purged jobs are gone");
        check((await page.locator('#topics-body tr[data-topic="ui.purge"] .purge-topic').count()) === 0,
            "an empty topic has no Purge button");
    } else {
        check((await page.locator("#topics-body .purge-topic").count()) === 0, "the server does not know purge: no Purge buttons");
        check(!(await page.locator("#jobs-purge").isVisible()), "no purge button by the jobs list");
        log("purge: skipped, this server does not know purge (checked: no Purge button is shown)");
    }

    // -------------------------------------------------------- /jobs sections
    step = "jobs, due within the hour, callback failures";
    const jobsKnown = (await fetch(`${URL_}/jobs?topic=ui.orders&state=delay&limit=5`, { headers: { Authorization: `Bearer ${ADMIN}` } })).status === 200;
    if (jobsKnown) {
        await expectText(page.locator("#due-body"), /3 jobs due within the hour/, "the three delayed orders are due within the hour");
        await makeBuried("ui.list", "ui-list-1");
        await makeBuried("ui.list", "ui-list-2");
        await expectText(cell(page, "ui.list", "buried"), "2", "two buried to list");
        await page.selectOption("#jobs-topic", "ui.list");
        await page.selectOption("#jobs-state", "buried");
        await page.click("#jobs-form button");
        await page.locator('#jobs-body tr[data-id="ui-list-1"] input.pick').check();
        await page.locator('#jobs-body tr[data-id="ui-list-2"] input.pick').check();
        await expectText(page.locator("#jobs-selected"), "2 selected", "selection count");
        await page.click("#jobs-delete");
        await expectText(page.locator("#confirm-text"), /Delete 2 jobs\?/, "bulk confirmation gives the count");
        await page.click("#confirm-ok");
        await expectText(page.locator("#flash"), /Deleted 2 of 2/, "bulk delete");
        check((await getJob("ui-list-1")).status === 404 && (await getJob("ui-list-2")).status === 404, "both deleted");

        step = "kept history: a record's timeline, the finished list";
        await apiOk("policy", { topic: "ui.kept", keep: 600 });
        await apiOk("add", { topic: "ui.kept", id: "ui-kept-1", body: 1 });
        check((await apiOk("pop", { topic: "ui.kept" })).id === "ui-kept-1", "popped the kept job");
        await apiOk("finish", { id: "ui-kept-1" });
        if ((await getJob("ui-kept-1")).status === 200) {
            await page.fill("#search-id", "ui-kept-1");
            await page.click("#search-form button");
            await expectText(page.locator('#job-fields dd[data-field="state"]'), "finished", "a record's state");
            await expectText(page.locator("#job-timeline"), /created[\s\S]*first delivered[\s\S]*finished/, "its timeline, oldest first");
            check((await page.locator("#job-delete").count()) === 0, "a record has no Delete");
            await page.selectOption("#jobs-topic", "ui.kept");
            await page.selectOption("#jobs-state", "finished");
            check(!(await page.locator("#jobs-purge").isVisible()), "no purge of kept records");
            await page.click("#jobs-form button");
            await expectText(page.locator('#jobs-body tr[data-id="ui-kept-1"]'), /finished/, "the finished list");
            check((await page.locator('#jobs-body tr[data-id="ui-kept-1"] input.pick').count()) === 0, "a record cannot be picked");
            await page.selectOption("#jobs-state", "buried");
        } else {
            log("kept history: this server keeps none (get of a finished job is 404)");
        }
    } else {
        await expectText(page.locator("#due-newer"), /needs a newer server/, "due list says what it needs");
        await expectText(page.locator("#jobs-newer"), /needs a newer server/, "jobs list says what it needs");
        await expectText(page.locator("#callbacks-body"), /needs a newer server/, "callback failures say what they need");
        log("GET /jobs: this server has none: the due list, the lists by state and callback failures say so (checked)");
    }

    step = "callback failures";
    const closed = process.env.DQ_CLOSED_PORT;
    check(closed, "DQ_CLOSED_PORT is required");
    await apiOk("add", { topic: "ui.hook", id: "ui-hook-1", retries: 0, body: 1,
        callback: { url: `http://127.0.0.1:${closed}/hook`, timeout: 1 } });
    for (const end = Date.now() + T; ; ) {
        const j = await getJob("ui-hook-1");
        if (j.body.state === "buried" && j.body.last_attempt) break;
        check(Date.now() < end, `the callback job did not fail and get buried: ${JSON.stringify(j.body)}`);
        await new Promise((r) => setTimeout(r, 200));
    }
    if (jobsKnown) {
        await page.reload();
        await expectText(page.locator("#callbacks-body"), /ui-hook-1/, "the failed callback is listed");
    }
    await page.fill("#search-id", "ui-hook-1");
    await page.click("#search-form button");
    await expectText(page.locator('#job-fields dd[data-field="last attempt"]'), /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d: \S/,
        "the job's last attempt: when and what failed");
    await expectText(page.locator("#job-timeline"), /created[\s\S]*attempt 1: [^\n]+, buried/,
        "a live job's timeline lists its callback attempts and what followed");

    step = "schedules";
    await apiOk("schedule", { id: "ui-nightly", topic: "ui.report", cron: "0 3 * * *", tz: "UTC", body: 1 });
    await page.reload();
    await expectText(page.locator('#schedules-body tr[data-id="ui-nightly"]'), /0 3 \* \* \* UTC/, "the schedule is listed");

    step = "limits";
    await apiOk("policy", { topic: "ui.limited", concurrency: 2, rate: 10, period: 1 });
    for (let i = 0; i < 3; i++) await apiOk("add", { topic: "ui.limited", body: i });
    check((await apiOk("pop", { topic: "ui.limited", count: 3 })).jobs.length === 2, "the limit gave 2 of 3");
    await page.reload();
    const limited = page.locator('#policies-body tr[data-topic="ui.limited"]');
    await expectText(limited, /ui\.limited\s*2\s*10 \/ 1 s/, "a topic's limits");
    await expectText(limited.locator('td[data-use="reserved"]'), "2", "reserved against the limit");
    await expectText(limited.locator('td[data-use="throttled"]'), "1", "ready jobs held back");

    step = "throughput chart";
    for (let i = 0; i < 20; i++) await apiOk("add", { topic: "ui.rate", body: i });
    await expectText(page.locator("#totals"), /now \d[\d.]* added\/s/, "totals show the current rate");
    const bluePixels = () => page.evaluate(() => {
        const c = document.getElementById("chart");
        const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
        let blue = 0; // the added/s line: #2b6cb0, give or take anti-aliasing
        for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 128 && d[i + 2] > 140 && d[i + 2] - d[i] > 80) blue++;
        return blue;
    });
    let drawn = 0;
    for (const end = Date.now() + T; drawn === 0 && Date.now() < end; ) {
        drawn = await bluePixels();
        if (!drawn) await new Promise((r) => setTimeout(r, 300));
    }
    check(drawn > 0, "the chart drew the added/s line");

    // -------------------------------------------------------- screenshots
    step = "alert figures from /metrics";
    await page.reload(); // the slow refresh reads /metrics at once
    await expectText(page.locator("#alerts"), /^oldest overdue job: (–|\d+\.\d s) · largest timer lag: (–|\d+\.\d s)$/,
        "the oldest overdue job and the timer lag are shown");
    await expectText(page.locator('#topics-body tr[data-topic="ui.rate"] td.ready-age'), /^\d+\.\d s$/,
        "a topic with ready jobs shows the age of its oldest");

    step = "screenshots";
    await makeBuried("ui.keep", "ui-buried-2"); // so that a Kick button would show
    await expectText(cell(page, "ui.keep", "buried"), "1", "one buried");
    await page.screenshot({ path: path.join(ART, "desktop-1280x800.png") });
    const phone = await newPage({ width: 390, height: 844 });
    await useToken(phone, ADMIN);
    await expectText(cell(phone, "ui.keep", "buried"), "1", "phone: counts");
    const overflow = await phone.evaluate(() => document.documentElement.scrollWidth);
    check(!(await phone.locator("#jobs-bulk").isVisible()), "phone: no bulk bar while nothing is selected");
    check(overflow <= 390, `phone: the page fits 390 px (scrollWidth ${overflow})`);
    await phone.screenshot({ path: path.join(ART, "phone-390x844.png"), fullPage: true });
    await phone.close();

    // -------------------------------------------------------- read-only
    step = "read-only token";
    check((await page.locator("#topics-body button.action").count()) > 0, "the admin sees action buttons");
    const ro = await newPage();
    await useToken(ro, READONLY);
    await expectText(ro.locator("#access"), "read-only", "the read-only token is recognised");
    await expectText(cell(ro, "ui.keep", "buried"), "1", "read-only: counts");
    check((await ro.locator("button.action:visible").count()) === 0, "read-only: no action buttons");
    await ro.fill("#search-id", "ui-buried-2");
    await ro.click("#search-form button");
    await expectText(ro.locator('#job-fields dd[data-field="state"]'), "buried", "read-only: search works");
    check((await ro.locator("#job-delete, #job-kick").count()) === 0, "read-only: no job actions");
    await ro.screenshot({ path: path.join(ART, "read-only-1280x800.png") });
    await ro.close();

    step = "no errors in the page";
    // The probes' expected 4xx answers are logged by chromium as failed
    // loads; anything else (a script error, a CSP violation) is a failure.
    const real = problems.filter((p) => !/Failed to load resource: the server responded with a status of (400|401|403|404)/.test(p));
    check(real.length === 0, real.join("\n"));
    log(`all checks passed; screenshots in ${ART}`);
} catch (e) {
    console.error(`ui: FAIL: ${e.message}`);
    exitCode = 1;
} finally {
    await browser.close();
    fs.rmSync(userDir, { recursive: true, force: true });
}
process.exit(exitCode);
