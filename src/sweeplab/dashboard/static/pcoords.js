// Parallel coordinates on a 2D canvas (lines) under an SVG layer (axes, ticks, brushes). Plotly's parcoords
// needs WebGL: without a GPU (headless browsers, remote desktops, many VMs) it took 1.5 s for 20 lines and
// 9 s for 10,000; a canvas draws thousands of polylines in a few milliseconds. Dragging along an axis
// keeps the lines inside the dragged range (one range per axis); a click on an axis clears its range.
import { fmtNum, printable } from "./util.js";

const SVG = "http://www.w3.org/2000/svg";
const MARGIN = { l: 70, r: 60, t: 50, b: 25 };
const GREY = "#c9ccd3";
const FADED = "rgba(201, 204, 211, 0.35)";

function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== null) node.textContent = printable(text);
  return node;
}

// About five round tick values between lo and hi ("nice numbers": 1, 2 or 5 times a power of ten).
export function niceTicks(lo, hi, n = 5) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / n, mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

function hexToRgb(h) { return [1, 3, 5].map((k) => parseInt(h.slice(k, k + 2), 16)); }

// A colour from a Plotly-style colorscale ([[0, "#hex"], ..., [1, "#hex"]]) at fraction f.
export function colorAt(scale, f) {
  const x = Math.min(1, Math.max(0, f));
  let k = 1;
  while (k < scale.length - 1 && scale[k][0] < x) k++;
  const [f0, c0] = scale[k - 1], [f1, c1] = scale[k];
  const t = f1 > f0 ? (x - f0) / (f1 - f0) : 0;
  const a = hexToRgb(c0), b = hexToRgb(c1);
  return `rgb(${a.map((v, i) => Math.round(v + (b[i] - v) * t)).join(",")})`;
}

export class ParCoords {
  // `onBrush()` is called after a range changed (read them with ranges()).
  constructor(container, { onBrush }) {
    this.box = container;
    this.onBrush = onBrush;
    this.dims = [];
    this.ranges = new Map();      // label -> [lo, hi] in the dimension's value space
    this.canvas = document.createElement("canvas");
    this.svg = svg("svg", { class: "pc-axes" });
    this.observer = new ResizeObserver(() => this.schedule());
    container.pc = this;          // like Plotly's graphDiv.data: lets tests and the console read what is drawn
  }

  // dims: [{label, values, range: [lo, hi], tickvals?, ticktext?}]; line: {color: [...], scale, cmin, cmax}.
  // Keeps the brushed ranges of axes whose label is unchanged.
  draw(dims, line) {
    this.dims = dims;
    this.line = line;
    for (const label of [...this.ranges.keys()]) if (!dims.some((d) => d.label === label)) this.ranges.delete(label);
    if (!this.canvas.isConnected) {
      this.box.replaceChildren(this.canvas, this.svg);
      this.box.classList.add("pc");
      this.observer.observe(this.box);
    }
    this.layout();
  }

  schedule() {
    if (this.pending || !this.dims.length) return;
    this.pending = requestAnimationFrame(() => { this.pending = 0; this.layout(); });
  }

  clear() {
    this.ranges.clear();
    this.layout();
    this.onBrush();
  }

  // Geometry for the current size, then axes and lines.
  layout() {
    const w = this.box.clientWidth, h = this.box.clientHeight;
    if (!w || !h) return;
    this.w = w; this.h = h;
    const n = this.dims.length;
    const span = w - MARGIN.l - MARGIN.r;
    this.xs = this.dims.map((_, k) => MARGIN.l + (n > 1 ? (span * k) / (n - 1) : span / 2));
    this.drawAxes();
    this.drawLines();
    this.box.dataset.rendered = "1";
  }

  y(dim, v) {
    const [lo, hi] = dim.range;
    const f = hi > lo ? (v - lo) / (hi - lo) : 0.5;
    return MARGIN.t + (1 - Math.min(1, Math.max(0, f))) * (this.h - MARGIN.t - MARGIN.b);
  }

  value(dim, y) {
    const [lo, hi] = dim.range;
    const f = 1 - (y - MARGIN.t) / (this.h - MARGIN.t - MARGIN.b);
    return lo + Math.min(1, Math.max(0, f)) * (hi - lo);
  }

  inside(j) {
    for (let k = 0; k < this.dims.length; k++) {
      const r = this.ranges.get(this.dims[k].label);
      if (r && !(this.dims[k].values[j] >= r[0] && this.dims[k].values[j] <= r[1])) return false;
    }
    return true;
  }

  drawLines() {
    const dpr = window.devicePixelRatio || 1;
    const cv = this.canvas;
    cv.width = Math.round(this.w * dpr); cv.height = Math.round(this.h * dpr);
    cv.style.width = `${this.w}px`; cv.style.height = `${this.h}px`;
    const ctx = cv.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, this.w, this.h);
    const n = this.dims.length ? this.dims[0].values.length : 0;
    const line = this.line;
    const { color, scale, cmin, cmax } = line;
    // One path per colour bin (few canvas state changes); faded lines first, the best values drawn last.
    const BINS = 24;
    const bins = Array.from({ length: BINS + 1 }, () => []);
    const faded = [], none = [];
    const brushed = this.ranges.size > 0;
    for (let j = 0; j < n; j++) {
      if (brushed && !this.inside(j)) { faded.push(j); continue; }
      const f = cmax > cmin ? (color[j] - cmin) / (cmax - cmin) : 0.5;
      if (f < line.valued) none.push(j);
      else bins[Math.round(((Math.min(1, f) - line.valued) / (1 - line.valued)) * BINS)].push(j);
    }
    ctx.lineWidth = 1;
    const alpha = n > 2000 ? 0.35 : n > 300 ? 0.55 : 0.85;
    const stroke = (rows, style, a) => {
      if (!rows.length) return;
      ctx.globalAlpha = a;
      ctx.strokeStyle = style;
      ctx.beginPath();
      for (const j of rows) {
        this.dims.forEach((d, k) => {
          const yy = this.y(d, d.values[j]);
          if (k) ctx.lineTo(this.xs[k], yy); else ctx.moveTo(this.xs[k], yy);
        });
      }
      ctx.stroke();
    };
    stroke(faded, FADED, 1);
    // Lines without a value (colour below line.valued) first, then the best values on top: the highest
    // colour value when a higher value is better (line.bestHigh), the lowest otherwise.
    stroke(none, GREY, alpha);
    const order = bins.map((rows, b) => [rows, line.valued + ((1 - line.valued) * b) / BINS]);
    if (!line.bestHigh) order.reverse();
    for (const [rows, f] of order) stroke(rows, colorAt(scale, f), alpha);
    ctx.globalAlpha = 1;
    this.box.dataset.shown = String(n - faded.length);
  }

  drawAxes() {
    const top = MARGIN.t, bottom = this.h - MARGIN.b;
    this.svg.setAttribute("width", this.w); this.svg.setAttribute("height", this.h);
    this.svg.replaceChildren(...this.dims.map((d, k) => {
      const x = this.xs[k];
      const g = svg("g", { class: "y-axis", "data-label": d.label, transform: `translate(${x},0)` });
      g.append(svg("line", { x1: 0, x2: 0, y1: top, y2: bottom, class: "domain" }));
      const tv = d.tickvals || niceTicks(d.range[0], d.range[1]);
      const tt = d.ticktext || tv.map((v) => fmtNum(v));
      tv.forEach((v, i) => {
        if (v < Math.min(...d.range) - 1e-12 || v > Math.max(...d.range) + 1e-12) return;
        const yy = this.y(d, v);
        const t = svg("g", { class: "tick", transform: `translate(0,${yy})` });
        t.append(svg("line", { x1: -4, x2: 0, y1: 0, y2: 0 }), svg("text", { x: -7, y: 0, dy: "0.32em" }, tt[i]));
        g.append(t);
      });
      const title = svg("text", { class: "axis-title", x: 0, y: top - 16 }, d.label);
      g.append(title);
      const r = this.ranges.get(d.label);
      if (r) {
        const y0 = this.y(d, r[1]), y1 = this.y(d, r[0]);
        g.append(svg("rect", { class: "brush-range", x: -6, width: 12, y: y0, height: Math.max(2, y1 - y0) }));
      }
      const area = svg("rect", { class: "brush-area", x: -14, width: 28, y: top - 4, height: bottom - top + 8 });
      area.addEventListener("pointerdown", (e) => this.startBrush(e, d, g));
      g.append(area);
      return g;
    }));
  }

  startBrush(e, dim, g) {
    e.preventDefault();
    const area = e.currentTarget;
    area.setPointerCapture(e.pointerId);
    const ybox = this.svg.getBoundingClientRect().top;
    const y0 = e.clientY - ybox;
    let rect = null, y1 = y0;
    const move = (ev) => {
      y1 = ev.clientY - ybox;
      if (!rect) { rect = svg("rect", { class: "brush-range", x: -6, width: 12 }); g.insertBefore(rect, area); }
      rect.setAttribute("y", Math.min(y0, y1)); rect.setAttribute("height", Math.abs(y1 - y0));
    };
    const up = () => {
      area.removeEventListener("pointermove", move);
      area.removeEventListener("pointerup", up);
      if (Math.abs(y1 - y0) < 3) this.ranges.delete(dim.label);      // a click clears the axis
      else {
        const a = this.value(dim, y0), b = this.value(dim, y1);
        this.ranges.set(dim.label, [Math.min(a, b), Math.max(a, b)]);
      }
      this.layout();
      this.onBrush();
    };
    area.addEventListener("pointermove", move);
    area.addEventListener("pointerup", up);
  }
}
