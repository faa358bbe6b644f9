// chart.js: rates from successive stats answers, and the live throughput
// chart (a canvas, no library).

// Counters per second between two stats snapshots of one topic (or of
// `total`): {added, finished, redelivered} with null for a counter that went
// down (the topic was forgotten and started again) or when dt is not > 0.
export function rates(prev, cur, dtSeconds, names = ["added", "finished", "redelivered"]) {
    const out = {};
    for (const n of names) {
        if (!prev || !cur || !(dtSeconds > 0) || typeof prev[n] !== "number" || typeof cur[n] !== "number" || cur[n] < prev[n])
            out[n] = null;
        else out[n] = (cur[n] - prev[n]) / dtSeconds;
    }
    return out;
}

export const SERIES = [
    { key: "added", label: "added/s", color: "#2b6cb0" },
    { key: "finished", label: "finished/s", color: "#2f855a" },
    { key: "redelivered", label: "redelivered/s", color: "#c05621" },
];

// A fixed-length history of rate samples, drawn as lines on a canvas.
export class ThroughputChart {
    constructor(canvas, maxPoints = 150) {
        this.canvas = canvas;
        this.maxPoints = maxPoints;
        this.points = []; // {t: ms, added, finished, redelivered}
    }

    push(t, r) {
        this.points.push({ t, ...r });
        if (this.points.length > this.maxPoints) this.points.shift();
        this.draw();
    }

    draw() {
        const c = this.canvas;
        const dpr = window.devicePixelRatio || 1;
        const w = c.clientWidth || 300;
        const h = c.clientHeight || 160;
        if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
            c.width = Math.round(w * dpr);
            c.height = Math.round(h * dpr);
        }
        const g = c.getContext("2d");
        g.setTransform(dpr, 0, 0, dpr, 0, 0);
        g.clearRect(0, 0, w, h);
        const padL = 44, padB = 18, padT = 8, padR = 8;
        let max = 1;
        for (const p of this.points) for (const s of SERIES) if (p[s.key] > max) max = p[s.key];
        max = niceCeil(max);
        g.font = "11px system-ui, sans-serif";
        g.fillStyle = "#666";
        g.strokeStyle = "#ddd";
        g.lineWidth = 1;
        for (let k = 0; k <= 4; k++) {
            const y = padT + ((h - padT - padB) * k) / 4;
            g.beginPath();
            g.moveTo(padL, y);
            g.lineTo(w - padR, y);
            g.stroke();
            g.fillText(fmtRate(max * (1 - k / 4)), 2, y + 4);
        }
        const n = this.points.length;
        if (n === 0) return;
        const t1 = this.points[n - 1].t;
        const t0 = Math.min(this.points[0].t, t1 - 1000);
        g.fillText(Math.round((t1 - t0) / 1000) + " s", padL, h - 4);
        g.fillText("now", w - padR - 22, h - 4);
        const x = (t) => padL + ((w - padL - padR) * (t - t0)) / (t1 - t0);
        const y = (v) => padT + (h - padT - padB) * (1 - v / max);
        for (const s of SERIES) {
            g.strokeStyle = s.color;
            g.lineWidth = 2;
            g.beginPath();
            let pen = false;
            for (const p of this.points) {
                const v = p[s.key];
                if (v === null || v === undefined) {
                    pen = false;
                    continue;
                }
                if (pen) g.lineTo(x(p.t), y(v));
                else g.moveTo(x(p.t), y(v));
                pen = true;
            }
            g.stroke();
        }
    }
}

function niceCeil(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
}

export function fmtRate(v) {
    if (v === null || v === undefined) return "–";
    if (v === 0) return "0";
    if (v >= 100) return String(Math.round(v));
    if (v >= 10) return v.toFixed(1);
    return v.toFixed(2);
}
