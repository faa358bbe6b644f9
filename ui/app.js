// app.js: the delayq dashboard. Everything it shows comes from the public
// API (api.js); what it can do is found out by harmless probes, so one page
// serves older and newer servers and read-only tokens alike.

import { get, post, getToken, setToken, isUnknownCommand, isForbidden, rawMember } from "./api.js";
import { rates, ThroughputChart, SERIES, fmtRate } from "./chart.js";

const POLL_MS = 2000; // stats: counts, rates, the chart
const SLOW_MS = 10000; // due list, schedules, callback failures
const PAGE = 100; // topics per stats page
const HOUR_MS = 3600 * 1000;
const SCAN_TOPICS = 25; // topics the /jobs-based sections look into at most
const NEWER = "needs a newer server (GET /jobs, protocol 1.1)";

const $ = (id) => document.getElementById(id);

// What the server and the token allow; null = not known yet.
const caps = { stats: null, write: null, kickById: null, kick: null, pause: null, purge: null, jobs: null };

let pageCursors = [null]; // cursor of each stats page visited; the last is the current page
let nextCursor = null;
let topics = topicTable(); // the current page's topics, from the last stats answer
let prev = null; // {t, topics, total} of the previous stats answer
let chart;
let pollTimer = null, slowTimer = null;

// ------------------------------------------------------------ tables keyed by topic

// A topic may be named after any property of Object.prototype
// (`constructor`, `toString`, `__proto__`, ...): a plain object would answer
// such a name with the inherited property. Every table keyed by a topic has
// no prototype, so only the topics put in it are found.
function topicTable(from) {
    const t = Object.create(null);
    for (const [k, v] of Object.entries(from || {})) t[k] = v;
    return t;
}

// Runs one refresh; an error in it (an answer the page did not expect, a
// bug) is shown, and the refreshes after it run as usual.
async function safely(what, fn) {
    try {
        await fn();
    } catch (e) {
        flash(`dashboard error (${what}): ${e && e.message ? e.message : e}`, true);
    }
}

// ------------------------------------------------------------ small DOM helper

function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
        if (v === null || v === undefined || v === false) continue;
        if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
        else if (k === "class") el.className = v;
        else el.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat(Infinity)) {
        if (c === null || c === undefined || c === false) continue;
        el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
}

function fill(el, ...children) {
    el.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined));
}

function flash(text, error = false) {
    const f = $("flash");
    f.textContent = text;
    f.className = error ? "error" : "";
    f.hidden = !text;
}

function fmtTime(ms) {
    if (ms === null || ms === undefined) return "–";
    const d = new Date(ms);
    const pad = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

function fmtIn(ms) {
    if (ms === null || ms === undefined) return "";
    let s = Math.round((ms - Date.now()) / 1000);
    const past = s < 0;
    s = Math.abs(s);
    const t = s < 90 ? s + " s" : s < 5400 ? Math.round(s / 60) + " min" : Math.round(s / 3600) + " h";
    return past ? t + " ago" : "in " + t;
}

// A confirmation before anything that changes jobs: resolves to true or false.
function confirmAction(text, okLabel) {
    const d = $("confirm");
    $("confirm-text").textContent = text;
    $("confirm-ok").textContent = okLabel || "Confirm";
    d.returnValue = "";
    return new Promise((resolve) => {
        d.addEventListener("close", () => resolve(d.returnValue === "ok"), { once: true });
        d.showModal();
    });
}

// ------------------------------------------------------------ capabilities

function probeId() {
    const a = new Uint8Array(8);
    crypto.getRandomValues(a);
    return "delayq-ui-probe-" + Array.from(a, (b) => b.toString(16).padStart(2, "0")).join("");
}

// Requests that change nothing: a delete and a kick of an id that does not
// exist (404 when allowed, 401/403 when the token may not, 400 from a server
// without kick by id), a pause without a topic (400 naming the field on a
// server that knows pause, reason unknown_command on one that does not), the
// same for purge (which needs the delete right), and a /jobs listing.
async function probe() {
    const id = probeId();
    const [del, kick, pause, purge, jobs] = await Promise.all([
        post("delete", { id }),
        post("kick", { id }),
        post("pause", {}),
        post("purge", {}),
        get("jobs", { topic: "delayq.ui.probe", state: "delay", limit: 1 }),
    ]);
    caps.write = del.status === 404;
    caps.kickById = kick.status === 404;
    caps.kick = caps.write && !isForbidden(kick);
    caps.pause = caps.write && !isUnknownCommand(pause) && pause.status !== 0;
    caps.purge = caps.write && !isUnknownCommand(purge) && purge.status !== 0;
    caps.jobs = jobs.status === 200 ? true : isForbidden(jobs) ? "forbidden" : false;
    document.body.classList.toggle("read-only", !caps.write);
    const a = $("access");
    if (caps.stats === false) {
        a.textContent = "token needed";
        a.className = "badge bad";
    } else {
        a.textContent = caps.write ? "full access" : "read-only";
        a.className = "badge " + (caps.write ? "ok" : "");
    }
    $("jobs-kick").hidden = !caps.kickById;
    $("jobs-delete").hidden = !caps.write;
    $("jobs-purge").hidden = !caps.purge;
}

// ------------------------------------------------------------ health

// Shards whose master has fewer replicas than redis_wait_replicas: their
// adds answer 503 while deliveries go on (docs/OPERATIONS.md).
function shortOfReplicas(body) {
    return (body && body.short_of_replicas) || [];
}

async function pollHealth() {
    const r = await get("health");
    const b = $("health");
    const short = r.status === 200 ? shortOfReplicas(r.body) : [];
    b.textContent = r.status === 200 ? (short.length ? "short of replicas: shard " +
        short.map(s => s.shard).join(", ") : "healthy") : r.status === 0 ? "unreachable" : "unhealthy";
    b.className = "badge " + (r.status !== 200 ? "bad" : short.length ? "paused" : "ok");
    b.title = short.length ? r.body.replicas_warning : r.error || "GET /health";
}

// ------------------------------------------------------------ stats, topics, chart

async function pollStats() {
    const r = await get("stats", { limit: PAGE, cursor: pageCursors[pageCursors.length - 1] });
    if (r.status !== 200 || !r.body || !r.body.success) {
        if (isForbidden(r)) {
            caps.stats = false;
            flash("This token may not read stats of all topics (" + (r.error || r.status) + "). Enter a token above.", true);
        } else flash("stats: " + (r.error || "no answer"), true);
        return;
    }
    if (caps.stats === false) flash("");
    caps.stats = true;
    const now = performance.now();
    topics = topicTable(r.body.topics);
    nextCursor = r.body.cursor || null;
    const dt = prev ? (now - prev.t) / 1000 : 0;
    const topicRates = topicTable();
    for (const [name, t] of Object.entries(topics))
        topicRates[name] = rates(prev && prev.topics[name], t, dt, ["added", "finished"]);
    if (prev) chart.push(Date.now(), rates(prev.total, r.body.total, dt));
    else chart.draw();
    prev = { t: now, topics, total: r.body.total };
    renderTotals(r.body.total);
    renderTopics(topicRates);
    renderTopicSelect();
}

// ------------------------------------------------------------ alert figures

// From GET /metrics (Prometheus text): per topic the age of its oldest
// ready job, the oldest overdue job (timer lag as jobs see it) and the
// largest lag a timer reports. A token that may not read metrics sees none.
let alerts = { readyAge: topicTable(), overdue: null, timerLag: null };

function metricValue(line) {
    const v = Number(line.slice(line.lastIndexOf(" ") + 1));
    return Number.isFinite(v) ? v : null;
}

function parseAlerts(text) {
    const out = { readyAge: topicTable(), overdue: null, timerLag: null };
    for (const line of text.split("\n")) {
        if (line.startsWith("delayq_oldest_ready_age_seconds{")) {
            const m = /topic="((?:[^"\\]|\\.)*)"/.exec(line);
            if (m) out.readyAge[m[1]] = metricValue(line);
        } else if (line.startsWith("delayq_oldest_overdue_seconds ")) {
            out.overdue = metricValue(line);
        } else if (line.startsWith("delayq_timer_lag_seconds{")) {
            out.timerLag = Math.max(out.timerLag ?? 0, metricValue(line) ?? 0);
        }
    }
    return out;
}

async function refreshAlerts() {
    const r = await get("metrics");
    if (r.status !== 200) {
        $("alerts").textContent = "";
        return;
    }
    alerts = parseAlerts(r.text);
    const secs = (v) => (v === null ? "–" : v.toFixed(1) + " s");
    $("alerts").textContent = `oldest overdue job: ${secs(alerts.overdue)} · largest timer lag: ${secs(alerts.timerLag)}`;
}

function renderTotals(total) {
    const last = chart.points[chart.points.length - 1] || {};
    $("totals").textContent =
        `all topics: ${total.delay} delay · ${total.ready} ready · ${total.reserved} reserved · ${total.buried} buried` +
        ` · added ${total.added} · finished ${total.finished} · redelivered ${total.redelivered}` +
        (last.added !== undefined ? ` · now ${fmtRate(last.added)} added/s, ${fmtRate(last.finished)} finished/s` : "");
}

function renderTopics(topicRates) {
    const rows = Object.entries(topics).map(([name, t]) => {
        const r = topicRates[name] || {};
        const acts = [];
        if (caps.kick && t.buried > 0)
            acts.push(h("button", { type: "button", class: "action kick-topic", onclick: () => kickTopic(name, t.buried) },
                `Kick ${t.buried}`));
        if (caps.pause)
            acts.push(h("button", { type: "button", class: "action pause-topic", onclick: () => pauseTopic(name, !t.paused) },
                t.paused ? "Resume" : "Pause"));
        const jobs = t.delay + t.ready + t.reserved + t.buried;
        if (caps.purge && jobs > 0)
            acts.push(h("button", { type: "button", class: "action danger purge-topic", onclick: () => purgeTopic(name, null) },
                "Purge"));
        return h("tr", { "data-topic": name },
            h("td", {}, h("button", { type: "button", class: "link", title: "list its jobs", onclick: () => listTopic(name) }, name)),
            h("td", { class: "num c-delay" }, t.delay),
            h("td", { class: "num c-ready" }, t.ready),
            h("td", { class: "num c-reserved" }, t.reserved),
            h("td", { class: "num c-buried" }, t.buried),
            h("td", { class: "num" }, fmtRate(r.added)),
            h("td", { class: "num" }, fmtRate(r.finished)),
            h("td", { class: "num ready-age" }, typeof alerts.readyAge[name] === "number" ? alerts.readyAge[name].toFixed(1) + " s" : "–"),
            h("td", {}, t.paused ? h("span", { class: "badge paused" }, "paused") : ""),
            h("td", {}, h("span", { class: "actions" }, acts)));
    });
    if (!rows.length) rows.push(h("tr", {}, h("td", { colspan: 10, class: "muted" }, "no topics yet")));
    fill($("topics-body"), rows);
    $("topics-prev").disabled = pageCursors.length < 2;
    $("topics-next").disabled = !nextCursor;
    $("topics-page").textContent = pageCursors.length > 1 || nextCursor ? "page " + pageCursors.length : "";
}

function renderTopicSelect() {
    const sel = $("jobs-topic");
    const cur = sel.value;
    const names = Object.keys(topics);
    if (cur && !names.includes(cur)) names.unshift(cur);
    const have = Array.from(sel.options, (o) => o.value);
    if (have.join("\n") === names.join("\n")) return;
    fill(sel, names.map((n) => h("option", { value: n }, n)));
    if (cur) sel.value = cur;
}

async function kickTopic(name, buried) {
    if (!(await confirmAction(`Kick ${buried} buried job${buried === 1 ? "" : "s"} of topic ${name}? They become ready.`, "Kick")))
        return;
    let kicked = 0;
    for (let left = buried; left > 0; ) {
        const r = await post("kick", { topic: name, count: Math.min(left, 10000) });
        if (r.status !== 200) return flash(`kick ${name}: ${r.error}`, true);
        kicked += r.body.kicked;
        if (r.body.kicked === 0) break;
        left -= r.body.kicked;
    }
    flash(`Kicked ${kicked} job${kicked === 1 ? "" : "s"} of ${name}.`);
    pollStats();
}

async function pauseTopic(name, pause) {
    const r = await post(pause ? "pause" : "resume", { topic: name });
    if (r.status !== 200) {
        if (isUnknownCommand(r)) {
            caps.pause = false;
            flash("This server does not know pause/resume.", true);
        } else flash(`${pause ? "pause" : "resume"} ${name}: ${r.error}`, true);
    } else flash(`${pause ? "Paused" : "Resumed"} ${name}.`);
    pollStats();
}

// Deletes a topic's jobs in one state (null: every state) after a
// confirmation that gives the count stats last showed.
async function purgeTopic(name, state) {
    const t = topics[name];
    const n = !t ? null : state ? t[state] : t.delay + t.ready + t.reserved + t.buried;
    // A topic listed by the jobs panel may be on another page of stats: no count then.
    const what = `${n === null ? "the" : n} ${state ? state + " " : ""}job${n === 1 ? "" : "s"} of topic ${name}`;
    if (!(await confirmAction(`Purge ${what}${state ? "" : " (every state)"}? They are deleted; schedules stay.`, "Purge")))
        return;
    const r = await post("purge", state ? { topic: name, state } : { topic: name });
    if (r.status !== 200) {
        if (isUnknownCommand(r)) {
            caps.purge = false;
            flash("This server does not know purge.", true);
        } else flash(`purge ${name}: ${r.error}`, true);
    } else flash(`Purged ${r.body.purged} job${r.body.purged === 1 ? "" : "s"} of ${name}.`);
    pollStats();
    if (jobsQuery && jobsQuery.topic === name) listJobs(false);
}

// ------------------------------------------------------------ search by id

async function search(id) {
    const out = $("search-result");
    if (!id) return fill(out);
    const r = await get("get", { id });
    if (r.status !== 200 || !r.body || !r.body.success) {
        fill(out, h("p", { class: "muted", id: "search-missing" }, r.status === 404 ? `No job with id ${id}.` : "get: " + r.error));
        return;
    }
    const j = r.body;
    if (j.ended !== undefined) return showRecord(out, j);
    const rows = [
        ["id", j.id], ["topic", j.topic], ["state", j.state],
        ["due", j.due === null ? "–" : `${fmtTime(j.due)} (${fmtIn(j.due)})`],
        ["ttr", j.ttr + " s"], ["attempts", j.attempts], ["retries", j.retries === null ? "unlimited" : j.retries],
        ["created", fmtTime(j.created)],
    ];
    if (j.backoff !== undefined) rows.push(["backoff", JSON.stringify(j.backoff)]);
    if (j.callback) rows.push(["callback", `${j.callback.url} (timeout ${j.callback.timeout} s)`]);
    if (j.last_attempt !== undefined)
        rows.push(["last attempt", j.last_attempt === null ? "none failed"
            : `${fmtTime(j.last_attempt.at)}: ${attemptText(j.last_attempt)}`]);
    for (const [k, v] of Object.entries(j))
        if (!["success", "id", "topic", "state", "due", "ttr", "attempts", "retries", "created", "backoff", "callback", "last_attempt", "value", "deliveries", "first_delivered"].includes(k))
            rows.push([k, typeof v === "object" ? JSON.stringify(v) : v]);
    const acts = [];
    if (caps.kickById && j.state === "buried")
        acts.push(h("button", { type: "button", class: "action", id: "job-kick", onclick: () => jobAction("kick", [j.id]) }, "Kick"));
    if (caps.write)
        acts.push(h("button", { type: "button", class: "action danger", id: "job-delete", onclick: () => jobAction("delete", [j.id]) }, "Delete"));
    fill(out,
        h("dl", { class: "job", id: "job-fields" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", { "data-field": k }, v)])),
        j.deliveries && j.deliveries.length ? timeline(j, []) : null,
        h("div", { class: "muted" }, "body"),
        h("pre", { class: "body", id: "job-body" }, rawMember(r.text, "value") ?? ""),
        h("div", { class: "actions" }, acts));
}

// The kept record of a finished or deleted job (a topic's keep): its
// timeline, oldest first; it has no body and takes no action.
function showRecord(out, j) {
    const rows = [["id", j.id], ["topic", j.topic], ["state", j.state]];
    if (j.key !== undefined) rows.push(["key", j.key]);
    rows.push(["attempts", j.attempts]);
    fill(out,
        h("dl", { class: "job", id: "job-fields" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", { "data-field": k }, v)])),
        timeline(j, [[j.state, j.ended]]),
        h("p", { class: "muted" }, "kept history: no body; an add of this id is refused until the record expires"));
}

// A job's or a record's timeline, oldest first: created, due, first
// delivered, each callback attempt (what it got, how long it took, what
// followed), then `last` (a record's end).
function timeline(j, last) {
    const attempts = (j.deliveries || []).map((d, i) =>
        [`attempt ${i + 1}: ${d.error ?? "HTTP " + d.status}${d.ms === null ? "" : ` in ${d.ms} ms`}, ${d.decision}`, d.at]);
    const events = [["created", j.created], ["due", j.due], ["first delivered", j.first_delivered], ...attempts, ...last]
        .filter(([, t]) => t !== null && t !== undefined)
        .sort((a, b) => a[1] - b[1]);
    return [
        h("div", { class: "muted" }, "timeline"),
        h("ol", { class: "timeline", id: "job-timeline" },
            events.map(([what, t]) => h("li", { "data-event": what }, `${fmtTime(t)}: ${what}`))),
    ];
}

// A state `jobs` lists records of (a topic's keep), not live jobs.
function isRecordState(state) {
    return state === "finished" || state === "deleted";
}

// What a failed callback attempt got: the error ("HTTP 500", a connection
// error) or else the status.
function attemptText(a) {
    return a.error ?? (a.status !== null && a.status !== undefined ? "HTTP " + a.status : "failed");
}

// kick or delete of the given ids, after a confirmation that gives the count.
async function jobAction(what, ids) {
    const n = ids.length;
    const noun = n === 1 ? `job ${ids[0]}` : `${n} jobs`;
    const text = what === "delete" ? `Delete ${noun}? This cannot be undone.` : `Kick ${noun}? Buried jobs become ready.`;
    if (!(await confirmAction(text, what === "delete" ? "Delete" : "Kick"))) return;
    const r = await post(what, n === 1 ? { id: ids[0] } : { ids });
    let ok = 0, failed = [];
    if (r.status === 200 && r.body.results) {
        for (const x of r.body.results) x.success ? ok++ : failed.push(`${x.id}: ${x.error || x.code}`);
    } else if (r.status === 200) ok = 1;
    else failed.push(r.error);
    const verb = what === "delete" ? "Deleted" : "Kicked";
    flash(`${verb} ${ok} of ${n}.` + (failed.length ? " Failed: " + failed.slice(0, 5).join("; ") : ""), failed.length > 0);
    const sid = $("search-id").value.trim();
    if (sid && ids.includes(sid)) search(sid);
    if (jobsQuery) listJobs(false);
    pollStats();
}

// ------------------------------------------------------------ jobs by state

let jobsQuery = null; // {topic, state}
let jobsCursor = null;
let jobsShown = []; // the listed jobs

function listTopic(name) {
    $("jobs-topic").value = name;
    listJobs(false);
    $("jobs").scrollIntoView({ behavior: "smooth", block: "start" });
}

async function listJobs(more) {
    const body = $("jobs-body");
    if (caps.jobs !== true) {
        fill(body, h("p", { class: "muted", id: "jobs-newer" }, caps.jobs === "forbidden" ? "this token may not list jobs" : NEWER));
        return;
    }
    const topic = $("jobs-topic").value, state = $("jobs-state").value;
    if (!topic) return fill(body, h("p", { class: "muted" }, "no topic to list"));
    if (!more) {
        jobsQuery = { topic, state };
        jobsCursor = null;
        jobsShown = [];
    }
    const r = await get("jobs", { ...jobsQuery, limit: 50, cursor: jobsCursor });
    if (r.status !== 200) return fill(body, h("p", { class: "muted" }, "jobs: " + r.error));
    jobsShown = jobsShown.concat(r.body.jobs || []);
    jobsCursor = r.body.cursor || null;
    $("jobs-more").hidden = !jobsCursor;
    const records = isRecordState(jobsQuery.state);
    const rows = jobsShown.map((j) =>
        h("tr", { "data-id": j.id },
            caps.write ? h("td", {}, records ? null : h("input", { type: "checkbox", class: "pick", "aria-label": "select " + j.id, onchange: updateBulk })) : null,
            h("td", {}, h("button", { type: "button", class: "link", onclick: () => { $("search-id").value = j.id; search(j.id); } }, j.id)),
            h("td", {}, j.state),
            h("td", {}, records ? fmtTime(j.ended) : j.due === null ? "–" : fmtIn(j.due)),
            h("td", { class: "num" }, j.attempts),
            h("td", {}, h("span", { class: "actions" },
                caps.kickById && j.state === "buried" ? h("button", { type: "button", class: "action", onclick: () => jobAction("kick", [j.id]) }, "Kick") : null,
                caps.write && !records ? h("button", { type: "button", class: "action danger", onclick: () => jobAction("delete", [j.id]) }, "Delete") : null))));
    fill(body, rows.length
        ? h("table", {}, h("thead", {}, h("tr", {}, caps.write ? h("th", {}, "") : null, h("th", {}, "id"), h("th", {}, "state"),
            h("th", {}, records ? "ended" : "due"), h("th", {}, "attempts"), h("th", {}, ""))), h("tbody", {}, rows))
        : h("p", { class: "muted" }, `no ${jobsQuery.state} jobs in ${jobsQuery.topic}`));
    updateBulk();
}

function picked() {
    return Array.from(document.querySelectorAll("#jobs-body input.pick:checked"), (c) => c.closest("tr").dataset.id);
}

function updateBulk() {
    const ids = picked();
    $("jobs-bulk").hidden = !caps.write || ids.length === 0;
    $("jobs-selected").textContent = `${ids.length} selected`;
    $("jobs-kick").hidden = !(caps.kickById && jobsQuery && jobsQuery.state === "buried");
}

// ------------------------------------------------------------ due, schedules, callbacks

// The first page of each of the busiest topics' jobs in a state.
async function scanJobs(state, wanted) {
    const names = Object.entries(topics).filter(([, t]) => wanted(t)).slice(0, SCAN_TOPICS).map(([n]) => n);
    const answers = await Promise.all(names.map((topic) => get("jobs", { topic, state, limit: 200 })));
    return answers.filter((r) => r.status === 200 && r.body && r.body.jobs).flatMap((r) => r.body.jobs);
}

async function refreshDue() {
    const out = $("due-body");
    if (caps.jobs !== true) return fill(out, h("span", { id: "due-newer" }, caps.jobs === "forbidden" ? "this token may not list jobs" : NEWER));
    const until = Date.now() + HOUR_MS;
    const jobs = (await scanJobs("delay", (t) => t.delay > 0)).filter((j) => j.due !== null && j.due <= until);
    jobs.sort((a, b) => a.due - b.due);
    if (!jobs.length) return fill(out, "nothing due within the hour");
    out.classList.remove("muted");
    fill(out, h("p", {}, `${jobs.length} job${jobs.length === 1 ? "" : "s"} due within the hour` + (jobs.length >= 200 ? " (at least)" : "")),
        h("table", {}, h("tbody", {}, jobs.slice(0, 50).map((j) =>
            h("tr", {}, h("td", {}, fmtIn(j.due)), h("td", {}, j.topic), h("td", {}, j.id))))));
}

async function refreshSchedules() {
    const out = $("schedules-body");
    const r = await get("schedules");
    if (r.status !== 200) return fill(out, isUnknownCommand(r) ? "needs a newer server (GET /schedules)" : "schedules: " + r.error);
    const s = r.body.schedules || [];
    if (!s.length) return fill(out, "no schedules");
    out.classList.remove("muted");
    fill(out, h("table", {},
        h("thead", {}, h("tr", {}, ["id", "topic", "when", "next", "last", "missed"].map((x) => h("th", {}, x)))),
        h("tbody", {}, s.map((x) => h("tr", { "data-id": x.id },
            h("td", {}, x.id), h("td", {}, x.topic),
            h("td", {}, x.cron !== undefined ? `${x.cron} ${x.tz || ""}`.trim() : `every ${x.every} s`),
            h("td", {}, x.next === null ? "–" : `${fmtTime(x.next)} (${fmtIn(x.next)})`),
            h("td", {}, fmtTime(x.last)), h("td", { class: "num" }, x.missed))))));
}

// Each topic's policy (GET /policies): its limits, and their use now.
// Use fields a server does not give (an older one) are left out.
const POLICY_USE = ["reserved", "throttled", "tokens", "keys_waiting"];

async function refreshPolicies() {
    const out = $("policies-body");
    const r = await get("policies");
    if (r.status !== 200) return fill(out, isUnknownCommand(r) ? "needs a newer server (GET /policies)" : "policies: " + r.error);
    const topics = Object.entries(r.body.policies || {});
    if (!topics.length) return fill(out, "no topic has a policy");
    out.classList.remove("muted");
    const limit = (n, per) => (n === null || n === undefined ? "–" : per ? `${n} / ${per} s` : String(n));
    const use = POLICY_USE.filter((f) => topics.some(([, p]) => p[f] !== undefined));
    fill(out, h("table", {},
        h("thead", {}, h("tr", {}, ["topic", "concurrency", "rate", "key concurrency", "key rate", "keep", ...use]
            .map((x) => h("th", {}, x.replace("_", " "))))),
        h("tbody", {}, topics.map(([name, p]) => h("tr", { "data-topic": name },
            h("td", {}, name), h("td", { class: "num" }, limit(p.concurrency)),
            h("td", { class: "num" }, limit(p.rate, p.period)), h("td", { class: "num" }, limit(p.key_concurrency)),
            h("td", { class: "num" }, limit(p.key_rate, p.key_period)),
            h("td", { class: "num" }, p.keep ? `${p.keep} s` : "–"),
            use.map((f) => h("td", { class: "num", "data-use": f }, p[f] ?? "–")))))),
        r.body.cursor ? h("p", { class: "muted" }, "more topics have policies: `delayq policies` lists them all") : null);
}

async function refreshCallbacks() {
    const out = $("callbacks-body");
    if (caps.jobs !== true)
        return fill(out, (caps.jobs === "forbidden" ? "this token may not list jobs" : NEWER) + "; find a job by id to see its last attempt");
    const jobs = [
        ...(await scanJobs("buried", (t) => t.buried > 0)),
        ...(await scanJobs("delay", (t) => t.delay > 0)),
    ].filter((j) => j.last_attempt);
    if (!jobs.length) return fill(out, "no failed callbacks");
    out.classList.remove("muted");
    fill(out, h("table", {},
        h("thead", {}, h("tr", {}, ["id", "topic", "state", "last attempt", "status", "error"].map((x) => h("th", {}, x)))),
        h("tbody", {}, jobs.map((j) => h("tr", {},
            h("td", {}, j.id), h("td", {}, j.topic), h("td", {}, j.state), h("td", {}, fmtTime(j.last_attempt.at)),
            h("td", {}, j.last_attempt.status ?? "–"), h("td", {}, attemptText(j.last_attempt)))))));
}

function refreshSlow() {
    safely("metrics", refreshAlerts);
    safely("due", refreshDue);
    safely("schedules", refreshSchedules);
    safely("policies", refreshPolicies);
    safely("callbacks", refreshCallbacks);
}

// ------------------------------------------------------------ start

// The timers are set first: whatever fails in the first round, the page
// polls again.
async function restart() {
    clearInterval(pollTimer);
    clearInterval(slowTimer);
    prev = null;
    pageCursors = [null];
    // Nothing is allowed until the probes for this token have answered.
    Object.assign(caps, { stats: null, write: false, kickById: false, kick: false, pause: false, purge: false, jobs: null });
    pollTimer = setInterval(() => { if (!document.hidden) safely("stats", pollStats); }, POLL_MS);
    slowTimer = setInterval(() => { if (!document.hidden) { safely("health", pollHealth); refreshSlow(); } }, SLOW_MS);
    await safely("stats", pollStats);
    await safely("access", probe);
    await safely("topics", () => renderTopics(topicTable()));
    safely("health", pollHealth);
    refreshSlow();
    safely("jobs", () => listJobs(false));
}

function init() {
    chart = new ThroughputChart($("chart"));
    fill($("legend"), SERIES.map((s) => {
        const swatch = h("i");
        swatch.style.background = s.color;
        return h("span", {}, swatch, s.label);
    }));
    $("token").value = getToken();
    $("token-form").addEventListener("submit", (e) => {
        e.preventDefault();
        setToken($("token").value.trim());
        flash("");
        restart();
    });
    $("token-forget").addEventListener("click", () => {
        setToken("");
        $("token").value = "";
        restart();
    });
    $("search-form").addEventListener("submit", (e) => {
        e.preventDefault();
        search($("search-id").value.trim());
    });
    $("jobs-form").addEventListener("submit", (e) => {
        e.preventDefault();
        listJobs(false);
    });
    $("jobs-more").addEventListener("click", () => listJobs(true));
    $("jobs-kick").addEventListener("click", () => jobAction("kick", picked()));
    $("jobs-delete").addEventListener("click", () => jobAction("delete", picked()));
    // purge deletes live jobs: it has nothing to do with kept records
    $("jobs-state").addEventListener("change", () => {
        $("jobs-purge").hidden = !caps.purge || isRecordState($("jobs-state").value);
    });
    $("jobs-purge").addEventListener("click", () => {
        if ($("jobs-topic").value) purgeTopic($("jobs-topic").value, $("jobs-state").value);
    });
    $("topics-next").addEventListener("click", () => {
        if (!nextCursor) return;
        pageCursors.push(nextCursor);
        prev = null;
        pollStats();
    });
    $("topics-prev").addEventListener("click", () => {
        if (pageCursors.length < 2) return;
        pageCursors.pop();
        prev = null;
        pollStats();
    });
    window.addEventListener("resize", () => chart.draw());
    restart();
}

init();
