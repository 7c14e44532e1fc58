// The sweep view: summary, parallel coordinates (brushing filters the table), trials table, optimisation
// history, parameter importance, learning curves of selected trials, parameter-vs-metric scatter, events.
import {
  el, fill, badge, sweepBadge, printable, fmtNum, fmtTime, fmtDur, getJSON, apiUrl, sweepUrl, trialUrl, setCrumbs, showError,
  plotConfig, baseLayout, loadPlotly, describeColumn, isNum, metricAxis, logToggle, constantValue, agoEl, fmtCount,
  plotText, curveMarks, curvesAxis,
  STATES, STATE_COLOR, STATE_DASH,
} from "./util.js";
import { TrialsTable } from "./table.js";
import { CustomCharts } from "./charts.js";
import { ParCoords, niceTicks } from "./pcoords.js";
import { cardsFor } from "./cards.js";
import "./pareto.js";   // registers the Pareto and hypervolume cards of sweeps with several objectives

const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
  "#7f7f7f", "#ff7f0e"];
const END_SYMBOL = { pruned: "x", stopped_by_rule: "diamond", failed: "x-thin-open", stopped: "square",
  preempted: "triangle-down", interrupted: "triangle-down" };
const MAX_CURVES = 50;
// The strip under a metric plot where trials without a value (failed, pruned before reporting) are drawn.
const NO_VALUE_AXIS = { domain: [0, 0.09], type: "category", categoryarray: ["no value"], fixedrange: true,
  showgrid: false, zeroline: false, tickfont: { size: 10, color: "#6b7280" } };

function logTicks(lo, hi) {
  const a = Math.floor(Math.log10(lo)), b = Math.ceil(Math.log10(hi));
  const vals = [];
  for (let e = a; e <= b; e++) vals.push(e);
  if (vals.length < 3) {
    const l = Math.log10(lo), h = Math.log10(hi);
    return [0, 1, 2, 3, 4].map((k) => l + ((h - l) * k) / 4);
  }
  return vals;
}

// The trials the first screen's table shows before every trial's columns arrive (its first page).
const FIRST_PAGE = 50;
// At most this many lines in parallel coordinates (more are an unreadable mass and slow to draw).
export const PC_MAX_LINES = 1500;
// At most this many points in the history and parameter scatter plots (SVG: no WebGL needed).
export const PLOT_MAX_POINTS = 2000;
// Where a conditional parameter a trial does not have sits on its axis: a labelled slot below the range.
export const INACTIVE = "— inactive";

// The lines parallel coordinates draw when a sweep has more than `cap` trials: the best fifth of the cap
// by value (the region a reader studies), then an even sample of each state in proportion to its size (at
// least a few of each, so rare failures stay visible). Deterministic, so a refresh does not reshuffle.
export function sampleLines(rows, value, state, goal, cap) {
  if (rows.length <= cap) return rows;
  const sign = goal === "maximize" ? -1 : 1;
  const valued = rows.filter((i) => isNum(value[i])).sort((a, b) => sign * (value[a] - value[b]) || a - b);
  const keep = new Set(valued.slice(0, Math.floor(cap / 5)));
  const groups = new Map();
  for (const i of rows) {
    if (keep.has(i)) continue;
    if (!groups.has(state[i])) groups.set(state[i], []);
    groups.get(state[i]).push(i);
  }
  const rest = rows.length - keep.size, left = cap - keep.size;
  for (const g of groups.values()) {
    const quota = Math.min(g.length, Math.max(20, Math.round((left * g.length) / rest)));
    for (let k = 0; k < quota; k++) keep.add(g[Math.floor((k * g.length) / quota)]);
  }
  return rows.filter((i) => keep.has(i));
}

// A live page's trial list: the trials that changed since its last answer (`/trials?since=seq`, each with
// every column), merged into the columns it has by trial number (a new trial is appended), so a refresh
// reads and sends the trials that changed, not the whole sweep. A "full" answer replaces the columns.
const TRIAL_FIELDS = ["number", "state", "value", "started", "ended", "attempts", "reason", "feasible"];
export function mergeTrials(cols, delta) {
  if (delta.full || !cols) return delta;
  const out = { ...cols, sweep: delta.sweep, seq: delta.seq, version: delta.version };
  if (!delta.n) return out;
  const at = new Map(cols.number.map((num, i) => [num, i]));
  let n = cols.n;
  const rows = delta.number.map((num) => (at.has(num) ? at.get(num) : n++));
  const merged = (old, fresh) => {
    const col = old ? old.slice() : new Array(cols.n).fill(null);
    while (col.length < n) col.push(null);
    rows.forEach((i, k) => { col[i] = fresh ? fresh[k] : null; });
    return col;
  };
  for (const f of TRIAL_FIELDS) if (cols[f] || delta[f]) out[f] = merged(cols[f], delta[f]);
  for (const group of ["params", "metrics"]) {
    out[group] = {};
    for (const name of new Set([...Object.keys(cols[group]), ...Object.keys(delta[group])])) {
      out[group][name] = merged(cols[group][name], delta[group][name]);
    }
  }
  out.n = n;
  return out;
}

const r4 = (v) => fmtNum(Number(v.toPrecision(4)));

// A brushed range [a, b] of an axis in the reader's terms, for the table's "brushed:" note: the categories it
// covers, or its bounds in the parameter's or metric's own units (an axis draws log10 values on a log axis
// and each category's index on a categorical one), and whether it takes in the slot of the trials without a
// value (`slot`, named `slotName`). `open`: values beyond `hi` are pinned to it (so "≥").
export function brushText(name, [a, b], { cats, lo, hi, log, slot, slotName, open }) {
  let text = "";
  if (cats) {
    const picked = cats.filter((_, k) => k >= a && k <= b);
    if (picked.length) text = `${name} ∈ {${picked.join(", ")}}`;
  } else {
    const x = Math.max(a, lo), y = Math.min(b, hi);
    const real = (v) => r4(log ? 10 ** v : v);
    if (x <= y) text = open && y >= hi ? `${name} ≥ ${real(x)}` : `${name} ∈ [${real(x)}, ${real(y)}]`;
  }
  if (slot === undefined || slot < a || slot > b) return text || `${name} ∈ ∅`;
  return text ? `${text} or ${slotName}` : `${name} ${slotName}`;
}

// One parameter's parallel-coordinates axis: numeric (log-scaled when the spec or the spread says so) or
// categorical. Trials that lack the parameter (conditional spaces) sit on an "— inactive" slot below the
// range, never at 0 or at the bottom of the real values.
export function paramDimension(p, raw, desc) {
  const missing = raw.some((v) => v === null || v === undefined);
  if (desc.kind === "cat") {
    const idx = new Map(desc.cats.map((x, k) => [x, k]));
    const lo = missing ? -1 : 0;
    const values = raw.map((v) => (v === null || v === undefined ? lo : idx.get(String(v))));
    return { values, dim: { label: p, tickvals: [...(missing ? [-1] : []), ...desc.cats.map((_, k) => k)],
      ticktext: [...(missing ? [INACTIVE] : []), ...desc.cats], range: [lo, Math.max(lo + 1, desc.cats.length - 1)],
      brush: (r) => brushText(p, r, { cats: desc.cats, slot: missing ? -1 : undefined, slotName: "inactive" }) } };
  }
  const [lo, hi] = desc.log ? [Math.log10(desc.lo), Math.log10(desc.hi)] : desc.lo === desc.hi ? [desc.lo - 1, desc.hi + 1] : [desc.lo, desc.hi];
  const gap = missing ? (hi - lo) * 0.15 : 0;
  const values = raw.map((v) => (!isNum(v) || (desc.log && v <= 0) ? lo - gap : desc.log ? Math.log10(v) : v));
  let tickvals, ticktext;
  if (desc.log) {
    tickvals = logTicks(desc.lo, desc.hi).filter((t) => t >= lo - 1e-9 && t <= hi + 1e-9);   // none in the gap
    ticktext = tickvals.map((t) => fmtNum(Number((10 ** t).toPrecision(2))));
  } else if (desc.lo === desc.hi) {   // one value where present (a conditional constant): that tick only, no
    tickvals = [desc.lo];             // made-up neighbours (a momentum of -0.5 or 1.5 never ran)
    ticktext = [fmtNum(desc.lo)];
  } else if (missing) {
    tickvals = niceTicks(lo, hi);
    ticktext = tickvals.map((t) => fmtNum(t));
  }
  if (missing) { tickvals = [lo - gap, ...tickvals]; ticktext = [INACTIVE, ...ticktext]; }
  const dim = { label: desc.log ? `${p} (log)` : p, range: [lo - gap, hi],
    brush: (r) => brushText(p, r, { lo: desc.log ? Math.log10(desc.lo) : desc.lo, hi: desc.log ? Math.log10(desc.hi) : desc.hi,
      log: desc.log, slot: missing ? lo - gap : undefined, slotName: "inactive" }) };
  if (tickvals) Object.assign(dim, { tickvals, ticktext });
  return { values, dim };
}

// A plot narrower than this (a phone) gets its legend under the plot, where it cannot squeeze the data.
const NARROW = 560;
function narrow(plot) { return plot.clientWidth > 0 && plot.clientWidth < NARROW; }

// Legend and margins of a scatter card: a row above the plot, or on a phone a block under the x axis
// (the card is taller there, see app.css).
function legendLayout(plot) {
  return narrow(plot)
    ? { legend: { orientation: "h", x: 0, y: -0.22, yanchor: "top", font: { size: 10 } }, margin: { l: 55, r: 10, t: 10, b: 40 } }
    : { legend: { orientation: "h", y: 1.14, font: { size: 11 } }, margin: { l: 60, r: 15, t: 30, b: 45 } };
}

// Resolves after the browser has painted what is on screen now.
function nextFrame() {
  return new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
}

export class SweepView {
  constructor(root, r) {
    this.root = root;
    this.name = r.sweep;
    this.summary = null;
    this.cols = null;
    this.keys = [];
    this.curveKey = null;
    this.scatterParam = null;
    this.selection = [];
    this.userSelected = false;   // the curves drawn are the default ones (which follow a live sweep) until then
    this.lastEventId = 0;
    this.dimInfo = [];
    this.logY = { parcoords: false, history: false, scatter: false, curves: false };
    this.basis = "auto";
    this.constants = [];
    this.paramNames = [];
  }

  // Varying parameters become axes; constant ones (`{value: 30}`) are facts in the header.
  splitParams(cols) {
    this.constants = [];
    this.paramNames = [];
    for (const p of Object.keys(cols.params).sort()) {
      const c = cols.n > 1 ? constantValue(cols.params[p]) : { constant: false };
      if (c.constant) this.constants.push([p, c.value]); else this.paramNames.push(p);
    }
  }

  isLive() { return this.summary && this.summary.sweep.state === "running" && !this.summary.sweep.driver_gone; }

  async load() {
    setCrumbs([["sweeps", "/"], [this.name, null]]);
    document.title = `sweeplab · ${printable(this.name)}`;
    // Every trial's columns (the plots draw them all: a payload that grows with the sweep) load while the
    // first screen shows the header and the table's first page, two reads whose cost does not grow with it.
    const every = getJSON(apiUrl(this.name, "/trials"));
    every.catch(() => {});   // (awaited below; a failure is shown there)
    const [summary, first] = await Promise.all([
      getJSON(apiUrl(this.name)), getJSON(apiUrl(this.name, `/trials?limit=${FIRST_PAGE}`))]);
    this.summary = summary;
    this.skeleton();
    if (!first.full) {
      this.cols = first;
      this.constants = [];
      this.paramNames = Object.keys(first.params).sort();
      this.renderHeader();
      this.table.setData(first, this.paramNames, this.bestTrial());
      this.parcoords.replaceChildren(el("div", { class: "placeholder",
        text: `loading all ${fmtCount(first.total)} trials for the plots…` }));
      await nextFrame();
    }
    performance.mark("sweeplab:first");   // header and the table's first page painted
    document.body.dataset.first = "1";
    const cols = first.full ? first : await every;
    performance.mark("sweeplab:data");
    this.cols = cols;
    this.splitParams(cols);
    this.renderHeader();
    this.table.setData(cols, Object.keys(cols.params).sort(), this.bestTrial());
    const pending = [this.renderParcoords()];
    this.table.setSelection(this.defaultSelection(), false);
    // The cards below the fold (and Plotly.js, which only they need) wait for the first screen to be painted.
    await nextFrame();
    performance.mark("sweeplab:shown");
    document.body.dataset.shown = "1";
    try {
      await loadPlotly();
      performance.mark("sweeplab:plotly");
    } catch (e) {   // the first screen works without it; the charts say why they are missing
      for (const box of [this.history, this.scatter, this.curves, this.importance]) showError(box, e);
      return;
    }
    pending.push(this.renderHistory(), this.renderScatter(), this.loadKeys(), this.loadImportance(), this.loadEvents(),
      this.drawExtras());
    // Every picture drawn: a sentinel for tests and benchmarks/dashboard.py (time to fully drawn).
    Promise.allSettled(pending).then(() => {
      performance.mark("sweeplab:drawn");
      document.body.dataset.drawn = "1";
    });
  }

  async refresh() {
    // Only the trials changed since the last answer (its "seq"), merged into the columns the page has.
    const since = typeof this.cols.seq === "number" ? `?since=${this.cols.seq}` : "";
    const [summary, got] = await Promise.all([
      getJSON(apiUrl(this.name)), getJSON(apiUrl(this.name, `/trials${since}`))]);
    this.summary = summary;
    const changedTrials = got.full === false ? got.n > 0 : got.version !== this.cols.version;
    if (changedTrials) this.cols = mergeTrials(this.cols, got);
    else Object.assign(this.cols, { seq: got.seq, version: got.version });   // the same trials: caches stay
    const cols = this.cols;
    this.splitParams(cols);
    this.renderHeader();
    let curvesLoaded = false;
    if (changedTrials) {
      this.table.setData(cols, Object.keys(cols.params).sort(), this.bestTrial());
      // Until the user picks trials, the default curves follow the sweep: a trial that starts running or
      // becomes one of the best is drawn, one that is no longer either is not.
      const def = this.defaultSelection();
      if (!this.userSelected && (def.length !== this.selection.length || def.some((n, k) => n !== this.selection[k]))) {
        this.table.setSelection(def, false);   // (draws the curves)
        curvesLoaded = true;
      }
      this.renderParcoords();
      this.applyBrush();
      this.renderHistory();
      this.renderScatter();
      this.custom.render();
      this.drawExtras();
    }
    if (!curvesLoaded) this.loadCurves();   // a running trial's curve grows
    this.loadKeys();
    this.loadImportance();
    this.loadEvents();
  }

  skeleton() {
    this.header = el("div", { class: "section", id: "sweep-header" });
    this.parcoords = el("div", { class: "plot tall", id: "parcoords" });
    this.tableBox = el("div", { id: "trials-table" });
    this.history = el("div", { class: "plot", id: "history" });
    this.importance = el("div", { class: "plot", id: "importance" }, el("div", { class: "placeholder", text: "computing fANOVA importance…" }));
    this.importanceNote = el("div", { class: "legend-note", id: "importance-note" });
    this.basisSel = el("select", { id: "importance-basis", title: "which values the importance is computed from",
      onchange: () => { this.basis = this.basisSel.value; this.loadImportance(); } },
    el("option", { value: "auto", text: "basis: automatic" }),
    el("option", { value: "final", text: "completed trials, final value" }),
    el("option", { value: "rung", text: "all ended trials, at a common step" }));
    const tog = (k, redraw) => logToggle(`log-${k}`, (on) => { this.logY[k] = on; redraw(); });
    this.curves = el("div", { class: "plot tall", id: "curves" });
    this.scatter = el("div", { class: "plot", id: "scatter" });
    this.keySel = el("select", { id: "curve-key", onchange: () => { this.curveKey = this.keySel.value; this.loadCurves(); } });
    this.paramSel = el("select", { id: "scatter-param", onchange: () => { this.scatterParam = this.paramSel.value; this.renderScatter(); } });
    this.events = el("div", { class: "events", id: "events" });
    this.curveNote = el("span", { class: "legend-note" });
    this.historyNote = el("span", { class: "legend-note", id: "history-note" });
    this.scatterNote = el("span", { class: "legend-note", id: "scatter-note" });
    this.pcNote = el("div", { class: "legend-note", id: "parcoords-note" });
    this.root.replaceChildren(
      this.header,
      el("div", { class: "card" },
        el("h2", {}, "Parallel coordinates",
          el("span", { class: "legend-note", text: "drag along an axis to filter the trials table; click an axis to clear its range" }),
          el("span", { class: "tools" }, tog("parcoords", () => this.renderParcoords()),
            el("button", { type: "button", id: "clear-brush", onclick: () => this.clearBrush() }, "clear filters"))),
        this.pcNote, el("div", { class: "hscroll" }, this.parcoords)),
      el("div", { class: "card" }, el("h2", {}, "Trials"), this.tableBox),
      this.extras = el("div", { class: "grid2 section", id: "extra-cards", style: "display:none" }),
      el("div", { class: "grid2 section" },
        el("div", { class: "card" }, el("h2", {}, "Optimisation history", this.historyNote, el("span", { class: "tools" }, tog("history", () => this.renderHistory()))), this.history),
        el("div", { class: "card" }, el("h2", {}, "Parameter importance", el("span", { class: "legend-note", text: "fANOVA (Optuna)" }),
          el("span", { class: "tools" }, this.basisSel)), this.importanceNote, this.importance)),
      el("div", { class: "grid2 section" },
        el("div", { class: "card" }, el("h2", {}, "Learning curves", el("span", { class: "tools" }, this.curveNote, this.keySel, tog("curves", () => this.loadCurves()))), this.curves),
        el("div", { class: "card" }, el("h2", {}, "Parameter vs metric", this.scatterNote, el("span", { class: "tools" }, this.paramSel, tog("scatter", () => this.renderScatter()))), this.scatter)),
      el("div", { class: "card" }, el("h2", {}, "Custom charts"), this.customBox = el("div", { id: "custom" })),
      el("div", { class: "card" }, el("h2", {}, "Recent events"), this.events),
    );
    this.table = new TrialsTable(this.tableBox, {
      sweep: this.name, goal: this.summary.sweep.goal, objectives: this.summary.sweep.objectives || [],
      onSelectionChange: (nums, byUser) => {
        this.selection = nums;
        if (byUser) this.userSelected = true;
        this.loadCurves();
      },
    });
    this.custom = new CustomCharts(this.customBox, this);
  }

  // Registered extra cards (cards.js) that apply to this sweep: one card each, drawn with the others.
  drawExtras() {
    const cards = cardsFor(this);
    this.extras.style.display = cards.length ? "" : "none";
    const have = new Map([...this.extras.children].map((n) => [n.dataset.card, n]));
    return Promise.allSettled(cards.map((card) => {
      let box = have.get(card.id);
      if (!box) {
        box = el("div", { class: "card", dataset: { card: card.id } }, el("h2", { text: card.title }),
          el("div", { class: "plot", id: `card-${card.id}` }));
        this.extras.append(box);
      }
      const plot = box.querySelector(".plot");
      return Promise.resolve().then(() => card.draw(plot, this)).catch((e) => showError(plot, e));
    }));
  }

  renderHeader() {
    const s = this.summary.sweep;
    const b = s.budget || {}, sp = s.spend || {};
    const budget = [];
    if (b.trials) budget.push(`trials ${fmtCount(s.trials)}/${fmtCount(b.trials)}`);
    if (b.time) budget.push(`time ${fmtDur(sp.seconds)} of ${typeof b.time === "number" ? fmtDur(b.time) : b.time}`);
    if (b.gpu_hours) budget.push(`GPU ${fmtNum((sp.gpu_seconds || 0) / 3600)} of ${b.gpu_hours} h`);
    fill(this.header,
      el("h1", {}, this.name, sweepBadge(s)),
      el("div", { class: "meta" },
        el("span", {}, "method ", el("b", { text: s.method })),
        ...this.objectiveFacts(s),
        el("span", {}, "trials ", el("b", { text: fmtCount(s.trials) })),
        budget.length ? el("span", {}, "budget ", el("b", { text: budget.join(" · ") })) : null,
        s.backend ? el("span", {}, "backend ", el("b", { id: "sweep-backend", text: s.address ? `${s.backend} (${s.address})` : s.backend })) : null,
        el("span", { id: "sweep-created" }, "created ", el("b", {}, agoEl(s.created))),
        s.ended ? el("span", { id: "sweep-ended" }, "ended ", el("b", {}, agoEl(s.ended), s.end_reason ? ` (${s.end_reason})` : "")) : null),
      this.constants.length ? el("div", { class: "meta", id: "constants" }, el("span", {}, "fixed ",
        ...this.constants.map(([p, v], k) => el("b", { text: `${k ? ", " : ""}${p} = ${typeof v === "object" ? JSON.stringify(v) : fmtNum(v)}` })))) : null,
      el("div", { class: "counts" }, STATES.filter((k) => s.counts[k]).map((k) =>
        el("span", { class: `badge s-${k}` }, `${s.counts[k]} ${k.replaceAll("_", " ")}`))));
  }

  // Several objectives: the sweep's best is its feasible Pareto front (as `sweeplab best` prints it), not
  // the best of the first objective.
  several() { return (this.summary.sweep.objectives || []).length > 1 && !!this.cols.values; }

  bestTrial() { return this.several() ? null : this.summary.sweep.best_trial; }

  // The header's metric / best / constraints facts.
  objectiveFacts(s) {
    const cons = (s.constraints || []).map((k) => [k.min !== undefined && k.min !== null ? `${fmtNum(k.min)} ≤ ` : "", k.metric,
      k.max !== undefined && k.max !== null ? ` ≤ ${fmtNum(k.max)}` : ""].join(""));
    const consFact = cons.length ? el("span", { id: "sweep-constraints" }, "constraints ", el("b", { text: cons.join(", ") })) : null;
    if (!this.several()) {
      return [el("span", {}, "metric ", el("b", { text: s.metric ? `${s.metric} (${s.goal})` : "–" })),
        el("span", {}, "best ", s.best_trial === null ? el("b", { text: "–" }) :
          el("a", { href: trialUrl(this.name, s.best_trial), id: "best-link" }, el("b", { text: fmtNum(s.best) }), ` (trial ${s.best_trial})`)),
        consFact];
    }
    const c = this.cols;
    const front = [...Array(c.n).keys()].filter((i) => c.rank[i] === 1);
    // The best of each objective over the front (the same as over every completed feasible trial).
    const bests = s.objectives.map((o) => {
      const sign = o.goal === "maximize" ? -1 : 1;
      const i = front.filter((j) => isNum(c.values[o.name][j])).sort((a, b) => sign * (c.values[o.name][a] - c.values[o.name][b]) || c.number[a] - c.number[b])[0];
      return i === undefined ? null : el("span", { class: "obj-best" }, `${o.name} `,
        el("a", { href: trialUrl(this.name, c.number[i]) }, el("b", { text: fmtNum(c.values[o.name][i]) })), ` (trial ${c.number[i]})`);
    }).filter(Boolean);
    return [el("span", { id: "sweep-objectives" }, "objectives ", el("b", { text: s.objectives.map((o) => `${o.name} (${o.goal})`).join(", ") })),
      consFact,
      el("span", { id: "sweep-front" }, "Pareto front ", el("b", { text: `${fmtCount(front.length)} trial${front.length === 1 ? "" : "s"}` }),
        bests.length ? " · best " : "", ...bests.flatMap((b, k) => (k ? [", ", b] : [b])))];
  }

  specParam(p) {
    const params = (this.summary.spec && this.summary.spec.parameters) || {};
    return params[p] || null;
  }

  // ------------------------------------------------------------------ parallel coordinates + brushing
  renderParcoords() {
    const c = this.cols;
    // Every trial that has run, valued or not: failed and early-stopped trials are lines too.
    const rows = [];
    for (let i = 0; i < c.n; i++) if (c.state[i] !== "queued") rows.push(i);
    this.pcRows = rows;
    if (!rows.some((i) => isNum(c.value[i])) || !this.paramNames.length) {
      this.parcoords.replaceChildren(el("div", { class: "placeholder", text: "no trial has a value yet" }));
      this.parcoords.dataset.rendered = "empty";
      this.pcNote.textContent = "";
      return Promise.resolve();
    }
    // Thousands of lines are one grey mass and take seconds to draw: draw the best ones and an even
    // sample of each state, and say so. Brushing still filters every trial (dimInfo holds them all).
    const s = this.summary.sweep;
    const drawn = sampleLines(rows, c.value, c.state, s.goal, PC_MAX_LINES);
    const pick = drawn.length < rows.length ? (() => {
      const pos = new Map(rows.map((r, j) => [r, j]));
      const js = drawn.map((r) => pos.get(r));
      return (values) => js.map((j) => values[j]);
    })() : (values) => values;
    this.pcNote.textContent = drawn.length < rows.length
      ? `showing ${fmtCount(drawn.length)} of ${fmtCount(rows.length)} trials: the best ${fmtCount(Math.floor(PC_MAX_LINES / 5))} and an even sample of each state; filters apply to all`
      : "";
    this.parcoords.dataset.lines = String(drawn.length);
    this.dimInfo = [];
    const dims = [];
    const push = (dim, values) => {
      dims.push({ ...dim, values: pick(values) });
      this.dimInfo.push({ label: dim.label, values, brush: dim.brush });
    };
    for (const p of this.paramNames) {
      const raw = rows.map((i) => c.params[p][i]);
      const { dim, values } = paramDimension(p, raw, describeColumn(raw, this.specParam(p)));
      push(dim, values);
    }
    // The trial's state, so failed / pruned / stopped trials are told apart from completed ones.
    const states = STATES.filter((st) => rows.some((i) => c.state[i] === st));
    const sIdx = new Map(states.map((st, k) => [st, k]));
    const stateNames = states.map((st) => st.replaceAll("_", " "));
    push({ label: "state", tickvals: states.map((_, k) => k), ticktext: stateNames,
      range: [0, Math.max(1, states.length - 1)], brush: (r) => brushText("state", r, { cats: stateNames }) },
    rows.map((i) => sIdx.get(c.state[i])));
    // The metric on a robust range: diverged values are pinned to the top edge ("≥ …"), trials without a
    // value (failed, pruned before reporting) sit on a "no value" slot below the axis. With several
    // objectives, one such axis each (the lines are coloured by the first).
    const log = this.logY.parcoords;
    const metricDim = (name, column) => {
      const ax = metricAxis(rows.map((i) => column[i]), log);
      if (!ax.range) return null;
      const [lo, hi] = ax.range;
      const gap = (hi - lo) * 0.12;
      const pos = (v) => { const r = ax.clip(v); return r.y === null ? lo - gap : log ? Math.log10(r.y) : r.y; };
      const vals = rows.map((i) => pos(column[i]));
      const ticks = [0, 1, 2, 3, 4].map((k) => lo + ((hi - lo) * k) / 4);
      const tickText = ticks.map((t) => fmtNum(Number((log ? 10 ** t : t).toPrecision(3))));
      if (ax.clipped) tickText[4] = `≥ ${tickText[4]}`;
      push({ label: `${name}${log ? " (log)" : ""}`, range: [lo - gap, hi], tickvals: [lo - gap, ...ticks], ticktext: ["no value", ...tickText],
        brush: (r) => brushText(name, r, { lo, hi, log, slot: lo - gap, slotName: "no value", open: ax.clipped > 0 }) }, vals);
      return { lo, hi, gap, vals };
    };
    const objs = this.several() ? s.objectives : [];
    const first = objs.length ? objs.map((o) => metricDim(o.name, c.values[o.name]))[0] : metricDim(s.metric || "value", c.value);
    const { lo, hi, gap, vals } = first || metricDim(s.metric || "value", c.value);
    const V = ["#440154", "#3b528b", "#21918c", "#5ec962", "#fde725"];
    const viridis = (s.goal === "maximize" ? V : V.slice().reverse()).map((col, k) => [k / 4, col]);
    // Viridis over the metric, best values brightest; grey for "no value" (mapped to 0.05).
    const scale = [[0, "#c9ccd3"], [0.09, "#c9ccd3"], ...viridis.map(([f, col]) => [0.1 + 0.9 * f, col])];
    if (!this.pc) this.pc = new ParCoords(this.parcoords, { onBrush: () => this.applyBrush() });
    // Room for each axis's tick labels ("— inactive", "stopped by rule"): a narrow screen scrolls the
    // picture inside its card rather than overlapping the labels.
    this.parcoords.style.minWidth = `${130 + 88 * dims.length}px`;
    performance.mark("sweeplab:parcoords-start");
    this.pc.draw(dims, { color: pick(vals), scale, cmin: lo - gap - (hi - lo + gap) / 19, cmax: hi, valued: 0.1,
      bestHigh: s.goal === "maximize" });
    performance.mark("sweeplab:parcoords");
    return Promise.resolve();
  }

  // The brushed ranges, as [{k: dimension index, label, ranges: [[lo, hi]]}].
  constraints() {
    if (!this.pc) return [];
    return this.dimInfo.map((d, k) => ({ k, label: d.label, r: this.pc.ranges.get(d.label) }))
      .filter((x) => x.r).map(({ k, label, r }) => ({ k, label, ranges: [r] }));
  }

  applyBrush() {
    const cons = this.constraints();
    const box = this.paretoBrush;   // the Pareto card's rectangle (pareto.js): combines with the axes' ranges
    if (!cons.length && !box) { this.table.setBrush(null, ""); return; }
    if (!cons.length) { this.table.setBrush(box.rows, box.desc); return; }
    const allowed = new Set();
    this.pcRows.forEach((row, j) => {
      if (box && !box.rows.has(row)) return;
      for (const con of cons) {
        const v = this.dimInfo[con.k].values[j];
        if (!isNum(v) || !con.ranges.some(([a, b]) => v >= Math.min(a, b) && v <= Math.max(a, b))) return;
      }
      allowed.add(row);
    });
    const desc = cons.map((con) => con.ranges.map((r) => this.dimInfo[con.k].brush(r)).join(" or ")).join(", ");
    this.table.setBrush(allowed, box ? `${desc}, ${box.desc}` : desc);
  }

  // "clear filters": the axes' ranges and the Pareto card's rectangle.
  clearBrush() {
    const pareto = this.root.querySelector("#card-pareto");
    if (this.paretoBrush && pareto && pareto.data) Plotly.relayout(pareto, { selections: [] });
    this.paretoBrush = null;
    if (this.pc) this.pc.clear(); else this.applyBrush();
  }

  // ------------------------------------------------------------------ history and scatter
  // Points of one state for a metric axis: values inside the robust range as they are, values beyond it
  // pinned to the edge as triangles (hover tells the real value), trials with no value as a row of
  // crosses along the bottom edge, so failed trials are visible and never stretch the axis.
  stateTraces(ax, pick, xLabel) {
    const c = this.cols;
    const traces = [];
    const rows = this.pointRows();
    for (const st of STATES) {
      const xs = [], ys = [], ns = [], real = [], sym = [];
      for (const i of rows) {
        if (c.state[i] !== st) continue;
        const x = pick(i);
        if (x === null || x === undefined) continue;   // a conditional parameter this trial lacks: a gap
        const r = ax.clip(c.value[i]);
        if (r.y === null && (st === "running" || st === "queued")) continue;
        xs.push(x); ns.push(c.number[i]);
        ys.push(r.y);
        const infeasible = c.feasible && c.feasible[i] === false;   // breaks a constraint: a cross, said on hover
        real.push(isNum(c.value[i]) ? `${fmtNum(c.value[i])}${infeasible ? " (infeasible)" : ""}` : "no value");
        sym.push(r.y === null ? "x-thin-open" : r.out > 0 ? "triangle-up" : r.out < 0 ? "triangle-down" : infeasible ? "x" : "circle");
      }
      // SVG, at most PLOT_MAX_POINTS points (pointRows): measured faster in a browser without a GPU than
      // WebGL with every point (1.7 vs 2.2 s to draw the whole page of a 10,000-trial sweep).
      const type = "scatter";
      if (xs.length) traces.push({ type, mode: "markers", name: st.replaceAll("_", " "), x: xs, y: ys,
        customdata: ns.map((n, k) => [n, real[k]]), meta: { state: st },
        marker: { color: STATE_COLOR[st], size: 7, opacity: 0.8, symbol: sym, line: { width: 1.5, color: STATE_COLOR[st] } },
        cliponaxis: false,
        hovertemplate: `trial %{customdata[0]}<br>${plotText(xLabel)}=%{x}<br>%{customdata[1]}<extra>${st}</extra>` });
      // Trials without a value go on their own "no value" strip below the plot (never at the good end).
      const t = traces[traces.length - 1];
      if (t && t.meta.state === st && sym.includes("x-thin-open")) {
        const keep = sym.map((m) => m !== "x-thin-open");
        const nx = xs.filter((_, k) => !keep[k]), nn = t.customdata.filter((_, k) => !keep[k]);
        traces.push({ type, mode: "markers", name: `${st.replaceAll("_", " ")} (no value)`, x: nx, y: nx.map(() => "no value"),
          yaxis: "y2", customdata: nn, meta: { state: st, novalue: true }, showlegend: !keep.some(Boolean),
          legendgroup: st, marker: { color: STATE_COLOR[st], size: 7, symbol: "x-thin-open", line: { width: 1.5, color: STATE_COLOR[st] } },
          hovertemplate: `trial %{customdata[0]}<br>${plotText(xLabel)}=%{x}<br>no value<extra>${st}</extra>` });
        if (keep.some(Boolean)) {
          for (const k of ["x", "y", "customdata"]) t[k] = t[k].filter((_, j) => keep[j]);
          t.marker.symbol = sym.filter((_, j) => keep[j]);
          t.legendgroup = st;
        } else traces.splice(traces.length - 2, 1);
      }
    }
    return traces;
  }

  // The trials drawn as points: all of them up to PLOT_MAX_POINTS, else the best and an even sample of each
  // state (sampleLines), the same for both scatter plots; the cards say so.
  pointRows() {
    const c = this.cols;
    if (this.pointCache && this.pointCache.cols === c) return this.pointCache.rows;
    const all = [...Array(c.n).keys()];
    const rows = sampleLines(all, c.value, c.state, this.summary.sweep.goal, PLOT_MAX_POINTS);
    this.pointCache = { cols: c, rows };
    const note = rows.length < all.length ? `showing ${fmtCount(rows.length)} of ${fmtCount(all.length)} trials (the best and a sample of each state)` : "";
    this.sampleNote = note;
    return rows;
  }

  // What a scatter card leaves out or pins, in its heading (not the axis title: a phone has no room).
  cardNote(node, ax) {
    node.textContent = [this.sampleNote, this.axisNote(ax)].filter(Boolean).join(" · ");
  }

  axisNote(ax) {
    const parts = [];
    if (ax.clipped) parts.push(`${ax.clipped} outlying value${ax.clipped > 1 ? "s" : ""} pinned to the edge (▲▼)`);
    return parts.join("; ");
  }

  renderHistory() {
    const c = this.cols, s = this.summary.sweep;
    const better = s.goal === "maximize" ? (a, b) => a > b : (a, b) => a < b;
    const ax = metricAxis(c.value, this.logY.history);
    const traces = this.stateTraces(ax, (i) => c.number[i], "trial");
    this.cardNote(this.historyNote, ax);
    const bx = [], by = [];
    let best = null;
    const order = [...Array(c.n).keys()].sort((a, b) => c.number[a] - c.number[b]);
    for (const i of order) {
      if (c.state[i] !== "completed" || !isNum(c.value[i]) || (c.feasible && c.feasible[i] === false)) continue;   // never an infeasible best
      if (best === null || better(c.value[i], best)) best = c.value[i];
      bx.push(c.number[i]); by.push(ax.clip(best).y);
    }
    if (bx.length) {
      const last = order.length ? c.number[order[order.length - 1]] : bx[bx.length - 1];
      bx.push(last); by.push(by[by.length - 1]);
      traces.push({ type: "scatter", mode: "lines", name: "best so far", x: bx, y: by, line: { shape: "hv", color: "#111827", width: 2 } });
    }
    if (!traces.length || !ax.range) { this.history.replaceChildren(el("div", { class: "placeholder", text: "no values yet" })); return; }
    if (!this.history.data) this.history.replaceChildren();
    return Plotly.react(this.history, traces, baseLayout({
      xaxis: { title: { text: "trial" }, gridcolor: "#eef0f3", zeroline: false, anchor: "y2" },
      yaxis: { ...ax.axis, domain: [0.16, 1], title: { text: plotText(s.metric || "value"), font: { size: 11 } } },
      yaxis2: NO_VALUE_AXIS,
      ...legendLayout(this.history),
    }), plotConfig()).then(() => { performance.mark("sweeplab:history"); this.history.dataset.rendered = String(traces.length); });
  }

  renderScatter() {
    const c = this.cols, s = this.summary.sweep;
    if (!this.paramNames.length) return;
    if (!this.scatterParam || !this.paramNames.includes(this.scatterParam)) this.scatterParam = this.paramNames[0];
    this.paramSel.replaceChildren(...this.paramNames.map((p) => el("option", { value: p, text: p, selected: p === this.scatterParam })));
    const p = this.scatterParam;
    const desc = describeColumn(c.params[p], this.specParam(p));
    const ax = metricAxis(c.value, this.logY.scatter);
    const traces = this.stateTraces(ax, (i) => {
      const x = c.params[p][i];
      return x === null || x === undefined ? null : desc.kind === "cat" ? plotText(x) : x;   // a category reads as written
    }, p);
    this.cardNote(this.scatterNote, ax);
    if (!traces.length || !ax.range) { this.scatter.replaceChildren(el("div", { class: "placeholder", text: "no values yet" })); return; }
    if (!this.scatter.data) this.scatter.replaceChildren();
    return Plotly.react(this.scatter, traces, baseLayout({
      xaxis: { title: { text: plotText(p) }, type: desc.kind === "cat" ? "category" : desc.log ? "log" : "linear", gridcolor: "#eef0f3", exponentformat: "e", anchor: "y2" },
      yaxis: { ...ax.axis, domain: [0.16, 1], title: { text: plotText(s.metric || "value"), font: { size: 11 } } },
      yaxis2: NO_VALUE_AXIS,
      ...legendLayout(this.scatter),
    }), plotConfig()).then(() => { performance.mark("sweeplab:scatter"); this.scatter.dataset.rendered = p; });
  }

  // ------------------------------------------------------------------ curves
  defaultSelection() {
    const c = this.cols, s = this.summary.sweep;
    const sign = s.goal === "maximize" ? -1 : 1;
    const idx = [...Array(c.n).keys()];
    const ok = (i) => !(c.feasible && c.feasible[i] === false);   // the best curves are of feasible trials
    const pick = (state, k, byValue) => idx.filter((i) => c.state[i] === state && (!byValue || ok(i)))
      .sort((a, b) => (byValue ? sign * ((c.value[a] ?? Infinity) - (c.value[b] ?? Infinity)) : c.number[b] - c.number[a]))
      .slice(0, k).map((i) => c.number[i]);
    return [...pick("completed", 5, true), ...pick("running", 3, false), ...pick("pruned", 3, false),
      ...pick("stopped_by_rule", 2, false)];
  }

  async loadKeys() {
    try {
      const data = await getJSON(apiUrl(this.name, "/keys"));
      const keys = data.keys;
      const same = keys.length === this.keys.length && keys.every((k, i) => k === this.keys[i]);
      this.keys = keys;
      const newKey = this.curveKey === null || !keys.includes(this.curveKey);   // "" is a metric's name
      if (newKey) {
        const m = this.summary.sweep.metric;
        this.curveKey = keys.includes(m) ? m : keys.length ? keys[0] : null;
      }
      if (!same) {
        this.keySel.replaceChildren(...keys.map((k) => el("option", { value: k, text: k, selected: k === this.curveKey })));
        this.custom.fillPickers();
        this.custom.render();
      }
      if (newKey) await this.loadCurves();
    } catch (e) { /* the curves card shows its own error */ }
  }

  async loadCurves() {
    if (this.curveKey === null) {
      this.curves.replaceChildren(el("div", { class: "placeholder", text: "no metrics logged yet" }));
      return;
    }
    const nums = this.selection.slice(0, MAX_CURVES);
    this.curveNote.textContent = this.selection.length > MAX_CURVES ? `first ${MAX_CURVES} of ${this.selection.length}` : `${nums.length} trials`;
    if (!nums.length) {
      if (this.curves.data) Plotly.purge(this.curves);
      this.curves.replaceChildren(el("div", { class: "placeholder", text: "tick trials in the table to draw their curves" }));
      return;
    }
    const ticket = (this.curveTicket = (this.curveTicket || 0) + 1);
    let data;
    try {
      data = await getJSON(apiUrl(this.name, `/curves?${new URLSearchParams({ key: this.curveKey, trials: nums.join(","), max_points: 600 })}`));
    } catch (e) { showError(this.curves, e); return; }
    if (ticket !== this.curveTicket) return;  // a newer request superseded this one
    const traces = [];
    data.trials.forEach((t, k) => {
      if (!t.step.length) return;
      const color = PALETTE[k % PALETTE.length];
      const early = t.state !== "completed" && t.state !== "running";
      traces.push({
        type: "scatter", name: `#${t.number} ${t.state.replaceAll("_", " ")}`, x: t.step, y: t.values,
        ...curveMarks(t.values),   // a point with no neighbour (a curve of one point) is a marker, not nothing
        line: { color, dash: STATE_DASH[t.state] || "solid", width: early ? 1.6 : 2 }, opacity: early ? 0.85 : 1,
        legendgroup: String(t.number), hovertemplate: `trial ${t.number} (${t.state})<br>step %{x}<br>%{y}<extra></extra>`,
        meta: { state: t.state },
      });
      let j = t.values.length - 1;
      while (j > 0 && t.values[j] === null) j--;
      if (END_SYMBOL[t.state] && t.values[j] !== null) {   // (a curve of NaN only has no last value to mark, never a 0)
        traces.push({ type: "scatter", mode: "markers", x: [t.step[j]], y: [t.values[j]], showlegend: false,
          legendgroup: String(t.number), marker: { symbol: END_SYMBOL[t.state], size: 10, color, line: { width: 2, color } },
          hovertemplate: `trial ${t.number} ${t.state}${t.reason ? ": " + plotText(t.reason) : ""}<extra></extra>` });
      }
    });
    if (!this.curves.data) this.curves.replaceChildren();
    await Plotly.react(this.curves, traces, baseLayout({
      xaxis: { title: { text: "step" }, gridcolor: "#eef0f3", zeroline: false },
      yaxis: { ...curvesAxis(traces, this.logY.curves), title: { text: plotText(this.curveKey) } },
      ...(narrow(this.curves) ? legendLayout(this.curves) : { margin: { l: 60, r: 10, t: 10, b: 45 }, legend: { font: { size: 10 } } }),
    }), plotConfig()).then(() => { performance.mark("sweeplab:curves"); this.curves.dataset.rendered = String(traces.length); });
  }

  // ------------------------------------------------------------------ importance and events
  async loadImportance() {
    let data;
    const q = this.basis === "auto" ? "" : `?basis=${this.basis}`;
    try { data = await getJSON(apiUrl(this.name, `/importance${q}`)); } catch (e) { showError(this.importance, e); return; }
    // Say what the bars are computed from, always: which trials, at which step, how many of how many.
    const st = Object.entries(data.by_state || {}).map(([k, n]) => `${fmtCount(n)} ${k.replaceAll("_", " ")}`).join(", ");
    // With several objectives the bars are of the first one (the sweep's `value`): say so.
    const of = this.several() ? `for ${this.summary.sweep.objectives[0].name} (the first objective), ` : "";
    const basisText = of + (data.basis === "rung"
      ? `from ${fmtCount(data.trials_used)} of ${fmtCount(data.n_trials)} trials (${st}), each at step ${fmtCount(data.rung_step)}, the highest step at least half of them reached`
      : `from ${fmtCount(data.trials_used)} of ${fmtCount(data.n_trials)} trials: the completed ones' final values${st ? ` (${st})` : ""}`);
    const other = data.basis === "rung" ? data.bases.final : data.bases.rung;
    const alt = other ? ` · the other basis would use ${fmtCount(other)} trials` : "";
    fill(this.importanceNote,
      el("span", { id: "importance-basis-text", text: basisText + alt }),
      data.message ? el("div", { class: data.confidence === "low" ? "warn" : "", id: "importance-message", text: data.message }) : null,
      // the parameters without a bar, and why: a reader must not take a missing bar for an importance of 0
      (data.skipped || []).length ? el("div", { id: "importance-skipped",
        text: `not ranked: ${data.skipped.map((k) => `${k.param} (${k.why})`).join(", ")}` }) : null);
    this.importance.dataset.basis = data.basis;
    if (!data.importances.length) {
      if (this.importance.data) Plotly.purge(this.importance);
      this.importance.replaceChildren(el("div", { class: "placeholder", text: data.message || "not enough data" }));
      return;
    }
    const imp = data.importances.slice().reverse();
    const low = data.confidence === "low";
    const hasSpread = imp.some((d) => d.lo !== null && d.lo !== undefined);
    if (!this.importance.data) this.importance.replaceChildren();
    await Plotly.react(this.importance, [{
      type: "bar", orientation: "h", x: imp.map((d) => d.importance),
      y: imp.map((d) => `${plotText(d.param)}  ${(d.importance ?? 0).toFixed(2)}${hasSpread && d.lo !== null ? ` (${d.lo.toFixed(2)}–${d.hi.toFixed(2)})` : ""}`),
      marker: { color: low ? "#a5b4fc" : "#3b5bdb" },
      error_x: hasSpread ? { type: "data", symmetric: false, array: imp.map((d) => Math.max(0, (d.hi ?? d.importance) - d.importance)),
        arrayminus: imp.map((d) => Math.max(0, d.importance - (d.lo ?? d.importance))), color: "#111827", thickness: 1.5, width: 6 } : undefined,
      hovertemplate: "%{y}<extra></extra>",
    }], baseLayout({
      xaxis: { title: { text: hasSpread ? "importance · bootstrap 10–90 % bars" : "importance" }, range: [0, 1.05], gridcolor: "#eef0f3" },
      yaxis: { automargin: true }, margin: { l: 90, r: 15, t: 10, b: 45 },
    }), plotConfig()).then(() => { performance.mark("sweeplab:importance"); this.importance.dataset.rendered = String(imp.length); });
  }

  async loadEvents() {
    let evs;
    try {
      const q = this.lastEventId ? `after_id=${this.lastEventId}&limit=200` : "newest=1&limit=100";
      evs = (await getJSON(apiUrl(this.name, `/events?${q}`))).events;
    } catch (e) { return; }
    if (!evs.length) {
      if (!this.lastEventId) this.events.replaceChildren(el("p", { class: "muted", text: "no events" }));
      return;
    }
    if (!this.lastEventId) this.events.replaceChildren();
    this.lastEventId = evs[evs.length - 1].id;
    const nodes = evs.reverse().map((e) => el("div", { class: "ev" },
      el("span", { class: "muted", text: fmtTime(e.time) }),
      el("span", {}, el("span", { class: `kind k-${e.kind}`, text: e.kind })),
      el("span", {}, e.trial === null ? "" : el("a", { href: trialUrl(this.name, e.trial), text: `#${e.trial}` })),
      el("span", { text: e.message || "" })));
    this.events.prepend(...nodes);
    while (this.events.childElementCount > 300) this.events.lastElementChild.remove();
  }
}
