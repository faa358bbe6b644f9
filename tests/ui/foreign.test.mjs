// A page of another site tries to write to delayq through the browser
// (cross-site request forgery): Debian's chromium, headless, driven by
// playwright-core; tests/integration/test_ui.py starts a deployment with
// auth off and checks afterwards that Redis is unchanged. Environment:
//   DQ_URL        http://127.0.0.1:PORT (nginx of the deployment)
//   DQ_WRITES     JSON: [[command, fields], ...], every write command
//   CHROMIUM      the browser (default /usr/bin/chromium)
//   DQ_NPM_PREFIX where `npm ci --prefix` put node_modules/playwright-core
// Prints how many fetches the page awaited (each answered before the next).
// Every write is sent in each form a page may send without asking the
// server first (no CORS preflight): fetch in no-cors mode as text/plain,
// form-urlencoded and multipart; sendBeacon; and, for those with a body, a
// real <form> submitted as text/plain with the JSON split across its name
// and value.

import http from "node:http";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const prefix = process.env.DQ_NPM_PREFIX || path.dirname(fileURLToPath(import.meta.url));
const { chromium } = createRequire(path.join(prefix, "package.json"))("playwright-core");

const URL_ = process.env.DQ_URL;
const WRITES = JSON.parse(process.env.DQ_WRITES || "[]");
if (!URL_ || !WRITES.length) throw new Error("DQ_URL and DQ_WRITES are required");

// The foreign site: another port is another origin.
const server = http.createServer((req, res) => {
    res.writeHead(200, { "Content-Type": "text/html" });
    res.end("<!doctype html><title>elsewhere</title><iframe name=sink></iframe>");
});
await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
const foreign = `http://127.0.0.1:${server.address().port}/`;

const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
let sent = 0;
try {
    const page = await browser.newPage();
    await page.goto(foreign);
    sent = await page.evaluate(async ({ base, writes }) => {
        let n = 0;
        const post = async (url, body, type) => {
            const init = { method: "POST", mode: "no-cors", body };
            if (type) init.headers = { "Content-Type": type };
            await fetch(url, init).catch(() => {});
            n++;
        };
        for (const [cmd, fields] of writes) {
            const json = JSON.stringify(fields);
            const url = `${base}/${cmd}`;
            await post(url, json, "text/plain");
            await post(url, json, "application/x-www-form-urlencoded");
            await post(`${base}/`, JSON.stringify({ command: cmd, ...fields }), "text/plain");
            const form = new FormData();
            form.append("json", json);
            await post(url, form, null);
            navigator.sendBeacon(url, new Blob([json], { type: "text/plain" }));
            // A form posts name=value as text/plain: the JSON's body, a
            // string last, holds the '='. Submitted into the iframe, it is a
            // real navigation, as a user's click on a hostile page sends.
            if ("body" in fields) {
                const f = document.createElement("form");
                f.method = "POST";
                f.enctype = "text/plain";
                f.action = url;
                f.target = "sink";
                const input = document.createElement("input");
                const rest = { ...fields };
                delete rest.body;
                input.name = JSON.stringify({ ...rest, body: "" }).slice(0, -2);
                input.value = '"}';
                f.appendChild(input);
                document.body.appendChild(f);
                const loaded = new Promise((ok) => document.querySelector("iframe").addEventListener("load", ok, { once: true }));
                f.submit();
                await Promise.race([loaded, new Promise((ok) => setTimeout(ok, 2000))]);
                f.remove();
            }
        }
        return n;
    }, { base: URL_, writes: WRITES });
} finally {
    await browser.close();
    server.close();
}
console.log(`foreign: awaited ${sent}`);
