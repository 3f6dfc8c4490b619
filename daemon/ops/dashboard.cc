#include "daemon/ops/dashboard.h"

namespace meshtrain::daemon {

namespace {

// Elements carry data-* attributes (node, step, points, updates) so a headless browser test can
// check what the page shows without reading pixels.
constexpr const char* kPage = R"HTML(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>meshtrain</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:16px;background:#f7f7f9;color:#222}
h1{font-size:20px;margin:0 0 4px} h2{font-size:15px;margin:0 0 8px}
.sub{color:#666;margin-bottom:12px}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:12px}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:10px}
table{border-collapse:collapse;width:100%} th,td{padding:3px 6px;text-align:left;border-bottom:1px solid #eee}
th{font-weight:600;color:#555} td.num{text-align:right;font-variant-numeric:tabular-nums}
.alive{color:#1a7f37}.suspect{color:#b58900}.failed{color:#c62828}.left{color:#777}
svg{width:100%;height:260px;background:#fff} .legend span{margin-right:10px;white-space:nowrap}
.err{color:#c62828}
</style></head>
<body data-updates="0">
<h1>meshtrain <span id="node"></span></h1>
<div class="sub" id="summary">connecting…</div>
<div class="card"><h2>Members</h2>
<table id="members"><thead><tr><th>name</th><th>status</th><th>step</th><th>training</th>
<th>accuracy</th><th>loss</th><th>uplink MB/s</th><th>downlink MB/s</th>
<th>plan out MB/s</th><th>plan in MB/s</th><th>tags</th></tr></thead><tbody></tbody></table></div>
<div class="grid" style="margin-top:12px">
<div class="card"><h2>Test accuracy over time</h2><svg id="acc-chart" data-points="0"></svg>
<div class="legend" id="legend"></div></div>
<div class="card"><h2>Test loss over time</h2><svg id="loss-chart" data-points="0"></svg></div>
<div class="card"><h2>Multicast plan <span id="plan-info"></span></h2><svg id="plan" data-edges="0"></svg></div>
<div class="card"><h2>Traffic of this agent</h2><svg id="traffic" data-points="0"></svg>
<div id="traffic-now"></div></div>
</div>
<script>
"use strict";
const NS = "http://www.w3.org/2000/svg";
const COLORS = ["#1f77b4","#ff7f0e","#2ca02c","#d62728","#9467bd","#8c564b","#e377c2","#7f7f7f","#bcbd22","#17becf"];
const color = {}; let nextColor = 0;
function colorOf(n){ if(!(n in color)) color[n] = COLORS[nextColor++ % COLORS.length]; return color[n]; }
function el(tag, attrs, text){ const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]); if (text !== undefined) e.textContent = text; return e; }
function fmt(v, d){ return (v === null || v === undefined || Number.isNaN(v)) ? "–" : Number(v).toFixed(d); }
function clear(svg){ while (svg.firstChild) svg.removeChild(svg.firstChild); }
function box(svg){ const r = svg.getBoundingClientRect(); return {w: Math.max(r.width, 300), h: Math.max(r.height, 200)}; }

// Lines of [t, value] per series on shared axes.
function lineChart(svg, series, yLabel, fixedY){
  clear(svg); const {w, h} = box(svg); const L = 48, R = 10, T = 10, B = 28;
  let t0 = Infinity, t1 = -Infinity, y0 = Infinity, y1 = -Infinity, total = 0;
  for (const s of series) for (const [t, v] of s.points) {
    t0 = Math.min(t0, t); t1 = Math.max(t1, t); y0 = Math.min(y0, v); y1 = Math.max(y1, v); }
  if (fixedY) { y0 = fixedY[0]; y1 = fixedY[1]; }
  if (!(t1 > t0)) { t1 = t0 + 1; } if (!(y1 > y0)) { y1 = y0 + 1; }
  if (!Number.isFinite(t0)) { t0 = 0; t1 = 1; }
  const X = t => L + (t - t0) / (t1 - t0) * (w - L - R), Y = v => h - B - (v - y0) / (y1 - y0) * (h - T - B);
  svg.appendChild(el("line", {x1: L, y1: h - B, x2: w - R, y2: h - B, stroke: "#999"}));
  svg.appendChild(el("line", {x1: L, y1: T, x2: L, y2: h - B, stroke: "#999"}));
  for (let i = 0; i <= 4; i++) { const v = y0 + (y1 - y0) * i / 4;
    svg.appendChild(el("text", {x: 4, y: Y(v) + 4, "font-size": 11, fill: "#555"}, v.toFixed(2))); }
  svg.appendChild(el("text", {x: L, y: h - 8, "font-size": 11, fill: "#555"}, t0.toFixed(0) + " s"));
  svg.appendChild(el("text", {x: w - R - 40, y: h - 8, "font-size": 11, fill: "#555"}, t1.toFixed(0) + " s"));
  for (const s of series) { if (!s.points.length) continue; total += s.points.length;
    const pts = s.points.map(([t, v]) => X(t).toFixed(1) + "," + Y(v).toFixed(1)).join(" ");
    svg.appendChild(el("polyline", {points: pts, fill: "none", stroke: colorOf(s.name), "stroke-width": 2,
      "data-node": s.name, "data-points": s.points.length, "data-last-t": s.points[s.points.length - 1][0]})); }
  svg.setAttribute("data-points", total);
}

function planGraph(svg, members, plan){
  clear(svg); const {w, h} = box(svg); const names = members.map(m => m.name).sort();
  const cx = w / 2, cy = h / 2, r = Math.min(w, h) / 2 - 40, pos = {};
  names.forEach((n, i) => { const a = 2 * Math.PI * i / Math.max(names.length, 1) - Math.PI / 2;
    pos[n] = [cx + r * Math.cos(a), cy + r * Math.sin(a)]; });
  const defs = el("defs", {}); const mk = el("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 20, refY: 5,
    markerWidth: 6, markerHeight: 6, orient: "auto-start-reverse"});
  mk.appendChild(el("path", {d: "M 0 0 L 10 5 L 0 10 z", fill: "#888"})); defs.appendChild(mk); svg.appendChild(defs);
  let edges = 0;
  for (const e of (plan.edges || [])) { const p = pos[e.from], q = pos[e.to]; if (!p || !q) continue; edges++;
    // Shift each direction to its side so a <-> b pairs do not overlap.
    const dx = q[0] - p[0], dy = q[1] - p[1], len = Math.hypot(dx, dy) || 1, ox = -dy / len * 5, oy = dx / len * 5;
    const a = [p[0] + ox, p[1] + oy], b = [q[0] + ox, q[1] + oy];
    svg.appendChild(el("line", {x1: a[0], y1: a[1], x2: b[0], y2: b[1], stroke: colorOf(e.from),
      "stroke-opacity": 0.6, "stroke-width": 1.5, "marker-end": "url(#arrow)", "data-from": e.from, "data-to": e.to}));
    if (e.mbps > 0) svg.appendChild(el("text", {x: (a[0] * 0.4 + b[0] * 0.6), y: (a[1] * 0.4 + b[1] * 0.6),
      "font-size": 10, fill: "#444"}, e.mbps.toFixed(1))); }
  for (const n of names) { const [x, y] = pos[n];
    const m = members.find(q => q.name === n) || {};
    svg.appendChild(el("circle", {cx: x, cy: y, r: 12, fill: colorOf(n), "fill-opacity": m.status === "alive" ? 0.9 : 0.25}));
    svg.appendChild(el("text", {x: x + 14, y: y - 10, "font-size": 11}, n)); }
  svg.setAttribute("data-edges", edges);
}

function render(s){
  const self = s.self || {};
  document.getElementById("node").textContent = self.name || "";
  document.getElementById("summary").textContent =
    `barrier ${self.barrier} · select ${self.select} · step ${self.step} · accuracy ${fmt(self.accuracy, 4)} · ` +
    `${self.peers_alive} live peers · up ${fmt(self.uptime_s, 0)} s`;
  const members = s.members || [], tbody = document.querySelector("#members tbody");
  const flows = {}; for (const m of members) flows[m.name] = {out: 0, in: 0};
  for (const e of (s.plan && s.plan.edges) || []) { if (flows[e.from]) flows[e.from].out += e.mbps || 0;
    if (flows[e.to]) flows[e.to].in += e.mbps || 0; }
  tbody.textContent = "";
  for (const m of members) { const tr = document.createElement("tr");
    tr.dataset.node = m.name; tr.dataset.step = m.step; tr.dataset.status = m.status;
    const tags = Object.entries(m.tags || {}).map(([k, v]) => k + "=" + v).join(",");
    const cells = [m.name, m.status, m.step, m.training ? "yes" : "no", fmt(m.accuracy, 4), fmt(m.loss, 4),
      fmt(m.uplink_mbps, 1), fmt(m.downlink_mbps, 1), fmt(flows[m.name].out, 1), fmt(flows[m.name].in, 1), tags];
    cells.forEach((c, i) => { const td = document.createElement("td"); td.textContent = c;
      if (i === 1) td.className = m.status; if (i >= 2 && i <= 9 && i !== 3) td.classList.add("num"); tr.appendChild(td); });
    tbody.appendChild(tr); }
  const hist = s.history || {}, names = Object.keys(hist).sort();
  lineChart(document.getElementById("acc-chart"), names.map(n => ({name: n, points: hist[n].map(p => [p[0], p[2]])})), "accuracy", [0, 1]);
  lineChart(document.getElementById("loss-chart"), names.map(n => ({name: n, points: hist[n].map(p => [p[0], p[3]])})), "loss");
  const legend = document.getElementById("legend"); legend.textContent = "";
  for (const n of names) { const sp = document.createElement("span"); sp.style.color = colorOf(n); sp.textContent = "● " + n; legend.appendChild(sp); }
  const plan = s.plan || {};
  document.getElementById("plan-info").textContent = plan.policy ? `(${plan.policy}` +
    (plan.rate_mbps ? `, bottleneck ${plan.rate_mbps.toFixed(1)} MB/s` : "") + ")" : "";
  planGraph(document.getElementById("plan"), members, plan);
  const tr = s.traffic || [];
  lineChart(document.getElementById("traffic"), [
    {name: "sent", points: tr.map(p => [p[0], p[1] / 1e6])}, {name: "received", points: tr.map(p => [p[0], p[2] / 1e6])}], "MB/s");
  const last = tr[tr.length - 1];
  document.getElementById("traffic-now").textContent = last ?
    `sent ${(last[1] / 1e6).toFixed(2)} MB/s · received ${(last[2] / 1e6).toFixed(2)} MB/s (this agent; blue sent, orange received)` : "";
  document.body.dataset.updates = Number(document.body.dataset.updates) + 1;
}

async function poll(){
  try { const r = await fetch("/api/state", {cache: "no-store"}); render(await r.json()); }
  catch (e) { document.getElementById("summary").innerHTML = '<span class="err">agent unreachable: ' + e + "</span>"; }
  setTimeout(poll, 1000);
}
colorOf("sent"); colorOf("received");
poll();
</script></body></html>
)HTML";

}  // namespace

const std::string& DashboardHtml() {
  static const std::string page(kPage);
  return page;
}

}  // namespace meshtrain::daemon
