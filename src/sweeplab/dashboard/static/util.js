// Small helpers shared by the views: DOM building, formatting, API access, state styling.

export const STATES = ["completed", "running", "queued", "pruned", "stopped_by_rule", "failed",
  "preempted", "interrupted", "stopped"];

export const STATE_COLOR = {
  completed: "#2a9d8f", running: "#3b82f6", queued: "#9ca3af", failed: "#e63946", pruned: "#f08c00",
  stopped_by_rule: "#9b5de5", preempted: "#64748b", interrupted: "#64748b", stopped: "#495057",
};

// How a learning curve is drawn, so that early-stopped trials are visibly different.
export const STATE_DASH = {
  completed: "solid", running: "solid", queued: "solid", pruned: "dash", stopped_by_rule: "dot",
  failed: "longdash", preempted: "dashdot", interrupted: "dashdot", stopped: "dashdot",
};

// Control characters written as escapes ("\x1b", "\u202e"), as the command line prints them (the same
// characters as cli/output.py's `printable`; a test holds the two lists equal): C0 but tab and line feed, DEL,
// C1, and the bidirectional controls (marks, embeddings, overrides, isolates). What the store holds is the
// user's text: a sweep, parameter or metric named with U+202E (right-to-left override) would otherwise show
// the rest of its name, and of the line, backwards ("report\u202efdp.exe" read as "reportexe.pdf").
const CONTROL = /[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

export function printable(text) {
  return String(text).replace(CONTROL, (ch) => {
    const c = ch.charCodeAt(0);
    return c < 0x100 ? `\\x${c.toString(16).padStart(2, "0")}` : `\\u${c.toString(16).padStart(4, "0")}`;
  });
}

// A DOM element. Its text (`text`, string children) and tooltip (`title`) are shown `printable`; other
// attributes (a link, an option's value) keep the text as it is.
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = printable(v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k === "title") node.setAttribute(k, printable(v));
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(printable(c)));
  }
  return node;
}

// node.replaceChildren(...) that, like el(), skips null/undefined/false children (replaceChildren would
// turn them into the text "null").
export function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

export function badge(state) {
  return el("span", { class: `badge s-${state}`, text: state.replaceAll("_", " ") });
}

// A sweep's state: a `running` sweep whose driver is known to be gone (killed with kill -9, its machine
// rebooted) says so, as `sweeplab status` does: nothing runs, its running trials wait for `sweeplab resume`.
export function sweepBadge(s) {
  return s.driver_gone ? goneBadge(s.state) : badge(s.state);
}

// The badge of a sweep, or of one of its running or queued trials, whose driver is gone.
export function goneBadge(state) {
  return el("span", { class: "badge s-failed driver-gone", title: "the sweep's driver process is gone: nothing runs; "
    + "its running trials stay running until `sweeplab resume` continues the sweep", text: `${state.replaceAll("_", " ")} (driver gone)` });
}

export function fmtNum(v) {
  if (v === null || v === undefined || v === "") return "–";
  if (typeof v !== "number") return printable(v);
  if (Object.is(v, -0)) return "-0";   // String(-0) is "0": a stored -0.0 shows its sign, as the CLI's does
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(3).replace(/\.?0+e/, "e");
  return String(Number(v.toPrecision(5)));
}

// A count with thousands separators: "10,000 trials".
export function fmtCount(n) {
  return isNum(n) ? Math.round(n).toLocaleString("en-US") : "–";
}

export function fmtTime(t) {
  if (!t) return "–";
  const d = new Date(t * 1000);
  const pad = (x) => String(x).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// A duration at its scale, two units at most, never a zero second unit: "12.3 ms", "4.2 s", "3 min 5 s",
// "30 min", "2 h 5 min", "3.5 d".
export function fmtDur(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "–";
  const s = Math.max(0, seconds);
  if (s > 0 && s < 1) return `${Number((s * 1000).toPrecision(3))} ms`;
  if (s < 59.5) return `${Number(s.toFixed(s < 10 ? 1 : 0))} s`;
  const two = (big, bigUnit, small, smallUnit) => (small ? `${big} ${bigUnit} ${small} ${smallUnit}` : `${big} ${bigUnit}`);
  if (s < 3600 - 30) { const r = Math.round(s); return two(Math.floor(r / 60), "min", r % 60, "s"); }
  if (s < 86400 - 1800) { const m = Math.round(s / 60); return two(Math.floor(m / 60), "h", m % 60, "min"); }
  return `${Number((s / 86400).toFixed(1))} d`;
}

export function fmtBytes(b) {
  if (b === null || b === undefined) return "–";
  const u = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return `${b.toFixed(i ? 1 : 0)} ${u[i]}`;
}

export function sweepUrl(name) { return `/sweeps/${encodeURIComponent(name)}`; }
export function trialUrl(name, n) { return `${sweepUrl(name)}/trials/${n}`; }
export function apiUrl(name, rest = "") { return `/api/sweeps/${encodeURIComponent(name)}${rest}`; }

export class ApiError extends Error {}

export async function getJSON(url) {
  let resp;
  try {
    resp = await fetch(url, { headers: { accept: "application/json" }, credentials: "same-origin" });
  } catch (e) {
    throw new ApiError(`cannot reach the dashboard server (${e.message})`);
  }
  let body = null;
  try { body = await resp.json(); } catch (e) { /* not JSON */ }
  if (!resp.ok) throw new ApiError((body && body.error) || `${resp.status} ${resp.statusText}`);
  return body;
}

let plotlyLoading = null;

// Plotly.js (3.5 MB, 1.5 MB gzipped) is loaded on first use, not by index.html: the sweeps list never needs
// it, and the first screen of a sweep (header, parallel coordinates, table) is drawn before the browser
// has fetched or parsed it (a preload competed with the sweep's data on a cold visit).
export function loadPlotly() {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  if (!plotlyLoading) {
    plotlyLoading = new Promise((resolve, reject) => {
      const s = document.createElement("script");
      s.src = "/static/plotly.min.js";
      s.onload = () => resolve(window.Plotly);
      s.onerror = () => { plotlyLoading = null; reject(new ApiError("cannot load the charting library (/static/plotly.min.js)")); };
      document.head.append(s);
    });
  }
  return plotlyLoading;
}

export function showError(container, err) {
  container.replaceChildren(el("div", { class: "error", text: String(err.message || err) }));
}

export function plotConfig() {
  return { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
}

export function baseLayout(extra = {}) {
  return {
    margin: { l: 55, r: 15, t: 10, b: 40 },
    font: { family: "system-ui, sans-serif", size: 12, color: "#1f2430" },
    paper_bgcolor: "#fff", plot_bgcolor: "#fff", hovermode: "closest",
    xaxis: { gridcolor: "#eef0f3", zeroline: false }, yaxis: { gridcolor: "#eef0f3", zeroline: false },
    legend: { font: { size: 11 } },
    ...extra,
  };
}

// Text from the store (a parameter's or metric's name, a categorical value, an error) for a Plotly string:
// Plotly reads a subset of HTML in titles, tick labels, legends and hover labels (`<b>`, `<br>`, `<a href>`)
// and %{...} placeholders in hover templates. Escaped as character references (which Plotly decodes when it
// draws), it is shown exactly as written: `<b>lr</b>` is those nine characters, never a bold "lr" or a link.
export function plotText(v) {
  return printable(v).replace(/[&<>{}]/g, (ch) => `&#${ch.charCodeAt(0)};`);
}

// Mode and markers of a learning curve (`values`, null for a NaN point): a short curve gets a marker at every
// point; on a long one, a point with no neighbour to draw a line to (a curve of one point, a value between
// two NaN gaps) still gets its marker, which a line alone never draws.
export function curveMarks(values, size = 4) {
  if (values.length < 60) return { mode: "lines+markers", marker: { size } };
  const lone = values.map((v, k) => v !== null && (k === 0 || values[k - 1] === null)
    && (k === values.length - 1 || values[k + 1] === null));
  if (!lone.some(Boolean)) return { mode: "lines", marker: { size } };
  return { mode: "lines+markers", marker: { size: lone.map((x) => (x ? size + 1 : 0)) } };
}

export function isNum(v) { return typeof v === "number" && isFinite(v); }

// A parameter column: numeric (maybe log-scaled) or categorical.
export function describeColumn(values, specParam) {
  const present = values.filter((v) => v !== null && v !== undefined);
  const numeric = present.length > 0 && present.every((v) => typeof v === "number");
  if (!numeric) {
    const cats = [...new Set(present.map(String))].sort();
    return { kind: "cat", cats };
  }
  const lo = Math.min(...present), hi = Math.max(...present);
  // A parameter the spec does not list at its top level (a conditional one nested under a choice, or no
  // spec at all) has no distribution to go by: only the spread decides.
  const dist = specParam ? String(specParam.distribution || "") : "";
  const log = lo > 0 && (dist.includes("log") || hi / lo >= 1000);
  return { kind: "num", log, lo, hi };
}

export function setCrumbs(parts) {
  const nav = document.getElementById("crumbs");
  const nodes = [];
  parts.forEach(([label, href], i) => {
    if (i) nodes.push(el("span", { class: "sep", text: "/" }));
    nodes.push(href ? el("a", { href, text: label }) : el("span", { text: label }));
  });
  nav.replaceChildren(...nodes);
}

// An axis range that keeps the bulk of `values` readable when a few diverged trials report values
// orders of magnitude away (6.4e12 next to 0.3): the median ± 8 median absolute deviations (about ±5.4
// standard deviations for normal data, so ordinary spreads are never cut), never beyond the data. It works
// with as few as three values, where percentiles cannot tell an outlier from the bulk. Points outside are
// drawn pinned to the edge by the callers; hovering and zooming still show them.
export function focusRange(values) {
  const v = values.filter(isNum).sort((a, b) => a - b);
  if (v.length < 3) return undefined;
  const med = (xs) => (xs.length % 2 ? xs[(xs.length - 1) / 2] : (xs[xs.length / 2 - 1] + xs[xs.length / 2]) / 2);
  const m = med(v);
  const mad = med(v.map((x) => Math.abs(x - m)).sort((a, b) => a - b));
  const half = 8 * (mad || Math.abs(m) * 0.5 || 1);
  const r = [Math.max(v[0], m - half), Math.min(v[v.length - 1], m + half)];
  if (r[0] === v[0] && r[1] === v[v.length - 1]) return undefined;   // nothing far out: autorange
  const pad = (r[1] - r[0]) * 0.05 || Math.abs(m) * 0.05 || 1;
  return [r[0] - pad, r[1] + pad];
}

// A <time> showing "3 min ago", the absolute time in its tooltip; app.js keeps the text current.
export function agoEl(t, attrs = {}) {
  if (!t) return el("span", { ...attrs, text: "–" });
  return el("time", { ...attrs, class: `ago ${attrs.class || ""}`.trim(), datetime: new Date(t * 1000).toISOString(),
    title: fmtTime(t), dataset: { t: String(t) }, text: fmtAgo(t) });
}

// Re-render every relative time on the page (they age while the page stays open).
export function refreshAgo(root = document) {
  for (const node of root.querySelectorAll("time.ago[data-t]")) node.textContent = fmtAgo(Number(node.dataset.t));
}

// "3 min ago" / "in 2 h": a time relative to now, for a reader scanning a list.
export function fmtAgo(t, now = Date.now() / 1000) {
  if (!t) return "–";
  const d = now - t, a = Math.abs(d);
  if (a < 5) return "just now";
  const unit = a < 59.5 ? [Math.round(a), "s"] : a < 3570 ? [Math.round(a / 60), "min"] :
    a < 84600 ? [Math.round(a / 3600), "h"] : [Math.round(a / 86400), "d"];
  return d >= 0 ? `${unit[0]} ${unit[1]} ago` : `in ${unit[0]} ${unit[1]}`;
}

// A parameter whose every present value is the same (a `{value: 30}` in the spec): a fact, not an axis.
export function constantValue(values) {
  const present = values.filter((v) => v !== null && v !== undefined);
  if (!present.length) return { constant: false };
  const first = JSON.stringify(present[0]);
  if (present.every((v) => JSON.stringify(v) === first) && present.length === values.length) {
    return { constant: true, value: present[0] };
  }
  return { constant: false };
}

// How to show a metric on an axis without a few diverged trials flattening the rest: the robust range of
// `values` (focusRange; log10 space when `log`), a function mapping a value to its drawn position (values
// outside are pinned to the edge), and Plotly axis settings whose tick labels read ("6.4e+12", never SI
// "T" suffixes).
export function metricAxis(values, log = false) {
  const good = values.filter((v) => isNum(v) && (!log || v > 0));
  const space = log ? good.map((v) => Math.log10(v)) : good;
  let range = focusRange(space);
  if (!range && space.length) {
    const lo = Math.min(...space), hi = Math.max(...space);
    const pad = Math.max((hi - lo) * 0.08, Math.abs(hi) * 0.05, 1e-9);
    range = [lo - pad, hi + pad];
  }
  const clip = (v) => {
    if (!isNum(v) || (log && v <= 0) || !range) return { y: null, out: 0 };
    const s = log ? Math.log10(v) : v;
    if (s > range[1]) return { y: log ? 10 ** range[1] : range[1], out: 1 };
    if (s < range[0]) return { y: log ? 10 ** range[0] : range[0], out: -1 };
    return { y: v, out: 0 };
  };
  // A curve's point far outside a narrow focused range (2.0 beside values 1e-300 apart) would be drawn
  // 1e301 px away, which SVG cannot hold (float32: "attribute transform: Trailing garbage"): it is drawn at a
  // thousand ranges off instead, still off the plot, in its direction.
  const reach = (v) => {
    if (!isNum(v) || !range || (log && v <= 0)) return v;
    const span = range[1] - range[0], lo = range[0] - 1e3 * span, hi = range[1] + 1e3 * span;
    const s = log ? Math.log10(v) : v;
    if (s > hi) return log ? 10 ** hi : hi;
    if (s < lo) return log ? 10 ** lo : lo;
    return v;
  };
  const axis = { type: log ? "log" : "linear", exponentformat: "e", gridcolor: "#eef0f3", zeroline: false };
  if (range) axis.range = range;
  const clipped = good.filter((v) => clip(v).out !== 0).length;
  return { range, clip, reach, axis, clipped, logOk: values.some((v) => isNum(v) && v > 0) };
}

// Curves on a metric axis: the axis, with every trace's points kept within SVG's reach (`reach` above).
export function curvesAxis(traces, log = false) {
  const ax = metricAxis(traces.flatMap((t) => t.y), log);
  for (const t of traces) t.y = t.y.map(ax.reach);
  return ax.axis;
}

// A small "log y" toggle button for a card's tools; `onChange(isLog)` redraws.
export function logToggle(id, onChange) {
  const b = el("button", { type: "button", id, class: "toggle", "aria-pressed": "false", title: "logarithmic metric axis" }, "log y");
  b.addEventListener("click", () => {
    const on = b.getAttribute("aria-pressed") !== "true";
    b.setAttribute("aria-pressed", String(on));
    onChange(on);
  });
  return b;
}

const PROFILE_LABELS = {
  steps: ["steps", "count"], samples_per_s: ["samples/s", "rate"], samples_per_second: ["samples/s", "rate"],
  steps_per_s: ["steps/s", "rate"], data_wait_fraction: ["data-wait share", "pct"],
  step_p50: ["step p50", "dur"], step_p95: ["step p95", "dur"], step_time_mean: ["step mean", "dur"],
  data_wait_p50: ["data wait p50", "dur"], compute_p50: ["compute p50", "dur"],
  cpu_mean: ["CPU (mean)", "cpu"], cpu_peak: ["CPU (peak)", "cpu"], rss_peak: ["peak RSS", "bytes"],
  peak_rss_mb: ["peak RSS", "mb"], gpu_util_mean: ["GPU util (mean)", "cpu"], gpu_mem_peak: ["peak GPU memory", "bytes"],
};

// Profile entries as [label, formatted value]: known keys get words and units, unknown ones a readable
// label from their key (never a raw byte count beside a formatted one).
export function profileRows(prof) {
  const out = [];
  for (const [k, v] of Object.entries(prof || {})) {
    if (v === null || v === undefined || k === "hint") continue;
    const [label, kind] = PROFILE_LABELS[k] || [k.replaceAll("_", " "),
      /bytes|rss|mem/.test(k) ? "bytes" : /fraction|share/.test(k) ? "pct" : /seconds|_s$|time/.test(k) ? "dur" : "num"];
    let text;
    if (typeof v !== "number") text = typeof v === "object" ? JSON.stringify(v) : String(v);
    else if (kind === "bytes") text = fmtBytes(v);
    else if (kind === "mb") text = fmtBytes(v * 1024 * 1024);
    else if (kind === "pct") text = `${fmtNum(Number((v * 100).toPrecision(3)))} %`;
    else if (kind === "cpu") text = `${fmtNum(Number(v.toPrecision(3)))} %`;
    else if (kind === "dur") text = fmtDur(v);
    else if (kind === "rate") text = `${fmtNum(Number(v.toPrecision(4)))}/s`;
    else text = fmtNum(v);
    out.push([label, text]);
  }
  return out;
}
