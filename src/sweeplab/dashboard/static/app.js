// Entry point: pick the view from the URL, render it, then keep it live by polling /api/changes.
import { getJSON, showError, loadPlotly, refreshAgo } from "./util.js";
import { SweepsView } from "./sweeps.js";
import { SweepView } from "./sweep.js";
import { TrialView } from "./trial.js";
import { CompareView } from "./compare.js";

const POLL_MS = 2000;

function route(path) {
  let m = path.match(/^\/sweeps\/([^/]+)\/trials\/(\d+)\/?$/);
  if (m) return { view: TrialView, sweep: decodeURIComponent(m[1]), trial: Number(m[2]) };
  m = path.match(/^\/sweeps\/([^/]+)\/compare\/?$/);
  if (m) {
    const raw = new URLSearchParams(location.search).get("trials") || "";
    const trials = [...new Set(raw.split(",").filter((x) => /^\d+$/.test(x.trim())).map(Number))];
    return { view: CompareView, sweep: decodeURIComponent(m[1]), trials };
  }
  m = path.match(/^\/sweeps\/([^/]+)\/?$/);
  if (m) return { view: SweepView, sweep: decodeURIComponent(m[1]) };
  return { view: SweepsView, sweep: null };
}

async function main() {
  const main = document.getElementById("main");
  const live = document.getElementById("live");
  const r = route(location.pathname);
  const view = new r.view(main, r);
  try {
    if (r.view === TrialView || r.view === CompareView) await loadPlotly();   // the sweep view loads it itself
    await view.load();
  } catch (e) {
    showError(main, e);
  }
  performance.mark("sweeplab:ready");
  document.body.dataset.ready = "1";

  let token = null;
  let busy = false;
  const changesUrl = () => `/api/changes?${new URLSearchParams(
    { ...(r.sweep ? { sweep: r.sweep } : {}), ...(token ? { token } : {}) })}`;
  async function poll() {
    if (busy || document.visibilityState === "hidden") return;
    busy = true;
    try {
      const c = await getJSON(changesUrl());
      const first = token === null;
      token = c.token;
      if (c.changed && !first) await view.refresh();
      const running = view.isLive ? view.isLive() : false;
      live.className = `live ${running ? "on" : "idle"}`;
      live.textContent = running ? "live" : "up to date";
    } catch (e) {
      live.className = "live off";
      live.textContent = "server unreachable";
    } finally {
      busy = false;
    }
  }
  await poll();
  setInterval(poll, POLL_MS);
  setInterval(() => refreshAgo(), 15_000);
}

main();
