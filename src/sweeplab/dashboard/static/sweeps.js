// The sweeps list: state, trials by state, best value (with several objectives: the front's size), budgets spent.
import { el, badge, sweepBadge, fmtNum, fmtDur, fmtCount, agoEl, getJSON, sweepUrl, trialUrl, setCrumbs, STATES } from "./util.js";

function budgetCell(s) {
  const b = s.budget || {}, sp = s.spend || {};
  const items = [];
  const bar = (used, cap) => el("span", { class: "bar", title: `${fmtNum(used)} / ${fmtNum(cap)}` },
    el("i", { style: `width:${Math.min(100, (100 * used) / cap).toFixed(1)}%` }));
  if (b.trials) items.push(el("span", {}, `trials ${fmtCount(s.trials)}/${fmtCount(b.trials)} `, bar(s.trials, b.trials)));
  if (b.time) items.push(el("span", {}, `time ${fmtDur(sp.seconds)} of ${b.time}`));
  if (b.gpu_hours) items.push(el("span", {}, `GPU ${fmtNum((sp.gpu_seconds || 0) / 3600)}/${b.gpu_hours} h`));
  if (!items.length && sp.seconds) items.push(el("span", {}, `ran ${fmtDur(sp.seconds)}`));
  return el("div", { class: "budget" }, items.length ? items : "–");
}

export class SweepsView {
  constructor(root) { this.root = root; this.sweeps = []; }

  isLive() { return this.sweeps.some((s) => s.state === "running" && !s.driver_gone); }

  async load() {
    setCrumbs([["sweeps", null]]);
    document.title = "sweeplab · sweeps";
    await this.refresh();
  }

  async refresh() {
    const data = await getJSON("/api/sweeps");
    this.sweeps = data.sweeps;
    if (!this.sweeps.length) {
      this.root.replaceChildren(el("div", { class: "card" },
        el("h2", { text: "No sweeps yet" }),
        el("p", { class: "muted" }, "Run ", el("code", { text: "sweeplab sweep sweep.yaml" }),
          " and this page fills in by itself.")));
      return;
    }
    const rows = this.sweeps.slice().reverse().map((s) => el("tr", { dataset: { sweep: s.name } },
      el("td", {}, el("a", { href: sweepUrl(s.name), text: s.name })),
      el("td", {}, sweepBadge(s)),
      el("td", { text: s.method }),
      el("td", { class: "backend", title: s.address || "", text: s.backend ? (s.address ? `${s.backend} · ${s.address}` : s.backend) : "–" }),
      el("td", {}, (s.objectives || []).length > 1
        ? s.objectives.map((o) => `${o.name} (${o.goal === "maximize" ? "max" : "min"})`).join(", ")
        : s.metric ? `${s.metric} (${s.goal === "maximize" ? "max" : "min"})` : "–"),
      el("td", { class: "num" }, fmtCount(s.trials)),
      el("td", {}, el("div", { class: "counts" }, STATES.filter((k) => s.counts[k]).map((k) =>
        el("span", { class: `badge s-${k}`, title: k }, `${s.counts[k]} ${k.replaceAll("_", " ")}`)))),
      // Several objectives: the best is the feasible Pareto front (what `sweeplab best` lists), not one value.
      (s.objectives || []).length > 1 ? el("td", { class: "num front" }, s.front ?
        el("a", { href: sweepUrl(s.name), title: "trials on the feasible Pareto front" }, `front: ${fmtCount(s.front)} trial${s.front === 1 ? "" : "s"}`) : "–") :
      el("td", { class: "num" }, s.best_trial === null ? "–" :
        el("a", { href: trialUrl(s.name, s.best_trial), title: `trial ${s.best_trial}` }, fmtNum(s.best))),
      el("td", {}, budgetCell(s)),
      el("td", {}, agoEl(s.created)),
      el("td", {}, agoEl(s.ended || s.updated)),
      el("td", { class: "reason wrap", text: s.end_reason || "" }),
    ));
    this.root.replaceChildren(el("div", { class: "card" },
      el("h2", {}, "Sweeps", el("span", { class: "chip" }, String(this.sweeps.length))),
      el("div", { class: "tablewrap" }, el("table", { id: "sweeps" },
        el("thead", {}, el("tr", {}, ["name", "state", "method", "backend", "metric", "trials", "by state", "best",
          "budget", "created", "updated / ended", "end reason"].map((h) =>
          el("th", { class: h === "trials" || h === "best" ? "num" : "", text: h })))),
        el("tbody", {}, rows)))));
  }
}
