// The trial view: config, final metrics, all curves, attempts, events (with reasons), profile, log tail.
import {
  el, fill, badge, goneBadge, printable, fmtNum, fmtTime, fmtDur, fmtBytes, fmtCount, agoEl, getJSON, apiUrl, sweepUrl, setCrumbs, showError,
  plotConfig, baseLayout, profileRows, plotText, curveMarks, STATE_COLOR, STATE_DASH,
} from "./util.js";

const MAX_PLOTS = 12;

function kvList(obj) {
  const entries = Object.entries(obj || {});
  if (!entries.length) return el("p", { class: "muted", text: "–" });
  return el("dl", { class: "kv" }, entries.flatMap(([k, v]) => [
    el("dt", { text: k }),
    el("dd", { text: v !== null && typeof v === "object" ? JSON.stringify(v) : fmtNum(v) })]));
}

export class TrialView {
  constructor(root, r) {
    this.root = root;
    this.name = r.sweep;
    this.number = r.trial;
    this.detail = null;
  }

  isLive() { return this.detail && ["running", "queued", "preempted"].includes(this.detail.state) && !this.stalled(); }

  // A running (or queued) trial of a sweep whose driver is gone: nothing runs it until `sweeplab resume`.
  stalled() { return this.detail.driver_gone && ["running", "queued", "preempted"].includes(this.detail.state); }

  async load() {
    setCrumbs([["sweeps", "/"], [this.name, sweepUrl(this.name)], [`trial ${this.number}`, null]]);
    document.title = `sweeplab · ${printable(this.name)} · trial ${this.number}`;
    this.header = el("div", { class: "section", id: "trial-header" });
    this.params = el("div", { id: "params" });
    this.metrics = el("div", { id: "final-metrics" });
    this.profile = el("div", { id: "profile" });
    this.plots = el("div", { class: "grid2", id: "trial-curves" });
    this.attempts = el("div", { id: "attempts" });
    this.events = el("div", { class: "events", id: "trial-events" });
    this.checkpoints = el("div", { id: "checkpoints" });
    this.config = el("pre", { class: "json", id: "config" });
    this.log = el("pre", { class: "box", id: "log" });
    this.logNote = el("span", { class: "legend-note" });
    this.root.replaceChildren(
      this.header,
      el("div", { class: "grid3 section" },
        el("div", { class: "card" }, el("h2", {}, "Parameters"), this.params),
        el("div", { class: "card" }, el("h2", {}, "Final metrics"), this.metrics),
        el("div", { class: "card" }, el("h2", {}, "Profile"), this.profile)),
      el("div", { class: "card" }, el("h2", {}, "Curves", this.curvesNote = el("span", { class: "legend-note", id: "trial-curves-note" })),
        this.plots),
      el("div", { class: "card" }, el("h2", {}, "Attempts"), this.attempts),
      el("div", { class: "grid2 section" },
        el("div", { class: "card" }, el("h2", {}, "Events"), this.events),
        el("div", { class: "card" }, el("h2", {}, "Checkpoints"), this.checkpoints)),
      el("div", { class: "grid2 section" },
        el("div", { class: "card" }, el("h2", {}, "Config"), this.config),
        el("div", { class: "card" }, el("h2", {}, "Log", el("span", { class: "tools" }, this.logNote)), this.log)),
    );
    await this.refresh();
  }

  async refresh() {
    const d = await getJSON(apiUrl(this.name, `/trials/${this.number}`));
    this.detail = d;
    this.renderHeader(d);
    this.params.replaceChildren(kvList(d.params));
    this.metrics.replaceChildren(kvList(d.metrics));
    // One label per measure, each with its unit: the sampled system figures win over the profile's own.
    const rows = new Map(profileRows(d.profile));
    const sys = d.system || {};
    if (sys.samples) {
      rows.set("CPU (mean / peak)", `${fmtNum(Number((sys.cpu_mean ?? 0).toPrecision(3)))} % / ${fmtNum(Number((sys.cpu_max ?? 0).toPrecision(3)))} %`);
      rows.delete("CPU (mean)"); rows.delete("CPU (peak)");
      rows.set("peak RSS", fmtBytes(sys.rss_max));
      if (sys.gpu_util_mean !== null) rows.set("GPU util (mean)", `${fmtNum(Number(sys.gpu_util_mean.toPrecision(3)))} %`);
      if (sys.gpu_mem_max !== null) rows.set("peak GPU memory", fmtBytes(sys.gpu_mem_max));
    }
    this.profile.replaceChildren(rows.size ? el("dl", { class: "kv" }, [...rows].flatMap(([k, v]) => [
      el("dt", { text: k }), el("dd", { text: v })])) : el("p", { class: "muted", text: "–" }));
    this.renderAttempts(d);
    this.renderEvents(d);
    this.renderCheckpoints(d);
    this.config.textContent = d.config ? printable(JSON.stringify(d.config, null, 2)) : "–";
    await Promise.all([this.loadCurves(), this.loadLog()]);
  }

  renderHeader(d) {
    // A trial its gone driver left running runs no more: its duration ends at its last sign of life.
    const stalled = this.stalled();
    const end = d.ended || (stalled ? d.last_seen : null);
    const dur = d.started && end ? end - d.started : d.started ? Date.now() / 1000 - d.started : null;
    fill(this.header,
      el("h1", {}, `Trial ${d.number}`, this.stalled() ? goneBadge(d.state) : badge(d.state)),
      el("div", { class: "meta" },
        el("span", {}, `${d.metric || "value"} `, el("b", { id: "trial-value", text: fmtNum(d.value) })),
        el("span", {}, "attempts ", el("b", { text: String(d.attempt_count) })),
        el("span", { id: "trial-started" }, "started ", el("b", {}, agoEl(d.started))),
        el("span", { id: "trial-duration" }, "duration ", el("b", { text: fmtDur(dur) }),
          stalled && d.started && !d.ended ? " until its last report (driver gone)" : null),
        el("span", {}, "last step ", el("b", { text: fmtCount(d.last_step) })),
        d.seed !== null ? el("span", {}, "seed ", el("b", { text: String(d.seed) })) : null),
      d.reason ? el("div", { class: `reasonbox s-${d.state}`, id: "trial-reason" }, el("b", { text: "Why it ended: " }), d.reason) : null);
  }

  renderAttempts(d) {
    if (!d.attempts.length) { this.attempts.replaceChildren(el("p", { class: "muted", text: "not started yet" })); return; }
    const heads = ["#", "state", "started", "duration", "exit", "signal", "host", "pid", "slot", "reason"];
    const rows = d.attempts.flatMap((a) => {
      const row = el("tr", {},
        el("td", { class: "num", text: String(a.number) }), el("td", {}, badge(a.state)),
        el("td", { text: fmtTime(a.started) }), el("td", { class: "num", text: fmtDur(a.ended ? a.ended - a.started : null) }),
        el("td", { class: "num", text: a.exit_code ?? "–" }), el("td", { class: "num", text: a.signal ?? "–" }),
        el("td", { text: a.host || "–" }), el("td", { class: "num", text: a.pid ?? "–" }),
        el("td", { class: "mono", text: a.slot ? JSON.stringify(a.slot) : "–" }),
        // the reason is the whole sentence (for an exception "Type: message"); error_type only classifies it
        el("td", { class: "reason", title: a.error_type || "", text: a.reason || a.error_type || "" }));
      const out = [row];
      if (a.traceback) out.push(el("tr", {}, el("td", { colspan: heads.length },
        el("details", {}, el("summary", { text: "traceback" }), el("pre", { class: "box", text: a.traceback })))));
      return out;
    });
    this.attempts.replaceChildren(el("div", { class: "tablewrap" }, el("table", {},
      el("thead", {}, el("tr", {}, heads.map((h) => el("th", { text: h })))), el("tbody", {}, rows))));
  }

  renderEvents(d) {
    if (!d.events.length) { this.events.replaceChildren(el("p", { class: "muted", text: "no events" })); return; }
    this.events.replaceChildren(...d.events.slice().sort((a, b) => b.time - a.time || b.id - a.id).map((e) => el("div", { class: "ev" },
      el("span", { class: "muted", text: fmtTime(e.time) }),
      el("span", {}, el("span", { class: `kind k-${e.kind}`, text: e.kind })),
      el("span", { class: "muted", text: e.attempt ? `attempt ${e.attempt}` : "" }),
      el("span", { text: e.message || "" }))));
  }

  renderCheckpoints(d) {
    if (!d.checkpoints.length) { this.checkpoints.replaceChildren(el("p", { class: "muted", text: "no checkpoints" })); return; }
    this.checkpoints.replaceChildren(el("div", { class: "tablewrap" }, el("table", {},
      el("thead", {}, el("tr", {}, ["attempt", "step", "size", "write time", "when", "path"].map((h) => el("th", { text: h })))),
      el("tbody", {}, d.checkpoints.slice().reverse().map((c) => el("tr", {},
        el("td", { class: "num", text: String(c.attempt) }), el("td", { class: "num", text: c.step ?? "–" }),
        el("td", { class: "num", text: fmtBytes(c.bytes) }), el("td", { class: "num", text: fmtDur(c.seconds) }),
        el("td", { text: fmtTime(c.time) }), el("td", { class: "mono", text: c.path })))))));
  }

  async loadCurves() {
    let data;
    try { data = await getJSON(apiUrl(this.name, `/trials/${this.number}/curves?max_points=800`)); } catch (e) { showError(this.plots, e); return; }
    const all = this.detail && this.detail.metric_keys.length > Object.keys(data.curves).length
      ? this.detail.metric_keys : Object.keys(data.curves);
    const keys = Object.keys(data.curves).slice(0, MAX_PLOTS);
    // More metrics than plots: say which are left out (the sweep page's learning curves draw any of them).
    const left = all.filter((k) => !keys.includes(k));
    // a trial of 100,000 metrics: name the first 20 left out, not all of them (a note of megabytes)
    const named = left.length > 20 ? `${left.slice(0, 20).join(", ")} and ${fmtCount(left.length - 20)} more` : left.join(", ");
    this.curvesNote.textContent = left.length
      ? `${fmtCount(keys.length)} of ${fmtCount(all.length)} metrics drawn; not drawn: ${named}` : "";
    if (!keys.length) { this.plots.replaceChildren(el("p", { class: "muted", text: "no metrics logged" })); return; }
    const have = [...this.plots.children].map((n) => n.dataset.key);
    if (have.join("\n") !== keys.join("\n")) {
      this.plots.replaceChildren(...keys.map((k) => el("div", { class: "plot small", dataset: { key: k } })));
    }
    const color = STATE_COLOR[data.state] || "#3b5bdb";
    await Promise.all(keys.map((k, j) => {
      const c = data.curves[k];
      return Plotly.react(this.plots.children[j], [{ type: "scatter", ...curveMarks(c.values),
        x: c.step, y: c.values, line: { color, dash: STATE_DASH[data.state] || "solid", width: 2 },
        hovertemplate: `step %{x}<br>${plotText(k)}=%{y}<extra></extra>` }],
      baseLayout({ title: { text: `${plotText(k)}${c.n > c.step.length ? ` (${c.step.length} of ${c.n} points)` : ""}`, font: { size: 13 }, x: 0.02, y: 0.97 },
        margin: { l: 55, r: 10, t: 30, b: 35 }, showlegend: false, xaxis: { title: { text: "step" }, gridcolor: "#eef0f3", zeroline: false } }),
      plotConfig());
    }));
    this.plots.dataset.rendered = String(keys.length);
  }

  async loadLog() {
    if (this.detail && !this.detail.log_path && !this.detail.attempts.some((a) => a.log_path)) {
      this.log.textContent = "no log file in the store for this trial";   // not an error: nothing to fetch
      this.logNote.textContent = "";
      return;
    }
    try {
      const log = await getJSON(apiUrl(this.name, `/trials/${this.number}/log?tail=65536`));
      const atBottom = this.log.scrollTop + this.log.clientHeight >= this.log.scrollHeight - 4;
      this.log.textContent = log.text ? printable(log.text.replaceAll("\r\n", "\n")) : "(empty)";
      if (atBottom) this.log.scrollTop = this.log.scrollHeight;
      this.logNote.replaceChildren(`${log.path} · ${fmtBytes(log.size)}${log.truncated ? " · last 64 KB" : ""} · `,
        el("a", { href: `/files/${log.path.split("/").map(encodeURIComponent).join("/")}`, target: "_blank", rel: "noopener", text: "full log" }));
    } catch (e) {
      this.log.textContent = e.message;
      this.logNote.textContent = "";
    }
  }
}
