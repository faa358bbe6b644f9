// api.js: the dashboard's only way to reach delayq: the public JSON API
// (docs/PROTOCOL.md) on the same origin, one directory above /ui/. No
// state here but the bearer token, which lives in sessionStorage.

const TOKEN_KEY = "delayq.token";

// The API's root: the parent of the directory this page is served from, so
// the dashboard works wherever the server block mounts delayq's locations.
export const apiBase = new URL("../", document.baseURI || location.href);

export function getToken() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(token) {
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
}

// One request. Resolves to {status, body, text}: status 0 when the server
// could not be reached, body null when the answer is not JSON. Never throws.
export async function request(method, path, fields) {
    const headers = {};
    const token = getToken();
    if (token) headers["Authorization"] = "Bearer " + token;
    let url = new URL(path, apiBase);
    let init = { method, headers, cache: "no-store" };
    if (method === "GET" && fields) {
        for (const [k, v] of Object.entries(fields))
            if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, String(v));
    } else if (method === "POST") {
        headers["Content-Type"] = "application/json";
        init.body = JSON.stringify(fields || {});
    }
    let resp;
    try {
        resp = await fetch(url, init);
    } catch (e) {
        return { status: 0, body: null, text: "", error: "cannot reach the server: " + e.message };
    }
    const text = await resp.text();
    let body = null;
    try {
        body = JSON.parse(text);
    } catch (e) {
        body = null;
    }
    const error = body && body.success === false ? body.error || body.code : resp.ok ? null : "HTTP " + resp.status;
    return { status: resp.status, body, text, error };
}

export const get = (path, query) => request("GET", path, query);
export const post = (command, fields) => request("POST", command, fields);

// True when an answer says the server does not know the command at all (an
// older server, by its stable code), as opposed to refusing its fields; a
// 404 that is not delayq's own not_found means no endpoint either.
export function isUnknownCommand(r) {
    if (r.status === 404 && (!r.body || r.body.code !== "not_found")) return true;
    return r.status === 400 && !!r.body && r.body.reason === "unknown_command";
}

// True when the token may not do what was asked.
export const isForbidden = (r) => r.status === 401 || r.status === 403;

// ------------------------------------------------------------ raw JSON text
// The text of one member of a JSON object exactly as the server wrote it
// (JSON.parse would round big numbers and decode escapes, and a job's body
// is to be shown as it is stored). Returns null when the key is absent or
// the text is not an object.

function skipWs(s, i) {
    while (i < s.length && (s[i] === " " || s[i] === "\t" || s[i] === "\n" || s[i] === "\r")) i++;
    return i;
}

function skipString(s, i) {
    // s[i] is the opening quote; returns the index after the closing one.
    for (i++; i < s.length; i++) {
        if (s[i] === "\\") i++;
        else if (s[i] === '"') return i + 1;
    }
    return -1;
}

function skipValue(s, i) {
    if (s[i] === '"') return skipString(s, i);
    if (s[i] === "{" || s[i] === "[") {
        let depth = 0;
        for (; i < s.length; i++) {
            const c = s[i];
            if (c === '"') {
                i = skipString(s, i);
                if (i < 0) return -1;
                i--;
            } else if (c === "{" || c === "[") depth++;
            else if (c === "}" || c === "]") {
                depth--;
                if (depth === 0) return i + 1;
            }
        }
        return -1;
    }
    while (i < s.length && !",}] \t\r\n".includes(s[i])) i++;
    return i;
}

export function rawMember(text, key) {
    let i = skipWs(text, 0);
    if (text[i] !== "{") return null;
    i = skipWs(text, i + 1);
    while (i < text.length && text[i] !== "}") {
        const kEnd = skipString(text, i);
        if (kEnd < 0) return null;
        const k = JSON.parse(text.slice(i, kEnd));
        i = skipWs(text, kEnd);
        if (text[i] !== ":") return null;
        const vStart = skipWs(text, i + 1);
        const vEnd = skipValue(text, vStart);
        if (vEnd < 0) return null;
        if (k === key) return text.slice(vStart, vEnd);
        i = skipWs(text, vEnd);
        if (text[i] === ",") i = skipWs(text, i + 1);
    }
    return null;
}
