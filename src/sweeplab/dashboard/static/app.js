// Entry point: pick the view from the URL, render it, then keep it live by polling /api/changes.
import { getJSON, showError, loadPlotly, refreshAgo } from "./util.js";
import { SweepsView } from "./sweeps.js";
import { SweepView } from "./sweep.js";
import { TrialView } from "./trial.js";
import { CompareView } from "./compare.js";

const POLL_MS = 2000;

// A sweep's name from its path segment. A segment that is not valid percent-encoded UTF-8 (a URL cut inside
// "%C3%BC") made decodeURIComponent throw before the page started: it stayed "Loading…" with no word why.
function sweepName(segment) {
  try {
    return decodeURIComponent(segment);
  } catch (e) {
    throw new Error(`this address names no sweep: "${segment}" is not a valid percent-encoded name `
      + "(was the link cut short?); open the sweep from the list of sweeps");
  }
}

function route(path) {
  let m = path.match(/^\/sweeps\/([^/]+)\/trials\/(\d+)\/?$/);
  if (m) return { view: TrialView, sweep: sweepName(m[1]), trial: Number(m[2]) };
  m = path.match(/^\/sweeps\/([^/]+)\/compare\/?$/);
  if (m) {
    const raw = new URLSearchParams(location.search).get("trials") || "";
    const trials = [...new Set(raw.split(",").filter((x) => /^\d+$/.test(x.trim())).map(Number))];
    return { view: CompareView, sweep: sweepName(m[1]), trials };
  }
  m = path.match(/^\/sweeps\/([^/]+)\/?$/);
  if (m) return { view: SweepView, sweep: sweepName(m[1]) };
  return { view: SweepsView, sweep: null };
}

async function main() {
  const main = document.getElementById("main");
  const live = document.getElementById("live");
  let r;
  try {
    r = route(location.pathname);
  } catch (e) {
    showError(main, e);
    document.body.dataset.ready = "1";
    return;
  }
  const view = new r.view(main, r);
  let token = null;
  const changesUrl = () => `/api/changes?${new URLSearchParams(
    { ...(r.sweep ? { sweep: r.sweep } : {}), ...(token ? { token } : {}) })}`;
  // The change token is read before the view reads its data: a change made while the page loads (Plotly.js
  // alone takes a second or more) is then seen by the first poll, never taken as already shown.
  try { token = (await getJSON(changesUrl())).token; } catch (e) { /* the first poll sets it */ }
  let loaded = false;
  try {
    if (r.view === TrialView || r.view === CompareView) await loadPlotly();   // the sweep view loads it itself
    await view.load();
    loaded = true;
  } catch (e) {
    showError(main, e);
  }
  performance.mark("sweeplab:ready");
  document.body.dataset.ready = "1";

  let busy = false;
  async function poll() {
    if (busy || document.visibilityState === "hidden") return;
    busy = true;
    try {
      const c = await getJSON(changesUrl());
      // The token moves on only once the view has shown the change: a refresh that failed (the server
      // restarting, a dropped request) is tried again at the next poll instead of being lost.
      if (c.changed && token !== null && loaded) await view.refresh();
      token = c.token;
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
