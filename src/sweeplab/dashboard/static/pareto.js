// Cards of a sweep with several objectives (registered with cards.js, imported by sweep.js): the Pareto
// plot of two objectives (a pair selector with three or more) and the hypervolume of the front over trials.
//
// Pareto plot: completed feasible trials as points, the front (rank 1, what `sweeplab best` lists) large and
// joined by its staircase (two objectives), infeasible trials as orange crosses, trials that ended early with
// values faint. Dragging a rectangle filters the trials table like the parallel-coordinates brush does (the
// two filters combine); a double click clears it.
import { el, fmtNum, fmtCount, getJSON, apiUrl, trialUrl, plotConfig, baseLayout, isNum, plotText } from "./util.js";
import { registerCard } from "./cards.js";

export const FRONT_COLOR = "#d62728";
export const INFEASIBLE_COLOR = "#f08c00";
const DOMINATED_COLOR = "#3b5bdb";

const several = (view) => !!(view.cols && view.cols.values && (view.summary.sweep.objectives || []).length > 1);

// The front's staircase: the points sorted by x, with a corner between neighbours at the worse x and the
// worse y of the two (the edge of the region the front dominates, whatever the goals).
export function staircase(points, goals) {
  const worse = (a, b, g) => (g === "maximize" ? Math.min(a, b) : Math.max(a, b));
  const pts = points.slice().sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const xs = [], ys = [];
  pts.forEach((p, k) => {
    if (k) { xs.push(worse(pts[k - 1][0], p[0], goals[0])); ys.push(worse(pts[k - 1][1], p[1], goals[1])); }
    xs.push(p[0]); ys.push(p[1]);
  });
  return { xs, ys };
}

// The pair of objectives drawn (indices into sweep.objectives), with selectors when there are 3+.
function pairControls(plot, view, redraw) {
  const objs = view.summary.sweep.objectives;
  if (!view.paretoPair || view.paretoPair.some((k) => k >= objs.length)) view.paretoPair = [0, 1];
  const card = plot.parentElement;
  let bar = card.querySelector(".pareto-bar");
  if (!bar) {
    bar = el("div", { class: "legend-note pareto-bar" });
    card.insertBefore(bar, plot);
  }
  const note = el("span", { id: "pareto-note" });
  if (objs.length < 3) { bar.replaceChildren(note); return note; }
  const sel = (k) => el("select", { id: `pareto-${k ? "y" : "x"}`, title: `objective on the ${k ? "y" : "x"} axis`,
    onchange: (e) => { view.paretoPair[k] = Number(e.target.value); view.paretoBrush = null; view.applyBrush(); redraw(); } },
  objs.map((o, j) => el("option", { value: String(j), text: o.name, selected: j === view.paretoPair[k] })));
  bar.replaceChildren(sel(0), " vs ", sel(1), " ", note);
  return note;
}

function drawPareto(plot, view) {
  const c = view.cols, s = view.summary.sweep;
  const note = pairControls(plot, view, () => drawPareto(plot, view));
  const [a, b] = view.paretoPair;
  const ox = s.objectives[a], oy = s.objectives[b];
  const X = c.values[ox.name], Y = c.values[oy.name];
  const groups = { front: [], dominated: [], infeasible: [], early: [] };
  for (let i = 0; i < c.n; i++) {
    if (!isNum(X[i]) || !isNum(Y[i]) || c.state[i] === "queued" || c.state[i] === "running") continue;
    if (c.feasible && c.feasible[i] === false) groups.infeasible.push(i);
    else if (c.state[i] !== "completed") groups.early.push(i);
    else if (c.rank[i] === 1) groups.front.push(i);
    else groups.dominated.push(i);
  }
  const hover = `trial %{customdata[0]}<br>${plotText(ox.name)}=%{x}<br>${plotText(oy.name)}=%{y}<br>%{customdata[1]}<extra></extra>`;
  const trace = (rows, name, marker, extra = {}) => ({
    type: "scatter", mode: "markers", name: `${name} (${fmtCount(rows.length)})`, x: rows.map((i) => X[i]), y: rows.map((i) => Y[i]),
    customdata: rows.map((i) => [c.number[i], c.rank[i] ? `rank ${c.rank[i]}` : plotText(c.reason[i] || c.state[i])]),
    meta: { group: name }, marker, hovertemplate: hover, cliponaxis: false, ...extra,
  });
  const traces = [];
  if (groups.early.length) traces.push(trace(groups.early, "ended early", { color: "#9ca3af", size: 6, opacity: 0.35 }));
  if (groups.dominated.length) traces.push(trace(groups.dominated, "dominated", { color: DOMINATED_COLOR, size: 7, opacity: 0.55 }));
  if (groups.infeasible.length) traces.push(trace(groups.infeasible, "infeasible",
    { color: INFEASIBLE_COLOR, size: 9, symbol: "x-thin-open", line: { width: 2, color: INFEASIBLE_COLOR } }));
  if (s.objectives.length === 2 && groups.front.length > 1) {
    const { xs, ys } = staircase(groups.front.map((i) => [X[i], Y[i]]), [ox.goal, oy.goal]);
    traces.push({ type: "scatter", mode: "lines", name: "front edge", x: xs, y: ys, hoverinfo: "skip", meta: { group: "edge" },
      line: { color: FRONT_COLOR, width: 1.5 }, showlegend: false });
  }
  if (groups.front.length) traces.push(trace(groups.front, s.objectives.length === 2 ? "Pareto front" : "front (all objectives)",
    { color: FRONT_COLOR, size: 10, line: { width: 1.5, color: "#fff" } }));
  plot.dataset.front = groups.front.map((i) => c.number[i]).sort((p, q) => p - q).join(",");
  plot.dataset.infeasible = groups.infeasible.map((i) => c.number[i]).sort((p, q) => p - q).join(",");
  note.textContent = `${fmtCount(groups.front.length)} trial${groups.front.length === 1 ? "" : "s"} on the front`
    + " · drag a rectangle to filter the trials table, double-click to clear";
  if (!traces.length) {
    plot.replaceChildren(el("div", { class: "placeholder", text: "no trial has every objective yet" }));
    return Promise.resolve();
  }
  if (!plot.data) plot.replaceChildren();
  const arrow = (o) => `${plotText(o.name)} (${o.goal === "maximize" ? "max ↑" : "min ↓"})`;
  const narrow = plot.clientWidth > 0 && plot.clientWidth < 560;
  return Plotly.react(plot, traces, baseLayout({
    dragmode: "select", selectdirection: "any",
    // a redraw (live updates) keeps the rectangle that still filters the table; none once it is cleared
    selections: view.paretoBrush && plot.layout && plot.layout.selections ? plot.layout.selections : [],
    xaxis: { title: { text: arrow(ox) }, gridcolor: "#eef0f3", zeroline: false },
    yaxis: { title: { text: arrow(oy), font: { size: 11 } }, gridcolor: "#eef0f3", zeroline: false },
    ...(narrow ? { legend: { orientation: "h", x: 0, y: -0.25, yanchor: "top", font: { size: 10 } }, margin: { l: 55, r: 10, t: 10, b: 40 } }
      : { legend: { orientation: "h", y: 1.14, font: { size: 11 } }, margin: { l: 60, r: 15, t: 30, b: 45 } }),
  }), { ...plotConfig(), modeBarButtonsToRemove: ["lasso2d"] }).then(() => {
    if (!plot.dataset.bound) {
      plot.dataset.bound = "1";
      plot.on("plotly_selected", (ev) => brush(view, ev && ev.range));
      plot.on("plotly_deselect", () => brush(view, null));
      plot.on("plotly_click", (ev) => {
        const p = ev && ev.points && ev.points[0];
        if (p && p.customdata && ev.event && (ev.event.ctrlKey || ev.event.metaKey)) window.open(trialUrl(view.name, p.customdata[0]));
      });
    }
    plot.dataset.rendered = `${ox.name},${oy.name}`;
  });
}

// A dragged rectangle: the trials (any state) whose two objective values fall inside it.
function brush(view, range) {
  if (!range || !range.x || !range.y) { view.paretoBrush = null; view.applyBrush(); return; }
  const c = view.cols, objs = view.summary.sweep.objectives;
  const [ox, oy] = view.paretoPair.map((k) => objs[k].name);
  const [x0, x1] = [Math.min(...range.x), Math.max(...range.x)], [y0, y1] = [Math.min(...range.y), Math.max(...range.y)];
  const rows = new Set();
  for (let i = 0; i < c.n; i++) {
    const x = c.values[ox][i], y = c.values[oy][i];
    if (isNum(x) && isNum(y) && x >= x0 && x <= x1 && y >= y0 && y <= y1) rows.add(i);
  }
  const r4 = (v) => fmtNum(Number(v.toPrecision(4)));
  view.paretoBrush = { rows, desc: `${ox} ∈ [${r4(x0)}, ${r4(x1)}], ${oy} ∈ [${r4(y0)}, ${r4(y1)}]` };
  view.applyBrush();
}

async function drawHypervolume(plot, view) {
  const data = await getJSON(apiUrl(view.name, "/hypervolume"));
  const pts = data.trials.map((t, k) => [t, data.hypervolume[k]]).filter(([t, v]) => isNum(t) && isNum(v));
  if (!pts.length) {
    if (plot.data) Plotly.purge(plot);
    plot.replaceChildren(el("div", { class: "placeholder", text: "no hypervolume recorded yet (it needs a completed feasible trial)" }));
    plot.dataset.rendered = "0";
    return;
  }
  if (!plot.data) plot.replaceChildren();
  const ref = (data.reference || []).map((v) => fmtNum(Number(Number(v).toPrecision(4)))).join(", ");
  await Plotly.react(plot, [{
    type: "scatter", mode: "lines+markers", name: "hypervolume", x: pts.map((p) => p[0]), y: pts.map((p) => p[1]),
    line: { shape: "hv", color: "#111827", width: 2 }, marker: { size: 5, color: "#111827" },
    hovertemplate: "after %{x} completed trials<br>hypervolume %{y}<extra></extra>",
  }], baseLayout({
    xaxis: { title: { text: "completed trials" }, gridcolor: "#eef0f3", zeroline: false },
    yaxis: { title: { text: ref ? `hypervolume (reference ${ref})` : "hypervolume", font: { size: 11 } }, gridcolor: "#eef0f3", zeroline: false },
    margin: { l: 60, r: 15, t: 10, b: 45 }, showlegend: false,
  }), plotConfig());
  plot.dataset.rendered = String(pts.length);
}

registerCard({ id: "pareto", title: "Pareto front", applies: several, draw: drawPareto });
registerCard({ id: "hypervolume", title: "Hypervolume of the front", applies: several, draw: drawHypervolume });
