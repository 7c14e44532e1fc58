// Custom charts (W&B-style): any metric or parameter against any other (scatter), and any metric's curves
// for the trials the table shows, grouped by a parameter with mean and spread (±1 std) bands. The chosen
// charts live in the URL (?charts=...), so a link reproduces the view.
import { el, fmtNum, getJSON, apiUrl, isNum, metricAxis, plotConfig, baseLayout, showError, plotText, STATE_COLOR, STATES } from "./util.js";

const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];
const MAX_GROUP_TRIALS = 200;   // queries.MAX_CURVE_TRIALS

// "scatter:lr:value,curves:val_loss:optimizer" <-> [{kind, a, b}]
export function parseCharts(text) {
  return (text || "").split(",").map((s) => s.split(":").map(decodeURIComponent))
    // a curves chart of the metric named "" has a === "": kept (only a missing one is dropped)
    .filter((p) => (p[0] === "scatter" && p[1]) || (p[0] === "curves" && p.length > 1)).map(([kind, a, b]) => ({ kind, a, b: b || "" }));
}
// a curves chart's grouping: "" none, "state", "p:NAME" a parameter (a bare NAME: a URL from before)
function groupParam(b) { return b === "" || b === "state" ? null : b.startsWith("p:") ? b.slice(2) : b; }
export function formatCharts(charts) {
  return charts.map((c) => [c.kind, c.a, c.b].map(encodeURIComponent).join(":")).join(",");
}

function rgba(hex, alpha) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255},${(n >> 8) & 255},${n & 255},${alpha})`;
}

export class CustomCharts {
  constructor(container, view) {
    this.box = container;
    this.view = view;   // the SweepView: cols, keys, table, name
    this.charts = parseCharts(new URLSearchParams(location.search).get("charts"));
    this.kind = el("select", { id: "chart-kind", onchange: () => this.fillPickers() },
      el("option", { value: "scatter", text: "scatter: Y against X" }),
      el("option", { value: "curves", text: "curves of a metric, grouped by" }));
    this.pickA = el("select", { id: "chart-a" });
    this.pickB = el("select", { id: "chart-b" });
    this.list = el("div", { class: "grid2", id: "custom-charts" });
    this.box.replaceChildren(
      el("div", { class: "toolbar" }, this.kind, this.pickA, this.pickB,
        el("button", { type: "button", id: "add-chart", onclick: () => this.add() }, "add chart"),
        el("span", { class: "legend-note", text: "charts are kept in the page's URL: copy it to share this view" })),
      this.list);
  }

  fields() {
    const c = this.view.cols;
    return [["value", `${this.view.summary.sweep.metric || "value"} (objective)`],
      ...this.view.paramNames.map((p) => [`p:${p}`, `param ${p}`]),
      ...Object.keys(c.metrics || {}).sort().map((m) => [`m:${m}`, `final ${m}`])];
  }

  fillPickers() {
    const opts = (pairs) => pairs.map(([v, t]) => el("option", { value: v, text: t }));
    if (this.kind.value === "scatter") {
      this.pickA.replaceChildren(...opts(this.fields()));       // y
      this.pickB.replaceChildren(...opts(this.fields()));       // x
      if (this.view.paramNames.length) this.pickB.value = `p:${this.view.paramNames[0]}`;
    } else {
      this.pickA.replaceChildren(...opts(this.view.keys.map((k) => [k, k])));
      // parameters as `p:NAME`, so one named "" or "state" is not "no grouping" or the state
      this.pickB.replaceChildren(...opts([["", "no grouping"], ["state", "state"], ...this.view.paramNames.map((p) => [`p:${p}`, p])]));
    }
  }

  add() {
    this.charts.push({ kind: this.kind.value, a: this.pickA.value, b: this.pickB.value });
    this.persist();
    this.render();
  }

  remove(k) {
    this.charts.splice(k, 1);
    this.persist();
    this.render();
  }

  persist() {
    const q = new URLSearchParams(location.search);
    if (this.charts.length) q.set("charts", formatCharts(this.charts)); else q.delete("charts");
    const s = q.toString();
    history.replaceState(null, "", `${location.pathname}${s ? `?${s}` : ""}`);
  }

  column(field) {
    const c = this.view.cols;
    if (field === "value") return c.value;
    if (field.startsWith("p:")) return c.params[field.slice(2)] || [];
    if (field.startsWith("m:")) return (c.metrics || {})[field.slice(2)] || [];
    return [];
  }

  label(field) {
    const f = this.fields().find(([v]) => v === field);
    return f ? f[1] : field;
  }

  render() {
    if (!this.pickA.options.length) this.fillPickers();
    this.list.replaceChildren(...this.charts.map((ch, k) => {
      const plot = el("div", { class: "plot", id: `custom-${k}` });
      const title = ch.kind === "scatter" ? `${this.label(ch.a)} vs ${this.label(ch.b)}` :
        `${ch.a} curves${ch.b ? ` by ${groupParam(ch.b) ?? ch.b}` : ""} (trials the table shows)`;
      const card = el("div", { class: "card custom-chart", dataset: { kind: ch.kind } },
        el("h2", {}, title, el("span", { class: "tools" },
          el("button", { type: "button", class: "remove-chart", onclick: () => this.remove(k) }, "remove"))), plot);
      const draw = ch.kind === "scatter" ? this.scatter(plot, ch) : this.grouped(plot, ch);
      Promise.resolve(draw).catch((e) => showError(plot, e));
      return card;
    }));
  }

  scatter(plot, ch) {
    const c = this.view.cols;
    const ys = this.column(ch.a), xs = this.column(ch.b);
    const yax = metricAxis(ys.filter(isNum));
    const traces = [];
    for (const st of STATES) {
      const x = [], y = [], n = [];
      for (let i = 0; i < c.n; i++) {
        if (c.state[i] !== st) continue;
        if (xs[i] === null || xs[i] === undefined || !isNum(ys[i])) continue;   // gaps stay gaps
        x.push(typeof xs[i] === "string" ? plotText(xs[i]) : xs[i]); y.push(yax.clip(ys[i]).y); n.push(c.number[i]);
      }
      if (x.length) traces.push({ type: c.n > 500 && typeof x[0] === "number" ? "scattergl" : "scatter", mode: "markers", name: st.replaceAll("_", " "), x, y, customdata: n,
        marker: { color: STATE_COLOR[st], size: 6, opacity: 0.75 }, hovertemplate: "trial %{customdata}<br>%{x}, %{y}<extra></extra>" });
    }
    return Plotly.react(plot, traces, baseLayout({
      xaxis: { title: { text: plotText(this.label(ch.b)) }, gridcolor: "#eef0f3", exponentformat: "e" },
      yaxis: { ...yax.axis, title: { text: plotText(this.label(ch.a)) } },
      legend: { orientation: "h", y: 1.12 }, margin: { l: 60, r: 15, t: 30, b: 45 },
    }), plotConfig()).then(() => { plot.dataset.rendered = String(traces.length); });
  }

  async grouped(plot, ch) {
    const c = this.view.cols;
    const rows = this.view.table.filtered().slice(0, MAX_GROUP_TRIALS);
    const nums = rows.map((i) => c.number[i]);
    if (!nums.length) { plot.replaceChildren(el("div", { class: "placeholder", text: "no trials match the table's filters" })); return; }
    const data = await getJSON(apiUrl(this.view.name, `/curves?${new URLSearchParams({ key: ch.a, trials: nums.join(","), max_points: 300 })}`));
    const row = new Map(rows.map((i) => [c.number[i], i]));
    // A numeric parameter with many values is grouped in three equal-count bins (W&B groups by value).
    const col = c.params[groupParam(ch.b)] || [];
    const nums2 = [...new Set(rows.map((i) => col[i]).filter(isNum))].sort((a, b) => a - b);
    const cuts = nums2.length > 6 ? [nums2[Math.floor(nums2.length / 3)], nums2[Math.floor((2 * nums2.length) / 3)]] : null;
    const bin = (v) => {
      if (!cuts) return fmtNum(v);
      if (v < cuts[0]) return `< ${fmtNum(cuts[0])}`;
      if (v < cuts[1]) return `${fmtNum(cuts[0])} – ${fmtNum(cuts[1])}`;
      return `≥ ${fmtNum(cuts[1])}`;
    };
    const keyOf = (i) => {
      if (!ch.b) return "all";
      if (ch.b === "state") return c.state[i];
      const v = col[i];
      return v === null || v === undefined ? "not set" : typeof v === "number" ? bin(v) : String(v);
    };
    const groups = new Map();
    for (const t of data.trials) {
      const g = keyOf(row.get(t.number));
      if (!groups.has(g)) groups.set(g, new Map());
      const steps = groups.get(g);
      t.step.forEach((s, j) => { if (isNum(t.values[j])) { if (!steps.has(s)) steps.set(s, []); steps.get(s).push(t.values[j]); } });
    }
    const traces = [];
    const all = [];
    [...groups.keys()].sort().forEach((g, k) => {
      const color = PALETTE[k % PALETTE.length];
      const steps = [...groups.get(g).keys()].sort((a, b) => a - b);
      const mean = [], lo = [], hi = [], count = [];
      for (const s of steps) {
        const v = groups.get(g).get(s);
        const m = v.reduce((a, b) => a + b, 0) / v.length;
        const sd = Math.sqrt(v.reduce((a, b) => a + (b - m) ** 2, 0) / v.length);
        mean.push(m); lo.push(m - sd); hi.push(m + sd); count.push(v.length);
      }
      all.push(...mean);
      const n = data.trials.filter((t) => keyOf(row.get(t.number)) === g).length;
      traces.push({ type: "scatter", mode: "lines", x: steps, y: lo, line: { width: 0 }, showlegend: false, hoverinfo: "skip", legendgroup: g });
      traces.push({ type: "scatter", mode: "lines", x: steps, y: hi, line: { width: 0 }, fill: "tonexty", fillcolor: rgba(color, 0.18),
        showlegend: false, hoverinfo: "skip", legendgroup: g });
      traces.push({ type: "scatter", mode: "lines", x: steps, y: mean, name: plotText(`${ch.b ? `${ch.b}=${g}` : "all"} (${n} trials)`), customdata: count,
        line: { color, width: 2 }, legendgroup: g, meta: { group: g, trials: n },
        hovertemplate: `${plotText(g)}: mean %{y} over %{customdata} trials at step %{x}<extra></extra>` });
    });
    const yaxis = metricAxis(all);   // the means' axis; bands and means kept within SVG's reach
    for (const t of traces) t.y = t.y.map(yaxis.reach);
    if (!plot.data) plot.replaceChildren();
    await Plotly.react(plot, traces, baseLayout({
      xaxis: { title: { text: "step" }, gridcolor: "#eef0f3" },
      yaxis: { ...yaxis.axis, title: { text: plotText(`${ch.a} (mean ± 1 std)`) } },
      legend: { orientation: "h", y: 1.14 }, margin: { l: 60, r: 15, t: 30, b: 45 },
    }), plotConfig());
    plot.dataset.rendered = String(groups.size);
  }
}
