// Compare 2-6 trials: their configs side by side (rows that differ highlighted) and their curves overlaid.
import {
  el, fill, badge, printable, fmtNum, fmtDur, fmtCount, getJSON, apiUrl, sweepUrl, trialUrl, setCrumbs, showError,
  plotConfig, baseLayout, metricAxis, logToggle, plotText, curveMarks, curvesAxis, STATE_DASH,
} from "./util.js";

const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf"];
const MAX = 6;

// {"a": {"b": 1}} -> {"a.b": 1}: nested configs compare key by key.
function flatten(obj, prefix = "", out = {}) {
  for (const [k, v] of Object.entries(obj || {})) {
    const key = prefix ? `${prefix}.${k}` : k;
    if (v !== null && typeof v === "object" && !Array.isArray(v)) flatten(v, key, out); else out[key] = v;
  }
  return out;
}

export class CompareView {
  constructor(root, r) {
    this.root = root;
    this.name = r.sweep;
    this.numbers = r.trials;
    this.key = null;
    this.log = false;
    this.onlyDiff = false;
  }

  isLive() { return (this.details || []).some((d) => ["running", "queued"].includes(d.state)); }

  async load() {
    setCrumbs([["sweeps", "/"], [this.name, sweepUrl(this.name)], ["compare", null]]);
    document.title = `sweeplab · ${printable(this.name)} · compare`;
    if (this.numbers.length < 2 || this.numbers.length > MAX) {
      throw new Error(`choose 2 to ${MAX} trials to compare (the URL names ${this.numbers.length}): tick them in the sweep's trials table`);
    }
    this.header = el("div", { class: "section", id: "compare-header" });
    this.table = el("div", { id: "compare-config" });
    this.keySel = el("select", { id: "compare-key", onchange: () => { this.key = this.keySel.value; this.loadCurves(); } });
    this.curves = el("div", { class: "plot tall", id: "compare-curves" });
    const diffBox = el("input", { type: "checkbox", id: "only-diff", onchange: () => { this.onlyDiff = diffBox.checked; this.renderTable(); } });
    this.root.replaceChildren(this.header,
      el("div", { class: "card" }, el("h2", {}, "Configuration", el("span", { class: "tools" },
        el("label", {}, diffBox, " only differences"))), this.table),
      el("div", { class: "card" }, el("h2", {}, "Curves", el("span", { class: "tools" }, this.keySel,
        logToggle("log-compare", (on) => { this.log = on; this.loadCurves(); }))), this.curves));
    await this.refresh();
  }

  async refresh() {
    const [summary, ...details] = await Promise.all([getJSON(apiUrl(this.name)),
      ...this.numbers.map((n) => getJSON(apiUrl(this.name, `/trials/${n}`)))]);
    this.summary = summary;
    this.details = details;
    const metric = summary.sweep.metric;
    fill(this.header, el("h1", {}, `Compare ${details.length} trials`),
      el("div", { class: "meta" }, details.map((d, k) => el("span", {},
        el("span", { class: "swatch", style: `background:${PALETTE[k]}` }),
        el("a", { href: trialUrl(this.name, d.number), text: `trial ${d.number}` }), " ", badge(d.state),
        ` ${metric || "value"} `, el("b", { text: fmtNum(d.value) })))));
    this.renderTable();
    const keys = [...new Set(details.flatMap((d) => d.metric_keys))].sort();
    if (this.key === null || !keys.includes(this.key)) this.key = keys.includes(metric) ? metric : keys.length ? keys[0] : null;  // "" is a metric's name
    this.keySel.replaceChildren(...keys.map((k) => el("option", { value: k, text: k, selected: k === this.key })));
    await this.loadCurves();
  }

  renderTable() {
    const ds = this.details;
    const dur = (d) => (d.started && d.ended ? d.ended - d.started : null);
    const rows = [
      ["state", ds.map((d) => d.state), (v) => badge(v)],
      [this.summary.sweep.metric || "value", ds.map((d) => d.value), fmtNum],
      ["duration", ds.map(dur), fmtDur],
      ["last step", ds.map((d) => d.last_step), fmtCount],
      ["why it ended", ds.map((d) => d.reason), (v) => v || "–"],
    ];
    const flats = ds.map((d) => ({ ...flatten(d.config), ...flatten(d.params) }));
    const keys = [...new Set(flats.flatMap((f) => Object.keys(f)))].sort();
    for (const k of keys) rows.push([k, flats.map((f) => (k in f ? f[k] : undefined)), null, true]);
    let differing = 0;
    const trs = rows.map(([label, vals, fmt, isParam]) => {
      const same = vals.every((v) => JSON.stringify(v) === JSON.stringify(vals[0]));
      if (!same && isParam) differing++;
      if (this.onlyDiff && same) return null;
      return el("tr", { class: same ? "" : "diff", dataset: { key: label } }, el("th", { text: label }),
        vals.map((v) => v === undefined ? el("td", { class: "missing", text: "not set" }) :
          el("td", { class: typeof v === "number" ? "num" : "" },
            fmt ? fmt(v) : typeof v === "object" && v !== null ? JSON.stringify(v) : fmtNum(v))));
    });
    this.table.replaceChildren(
      el("p", { class: "muted", id: "diff-count", text: `${differing} of ${keys.length} settings differ (highlighted)` }),
      el("div", { class: "tablewrap" }, el("table", { class: "compare-table" },
        el("thead", {}, el("tr", {}, el("th", { text: "" }), ds.map((d, k) => el("th", {},
          el("span", { class: "swatch", style: `background:${PALETTE[k]}` }), `trial ${d.number}`)))),
        el("tbody", {}, trs.filter(Boolean)))));
  }

  async loadCurves() {
    if (this.key === null) { this.curves.replaceChildren(el("div", { class: "placeholder", text: "no metrics logged" })); return; }
    let data;
    try {
      data = await getJSON(apiUrl(this.name, `/curves?${new URLSearchParams({ key: this.key, trials: this.numbers.join(","), max_points: 800 })}`));
    } catch (e) { showError(this.curves, e); return; }
    const color = new Map(this.details.map((d, k) => [d.number, PALETTE[k]]));
    const traces = data.trials.filter((t) => t.step.length).map((t) => ({
      type: "scatter", ...curveMarks(t.values), name: `#${t.number} ${t.state.replaceAll("_", " ")}`,
      x: t.step, y: t.values, line: { color: color.get(t.number), dash: STATE_DASH[t.state] || "solid", width: 2 },
      hovertemplate: `trial ${t.number}<br>step %{x}<br>%{y}<extra></extra>`,
    }));
    if (!this.curves.data) this.curves.replaceChildren();
    await Plotly.react(this.curves, traces, baseLayout({
      xaxis: { title: { text: "step" }, gridcolor: "#eef0f3", zeroline: false },
      yaxis: { ...curvesAxis(traces, this.log), title: { text: plotText(this.key) } },
      margin: { l: 60, r: 10, t: 10, b: 45 }, legend: { orientation: "h", y: -0.2 },
    }), plotConfig());
    this.curves.dataset.rendered = String(traces.length);
  }
}
