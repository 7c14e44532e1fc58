// The sweep view: summary, parallel coordinates (brushing filters the table), trials table, optimisation
// history, parameter importance, learning curves of selected trials, parameter-vs-metric scatter, events.
import {
  el, badge, fmtNum, fmtTime, fmtDur, getJSON, apiUrl, sweepUrl, trialUrl, setCrumbs, showError,
  plotConfig, baseLayout, describeColumn, isNum, focusRange, STATES, STATE_COLOR, STATE_DASH,
} from "./util.js";
import { TrialsTable } from "./table.js";

const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
  "#7f7f7f", "#ff7f0e"];
const END_SYMBOL = { pruned: "x", stopped_by_rule: "diamond", failed: "x-thin-open", stopped: "square",
  preempted: "triangle-down", interrupted: "triangle-down" };
const MAX_CURVES = 50;

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
    this.lastEventId = 0;
    this.dimInfo = [];
  }

  isLive() { return this.summary && this.summary.sweep.state === "running"; }

  async load() {
    setCrumbs([["sweeps", "/"], [this.name, null]]);
    document.title = `sweeplab · ${this.name}`;
    const [summary, cols] = await Promise.all([
      getJSON(apiUrl(this.name)), getJSON(apiUrl(this.name, "/trials"))]);
    this.summary = summary;
    this.cols = cols;
    this.skeleton();
    this.renderHeader();
    this.paramNames = Object.keys(cols.params).sort();
    this.table.setData(cols, this.paramNames, summary.sweep.best_trial);
    this.renderParcoords();
    this.renderHistory();
    this.renderScatter();
    this.table.setSelection(this.defaultSelection());
    this.loadKeys();
    this.loadImportance();
    this.loadEvents();
  }

  async refresh() {
    const [summary, cols] = await Promise.all([
      getJSON(apiUrl(this.name)), getJSON(apiUrl(this.name, "/trials"))]);
    this.summary = summary;
    const changedTrials = cols.version !== this.cols.version;
    this.cols = cols;
    this.renderHeader();
    if (changedTrials) {
      this.paramNames = Object.keys(cols.params).sort();
      this.table.setData(cols, this.paramNames, summary.sweep.best_trial);
      this.renderParcoords();
      this.applyBrush();
      this.renderHistory();
      this.renderScatter();
    }
    this.loadCurves();
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
    this.curves = el("div", { class: "plot tall", id: "curves" });
    this.scatter = el("div", { class: "plot", id: "scatter" });
    this.keySel = el("select", { id: "curve-key", onchange: () => { this.curveKey = this.keySel.value; this.loadCurves(); } });
    this.paramSel = el("select", { id: "scatter-param", onchange: () => { this.scatterParam = this.paramSel.value; this.renderScatter(); } });
    this.events = el("div", { class: "events", id: "events" });
    this.curveNote = el("span", { class: "legend-note" });
    this.root.replaceChildren(
      this.header,
      el("div", { class: "card" },
        el("h2", {}, "Parallel coordinates",
          el("span", { class: "legend-note", text: "drag along an axis to filter the trials table; click an axis outside its range to clear" }),
          el("span", { class: "tools" }, el("button", { type: "button", id: "clear-brush", onclick: () => this.clearBrush() }, "clear filters"))),
        this.parcoords),
      el("div", { class: "card" }, el("h2", {}, "Trials"), this.tableBox),
      el("div", { class: "grid2 section" },
        el("div", { class: "card" }, el("h2", {}, "Optimisation history"), this.history),
        el("div", { class: "card" }, el("h2", {}, "Parameter importance", el("span", { class: "legend-note", text: "fANOVA (Optuna)" })), this.importance)),
      el("div", { class: "grid2 section" },
        el("div", { class: "card" }, el("h2", {}, "Learning curves", el("span", { class: "tools" }, this.curveNote, this.keySel)), this.curves),
        el("div", { class: "card" }, el("h2", {}, "Parameter vs metric", el("span", { class: "tools" }, this.paramSel)), this.scatter)),
      el("div", { class: "card" }, el("h2", {}, "Recent events"), this.events),
    );
    this.table = new TrialsTable(this.tableBox, {
      sweep: this.name, goal: this.summary.sweep.goal,
      onSelectionChange: (nums) => { this.selection = nums; this.loadCurves(); },
    });
  }

  renderHeader() {
    const s = this.summary.sweep;
    const b = s.budget || {}, sp = s.spend || {};
    const budget = [];
    if (b.trials) budget.push(`trials ${s.trials}/${b.trials}`);
    if (b.time) budget.push(`time ${fmtDur(sp.seconds)} of ${b.time}`);
    if (b.gpu_hours) budget.push(`GPU ${fmtNum((sp.gpu_seconds || 0) / 3600)} of ${b.gpu_hours} h`);
    this.header.replaceChildren(
      el("h1", {}, this.name, badge(s.state)),
      el("div", { class: "meta" },
        el("span", {}, "method ", el("b", { text: s.method })),
        el("span", {}, "metric ", el("b", { text: s.metric ? `${s.metric} (${s.goal})` : "–" })),
        el("span", {}, "best ", s.best_trial === null ? el("b", { text: "–" }) :
          el("a", { href: trialUrl(this.name, s.best_trial), id: "best-link" }, el("b", { text: fmtNum(s.best) }), ` (trial ${s.best_trial})`)),
        el("span", {}, "trials ", el("b", { text: String(s.trials) })),
        budget.length ? el("span", {}, "budget ", el("b", { text: budget.join(" · ") })) : null,
        el("span", {}, "created ", el("b", { text: fmtTime(s.created) })),
        s.ended ? el("span", {}, "ended ", el("b", { text: `${fmtTime(s.ended)}${s.end_reason ? ` (${s.end_reason})` : ""}` })) : null),
      el("div", { class: "counts" }, STATES.filter((k) => s.counts[k]).map((k) =>
        el("span", { class: `badge s-${k}` }, `${s.counts[k]} ${k.replaceAll("_", " ")}`))));
  }

  specParam(p) {
    const params = (this.summary.spec && this.summary.spec.parameters) || {};
    return params[p] || null;
  }

  // ------------------------------------------------------------------ parallel coordinates + brushing
  renderParcoords() {
    const c = this.cols;
    const rows = [];
    for (let i = 0; i < c.n; i++) if (isNum(c.value[i])) rows.push(i);
    this.pcRows = rows;
    if (rows.length < 1 || !this.paramNames.length) {
      this.parcoords.replaceChildren(el("div", { class: "placeholder", text: "no trial has a value yet" }));
      this.parcoords.dataset.rendered = "empty";
      return;
    }
    const old = new Map();
    if (this.parcoords.data && this.parcoords.data[0]) {
      for (const d of this.parcoords.data[0].dimensions) if (d.constraintrange) old.set(d.label, d.constraintrange);
    }
    this.dimInfo = [];
    const dims = [];
    for (const p of this.paramNames) {
      const raw = rows.map((i) => c.params[p][i]);
      const desc = describeColumn(raw, this.specParam(p));
      let values, dim;
      if (desc.kind === "cat") {
        const idx = new Map(desc.cats.map((x, k) => [x, k]));
        values = raw.map((v) => (v === null || v === undefined ? NaN : idx.get(String(v))));
        dim = { label: p, values, tickvals: desc.cats.map((_, k) => k), ticktext: desc.cats,
          range: [0, Math.max(1, desc.cats.length - 1)] };
      } else if (desc.log) {
        values = raw.map((v) => (isNum(v) && v > 0 ? Math.log10(v) : NaN));
        const tv = logTicks(desc.lo, desc.hi);
        dim = { label: `${p} (log)`, values, tickvals: tv, ticktext: tv.map((t) => fmtNum(Number((10 ** t).toPrecision(2)))),
          range: [Math.log10(desc.lo), Math.log10(desc.hi)] };
      } else {
        values = raw.map((v) => (isNum(v) ? v : NaN));
        dim = { label: p, values, range: desc.lo === desc.hi ? [desc.lo - 1, desc.hi + 1] : [desc.lo, desc.hi] };
      }
      if (old.has(dim.label)) dim.constraintrange = old.get(dim.label);
      dims.push(dim);
      this.dimInfo.push({ label: dim.label, values });
    }
    const s = this.summary.sweep;
    const vals = rows.map((i) => c.value[i]);
    const mlabel = s.metric || "value";
    const mdim = { label: mlabel, values: vals };
    if (old.has(mlabel)) mdim.constraintrange = old.get(mlabel);
    dims.push(mdim);
    this.dimInfo.push({ label: mlabel, values: vals });
    const trace = {
      type: "parcoords", dimensions: dims,
      line: { color: vals, colorscale: "Viridis", reversescale: s.goal !== "maximize", showscale: true,
        colorbar: { title: { text: mlabel, side: "right" }, thickness: 12 } },
      labelfont: { size: 12 }, tickfont: { size: 10 }, rangefont: { size: 9 },
    };
    const layout = { margin: { l: 70, r: 60, t: 50, b: 25 }, paper_bgcolor: "#fff",
      font: { family: "system-ui, sans-serif", size: 12 } };
    const first = !this.parcoords.data;
    Plotly.react(this.parcoords, [trace], layout, plotConfig()).then(() => {
      this.parcoords.dataset.rendered = "1";
    });
    if (first) {
      this.parcoords.on("plotly_restyle", () => this.applyBrush());
    }
  }

  constraints() {
    const out = [];
    if (!this.parcoords.data || !this.parcoords.data[0]) return out;
    this.parcoords.data[0].dimensions.forEach((d, k) => {
      let cr = d.constraintrange;
      if (!cr || !cr.length) return;
      if (!Array.isArray(cr[0])) cr = [cr];
      out.push({ k, label: d.label, ranges: cr });
    });
    return out;
  }

  applyBrush() {
    const cons = this.constraints();
    if (!cons.length) { this.table.setBrush(null, ""); return; }
    const allowed = new Set();
    this.pcRows.forEach((row, j) => {
      for (const con of cons) {
        const v = this.dimInfo[con.k].values[j];
        if (!isNum(v) || !con.ranges.some(([a, b]) => v >= Math.min(a, b) && v <= Math.max(a, b))) return;
      }
      allowed.add(row);
    });
    const desc = cons.map((con) => `${con.label} ∈ ${con.ranges.map(([a, b]) => `[${fmtNum(a)}, ${fmtNum(b)}]`).join(" ∪ ")}`).join(", ");
    this.table.setBrush(allowed, desc);
  }

  clearBrush() {
    if (!this.parcoords.data) return;
    const n = this.parcoords.data[0].dimensions.length;
    const update = {};
    for (let k = 0; k < n; k++) update[`dimensions[${k}].constraintrange`] = null;
    Plotly.restyle(this.parcoords, update, [0]);
  }

  // ------------------------------------------------------------------ history and scatter
  renderHistory() {
    const c = this.cols, s = this.summary.sweep;
    const better = s.goal === "maximize" ? (a, b) => a > b : (a, b) => a < b;
    const traces = [];
    for (const st of STATES) {
      const xs = [], ys = [];
      for (let i = 0; i < c.n; i++) if (c.state[i] === st && isNum(c.value[i])) { xs.push(c.number[i]); ys.push(c.value[i]); }
      if (xs.length) traces.push({ type: "scattergl", mode: "markers", name: st.replaceAll("_", " "), x: xs, y: ys,
        marker: { color: STATE_COLOR[st], size: 5, opacity: 0.75 }, hovertemplate: "trial %{x}<br>%{y}<extra>" + st + "</extra>" });
    }
    const bx = [], by = [];
    let best = null;
    const order = [...Array(c.n).keys()].sort((a, b) => c.number[a] - c.number[b]);
    for (const i of order) {
      if (c.state[i] !== "completed" || !isNum(c.value[i])) continue;
      if (best === null || better(c.value[i], best)) best = c.value[i];
      bx.push(c.number[i]); by.push(best);
    }
    if (bx.length) {
      const last = order.length ? c.number[order[order.length - 1]] : bx[bx.length - 1];
      bx.push(last); by.push(best);
      traces.push({ type: "scatter", mode: "lines", name: "best so far", x: bx, y: by, line: { shape: "hv", color: "#111827", width: 2 } });
    }
    if (!traces.length) { this.history.replaceChildren(el("div", { class: "placeholder", text: "no values yet" })); return; }
    Plotly.react(this.history, traces, baseLayout({
      xaxis: { title: { text: "trial" }, gridcolor: "#eef0f3", zeroline: false },
      yaxis: { title: { text: s.metric || "value" }, gridcolor: "#eef0f3", zeroline: false,
               range: focusRange(traces.flatMap((t) => t.y)) },
      legend: { orientation: "h", y: 1.12, font: { size: 11 } }, margin: { l: 60, r: 15, t: 30, b: 45 },
    }), plotConfig());
  }

  renderScatter() {
    const c = this.cols, s = this.summary.sweep;
    if (!this.paramNames.length) return;
    if (!this.scatterParam || !this.paramNames.includes(this.scatterParam)) this.scatterParam = this.paramNames[0];
    this.paramSel.replaceChildren(...this.paramNames.map((p) => el("option", { value: p, text: p, selected: p === this.scatterParam })));
    const p = this.scatterParam;
    const desc = describeColumn(c.params[p], this.specParam(p));
    const traces = [];
    for (const st of STATES) {
      const xs = [], ys = [], ns = [];
      for (let i = 0; i < c.n; i++) {
        if (c.state[i] !== st || !isNum(c.value[i])) continue;
        const x = c.params[p][i];
        if (x === null || x === undefined) continue;
        xs.push(desc.kind === "cat" ? String(x) : x); ys.push(c.value[i]); ns.push(c.number[i]);
      }
      if (xs.length) traces.push({ type: desc.kind === "cat" ? "scatter" : "scattergl", mode: "markers", name: st.replaceAll("_", " "),
        x: xs, y: ys, customdata: ns, marker: { color: STATE_COLOR[st], size: 6, opacity: 0.7 },
        hovertemplate: `trial %{customdata}<br>${p}=%{x}<br>%{y}<extra>${st}</extra>` });
    }
    if (!traces.length) { this.scatter.replaceChildren(el("div", { class: "placeholder", text: "no values yet" })); return; }
    Plotly.react(this.scatter, traces, baseLayout({
      xaxis: { title: { text: p }, type: desc.kind === "cat" ? "category" : desc.log ? "log" : "linear", gridcolor: "#eef0f3" },
      yaxis: { title: { text: s.metric || "value" }, gridcolor: "#eef0f3", zeroline: false,
               range: focusRange(traces.flatMap((t) => t.y)) },
      legend: { orientation: "h", y: 1.12 }, margin: { l: 60, r: 15, t: 30, b: 45 },
    }), plotConfig());
  }

  // ------------------------------------------------------------------ curves
  defaultSelection() {
    const c = this.cols, s = this.summary.sweep;
    const sign = s.goal === "maximize" ? -1 : 1;
    const idx = [...Array(c.n).keys()];
    const pick = (state, k, byValue) => idx.filter((i) => c.state[i] === state)
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
      if (!this.curveKey || !keys.includes(this.curveKey)) {
        const m = this.summary.sweep.metric;
        this.curveKey = keys.includes(m) ? m : keys[0] || null;
        this.loadCurves();
      }
      if (!same) this.keySel.replaceChildren(...keys.map((k) => el("option", { value: k, text: k, selected: k === this.curveKey })));
    } catch (e) { /* the curves card shows its own error */ }
  }

  async loadCurves() {
    if (!this.curveKey) {
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
        type: "scatter", mode: "lines", name: `#${t.number} ${t.state.replaceAll("_", " ")}`, x: t.step, y: t.values,
        line: { color, dash: STATE_DASH[t.state] || "solid", width: early ? 1.6 : 2 }, opacity: early ? 0.85 : 1,
        legendgroup: String(t.number), hovertemplate: `trial ${t.number} (${t.state})<br>step %{x}<br>%{y}<extra></extra>`,
        meta: { state: t.state },
      });
      if (END_SYMBOL[t.state]) {
        let j = t.values.length - 1;
        while (j > 0 && t.values[j] === null) j--;
        traces.push({ type: "scatter", mode: "markers", x: [t.step[j]], y: [t.values[j] === null ? 0 : t.values[j]], showlegend: false,
          legendgroup: String(t.number), marker: { symbol: END_SYMBOL[t.state], size: 10, color, line: { width: 2, color } },
          hovertemplate: `trial ${t.number} ${t.state}${t.reason ? ": " + t.reason.replaceAll("%", "%%") : ""}<extra></extra>` });
      }
    });
    if (!this.curves.data) this.curves.replaceChildren();
    Plotly.react(this.curves, traces, baseLayout({
      xaxis: { title: { text: "step" }, gridcolor: "#eef0f3", zeroline: false },
      yaxis: { title: { text: this.curveKey }, gridcolor: "#eef0f3", zeroline: false,
               range: focusRange(traces.flatMap((t) => t.y)) },
      margin: { l: 60, r: 10, t: 10, b: 45 }, legend: { font: { size: 10 } },
    }), plotConfig()).then(() => { this.curves.dataset.rendered = String(traces.length); });
  }

  // ------------------------------------------------------------------ importance and events
  async loadImportance() {
    let data;
    try { data = await getJSON(apiUrl(this.name, "/importance")); } catch (e) { showError(this.importance, e); return; }
    if (!data.importances.length) {
      if (this.importance.data) Plotly.purge(this.importance);
      this.importance.replaceChildren(el("div", { class: "placeholder", text: data.message || "not enough data" }));
      return;
    }
    const imp = data.importances.slice().reverse();
    if (!this.importance.data) this.importance.replaceChildren();
    Plotly.react(this.importance, [{
      type: "bar", orientation: "h", x: imp.map((d) => d.importance), y: imp.map((d) => d.param),
      marker: { color: "#3b5bdb" }, text: imp.map((d) => (d.importance ?? 0).toFixed(3)), textposition: "auto",
      hovertemplate: "%{y}: %{x:.3f}<extra></extra>",
    }], baseLayout({
      xaxis: { title: { text: `importance (${data.trials_used} of ${data.trials_total} completed trials)` }, range: [0, 1], gridcolor: "#eef0f3" },
      yaxis: { automargin: true }, margin: { l: 90, r: 15, t: 10, b: 45 },
    }), plotConfig());
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
