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

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
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

export function fmtNum(v) {
  if (v === null || v === undefined || v === "") return "–";
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(3).replace(/\.?0+e/, "e");
  return String(Number(v.toPrecision(5)));
}

export function fmtTime(t) {
  if (!t) return "–";
  const d = new Date(t * 1000);
  const pad = (x) => String(x).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function fmtDur(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "–";
  const s = Math.max(0, seconds);
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${Math.round(s % 60)}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.round((s % 3600) / 60)}m`;
  return `${(s / 86400).toFixed(1)}d`;
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
  const dist = specParam && String(specParam.distribution || "");
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
// orders of magnitude away (1e12 next to 0.3): the 10th–90th percentile span, widened by that span on each
// side and never beyond the data. Points outside it are drawn off-axis; hovering and zooming still work.
export function focusRange(values) {
  const v = values.filter(isNum).sort((a, b) => a - b);
  if (v.length < 4) return undefined;
  const q = (p) => v[Math.min(v.length - 1, Math.max(0, Math.round(p * (v.length - 1))))];
  const lo = q(0.1), hi = q(0.9), span = hi - lo || Math.abs(hi) * 0.1 || 1;
  const r = [Math.max(v[0], lo - span), Math.min(v[v.length - 1], hi + span)];
  if (r[0] === v[0] && r[1] === v[v.length - 1]) return undefined;   // nothing far out: autorange
  const pad = (r[1] - r[0]) * 0.05 || 1;
  return [r[0] - pad, r[1] + pad];
}
