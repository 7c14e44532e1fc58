// The trials table: sortable, filterable (text, state, parallel-coordinates brushing), paginated, with
// checkboxes that choose the trials whose learning curves are drawn.
import { el, badge, fmtNum, fmtDur, fmtCount, printable, trialUrl, sweepUrl, STATES } from "./util.js";

export const MAX_COMPARE = 6;

// One CSV field: quoted when it holds a comma, quote or newline (RFC 4180). A text value that a spreadsheet
// program would run as a formula (CSV injection: = + - @ tab CR LF first, after any quotes) gets a single
// quote before it, as `sweeplab export` writes it (export.py); numbers (-0.5) are written as they are.
function csvField(v) {
  if (v === null || v === undefined) return "";
  let t = typeof v === "object" ? JSON.stringify(v) : String(v);
  if (typeof v === "string" && /^'*[=+\-@\t\r\n]/.test(t)) t = `'${t}`;
  return /[",\n\r]/.test(t) ? `"${t.replaceAll("\"", "\"\"")}"` : t;
}

const PAGE = 50;

export class TrialsTable {
  constructor(container, { sweep, goal, objectives = [], onSelectionChange }) {
    this.container = container;
    this.sweep = sweep;
    this.goal = goal;
    this.objectives = objectives;   // [{name, goal}]: with several, a column each and a front-rank column
    this.onSelectionChange = onSelectionChange;
    this.cols = null;
    this.paramNames = [];
    this.brush = null;        // Set of row indices allowed by brushing, or null
    this.text = "";
    this.state = "";
    this.sort = { key: "number", dir: 1 };
    this.page = 0;
    this.selected = new Set();
    this.bestNumber = null;
    this.build();
  }

  build() {
    this.search = el("input", { type: "search", placeholder: "filter: text in any column…", id: "trial-filter",
      oninput: () => { this.text = this.search.value.trim().toLowerCase(); this.page = 0; this.render(); } });
    this.stateSel = el("select", { id: "state-filter", onchange: () => { this.state = this.stateSel.value; this.page = 0; this.render(); } },
      el("option", { value: "", text: "all states" }), STATES.map((s) => el("option", { value: s, text: s.replaceAll("_", " ") })));
    this.count = el("span", { id: "trial-count", class: "muted" });
    this.brushNote = el("span", { class: "chip", id: "brush-note", style: "display:none" });
    this.selNote = el("span", { class: "muted", id: "selection-note" });
    this.compareLink = el("a", { id: "compare-link", class: "button disabled", role: "button",
      title: `select 2–${MAX_COMPARE} trials to compare their configs and curves side by side` }, "compare");
    this.csvButton = el("button", { type: "button", id: "download-csv", title: "the matching trials (all pages) as a CSV file",
      onclick: () => this.downloadCsv() }, "download CSV");
    this.thead = el("thead");
    this.tbody = el("tbody");
    this.pager = el("div", { class: "pager" });
    this.container.replaceChildren(
      el("div", { class: "toolbar" }, this.search, this.stateSel, this.brushNote, el("span", { class: "grow" }),
        this.selNote, this.compareLink, this.csvButton,
        el("button", { type: "button", onclick: () => this.selectVisible(), title: "draw the curves of the first 20 matching trials" }, "curves of matches"),
        el("button", { type: "button", onclick: () => this.setSelection([]) }, "clear selection")),
      el("div", { class: "tablewrap" }, el("table", { id: "trials" }, this.thead, this.tbody)),
      el("div", { class: "pager" }, this.count, this.pager));
  }

  setData(cols, paramNames, bestNumber) {
    this.cols = cols;
    this.paramNames = paramNames;
    this.bestNumber = bestNumber;
    this.render();
  }

  setBrush(rowSet, description) {
    this.brush = rowSet;
    this.page = 0;
    this.brushNote.style.display = rowSet ? "" : "none";
    this.brushNote.textContent = rowSet ? `brushed: ${printable(description)}` : "";
    this.render();
  }

  // `byUser`: false when the page chooses (its default curves), true for a tick, "clear selection" or
  // "curves of matches".
  setSelection(numbers, byUser = true) {
    this.selected = new Set(numbers);
    this.render();
    this.onSelectionChange([...this.selected], byUser);
  }

  selectVisible() {
    this.setSelection(this.filtered().slice(0, 20).map((i) => this.cols.number[i]));
  }

  selectionTools() {
    const n = this.selected.size;
    this.selNote.textContent = `${n} selected`;
    const ok = n >= 2 && n <= MAX_COMPARE;
    this.compareLink.className = `button${ok ? "" : " disabled"}`;
    if (ok) {
      const nums = [...this.selected].sort((a, b) => a - b).join(",");
      this.compareLink.setAttribute("href", `${sweepUrl(this.sweep)}/compare?trials=${nums}`);
      this.compareLink.setAttribute("aria-disabled", "false");
    } else {
      this.compareLink.removeAttribute("href");
      this.compareLink.setAttribute("aria-disabled", "true");
    }
  }

  // The filtered, sorted table (every page, every parameter) as CSV text: what a user sees, to take away.
  csv() {
    const c = this.cols;
    const defs = this.columns();
    const iso = (t) => (t ? new Date(t * 1000).toISOString() : "");
    const head = [...defs.map((d) => d.label === "#" ? "number" : d.key === "duration" ? "duration_s" : d.label), "started", "ended"];
    const lines = [head.map(csvField).join(",")];
    for (const i of this.filtered()) {
      lines.push([...defs.map((d) => d.get(i)), iso(c.started[i]), iso(c.ended[i])].map(csvField).join(","));
    }
    return lines.join("\r\n") + "\r\n";
  }

  downloadCsv() {
    const blob = new Blob([this.csv()], { type: "text/csv;charset=utf-8" });
    const a = el("a", { href: URL.createObjectURL(blob), download: `${this.sweep}-trials.csv` });
    document.body.append(a);
    a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 0);
  }

  columns() {
    const c = this.cols;
    const dur = (i) => (c.started[i] && c.ended[i] ? c.ended[i] - c.started[i] : null);
    const defs = [
      { key: "number", label: "#", num: true, get: (i) => c.number[i] },
      { key: "state", label: "state", get: (i) => c.state[i] },
      ...(this.objectives.length > 1 && c.values
        ? [{ key: "rank", label: "rank", num: true, get: (i) => c.rank[i], title: "front rank among completed feasible trials (1: the Pareto front)" },
          ...this.objectives.map((o) => ({ key: `o:${o.name}`, label: o.name, num: true, get: (i) => c.values[o.name][i],
            title: `objective: ${o.goal}` }))]
        : [{ key: "value", label: "value", num: true, get: (i) => c.value[i] }]),
      ...this.paramNames.map((p) => ({ key: `p:${p}`, label: p, num: true, get: (i) => c.params[p][i] })),
      { key: "attempts", label: "attempts", num: true, get: (i) => c.attempts[i] },
      { key: "duration", label: "duration", num: true, get: dur, fmt: fmtDur },
      { key: "reason", label: "reason", get: (i) => c.reason[i] },
    ];
    return defs;
  }

  filtered() {
    const c = this.cols;
    if (!c) return [];
    const defs = this.columns();
    let rows = [];
    for (let i = 0; i < c.n; i++) {
      if (this.brush && !this.brush.has(i)) continue;
      if (this.state && c.state[i] !== this.state) continue;
      rows.push(i);
    }
    if (this.text) {
      // Each cell as the table shows it ("1e-4", "stopped by rule", "4.2 s") and as stored ("0.0001").
      const words = this.text.split(/\s+/);
      rows = rows.filter((i) => {
        const hay = defs.map((d) => {
          const v = d.get(i);
          if (v === null || v === undefined) return "";
          return `${String(v)} ${d.fmt ? d.fmt(v) : d.key === "state" ? v.replaceAll("_", " ") : fmtNum(v)}`;
        }).join(" ").toLowerCase();
        return words.every((w) => hay.includes(w));
      });
    }
    const d = defs.find((x) => x.key === this.sort.key) || defs[0];
    const dir = this.sort.dir;
    rows.sort((a, b) => {
      const va = d.get(a), vb = d.get(b);
      const na = va === null || va === undefined, nb = vb === null || vb === undefined;
      if (na || nb) return na === nb ? c.number[a] - c.number[b] : na ? 1 : -1;  // missing last
      const ta = typeof va === "number", tb = typeof vb === "number";   // numbers before text ("auto")
      if (ta !== tb) return ta ? -dir : dir;
      if (va < vb) return -dir;
      if (va > vb) return dir;
      return c.number[a] - c.number[b];
    });
    return rows;
  }

  render() {
    const c = this.cols;
    if (!c) return;
    const defs = this.columns();
    this.thead.replaceChildren(el("tr", {}, el("th", { title: "draw learning curves" }, "curve"),
      defs.map((d) => el("th", {
        class: `sortable ${d.num ? "num" : ""} ${this.sort.key === d.key ? (this.sort.dir > 0 ? "sorted-asc" : "sorted-desc") : ""}`,
        dataset: { key: d.key }, title: d.title || null,
        onclick: () => {
          this.sort = this.sort.key === d.key ? { key: d.key, dir: -this.sort.dir } : { key: d.key, dir: 1 };
          this.render();
        },
      }, d.label))));
    const rows = this.filtered();
    const pages = Math.max(1, Math.ceil(rows.length / PAGE));
    this.page = Math.min(this.page, pages - 1);
    const slice = rows.slice(this.page * PAGE, (this.page + 1) * PAGE);
    this.tbody.replaceChildren(...slice.map((i) => {
      const n = c.number[i];
      const box = el("input", { type: "checkbox", checked: this.selected.has(n), "aria-label": `curve of trial ${n}`,
        onchange: () => {
          if (box.checked) this.selected.add(n); else this.selected.delete(n);
          this.selectionTools();
          this.onSelectionChange([...this.selected], true);
        } });
      const front = c.rank && c.rank[i] === 1;
      const infeasible = c.feasible && c.feasible[i] === false;
      return el("tr", { dataset: { number: n }, class: [n === this.bestNumber || front ? "best" : "", infeasible ? "infeasible" : ""].join(" ").trim() },
        el("td", {}, box),
        defs.map((d) => {
          const v = d.get(i);
          if (d.key === "number") return el("td", { class: "num" }, el("a", { href: trialUrl(this.sweep, n), text: String(n) }));
          if (d.key === "state") return el("td", {}, badge(v), infeasible ? el("span", { class: "badge infeasible", title: c.reason[i] || "breaks a constraint", text: "infeasible" }) : null);
          if (d.key === "rank") return el("td", { class: "num", text: v === 1 ? "1 (front)" : fmtNum(v) });
          if (d.key === "reason") return el("td", { class: "reason", title: v || "", text: v || "" });
          return el("td", { class: d.num ? "num" : "", text: d.fmt ? d.fmt(v) : fmtNum(v) });
        }));
    }));
    this.count.textContent = c.total > c.n   // the first page, before every trial has arrived
      ? `the first ${fmtCount(c.n)} of ${fmtCount(c.total)} trials (loading the rest…)`
      : `${fmtCount(rows.length)} of ${fmtCount(c.n)} trials match`;
    this.selectionTools();
    this.pager.replaceChildren(
      el("button", { type: "button", disabled: this.page === 0, onclick: () => { this.page--; this.render(); } }, "‹ prev"),
      el("span", { text: `page ${fmtCount(this.page + 1)} / ${fmtCount(pages)}` }),
      el("button", { type: "button", disabled: this.page >= pages - 1, onclick: () => { this.page++; this.render(); } }, "next ›"));
  }
}
