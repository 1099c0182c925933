"""The page ``replicast dashboard`` serves: one HTML document with its script and style, no build step.

It reads ``/api/state`` (engine/dashboard.py) every second and redraws: the query DAG with each
replica's node and state, a latency CCDF per application (SVG, log-scaled latency), the win share
of every stream replica at every port, and the installed queries' answers.  Elements carry
``data-`` attributes (replica, node, state, share …) so that a test reads what a person sees.
"""

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>replicast dashboard</title>
<style>
 body { font: 14px system-ui, sans-serif; margin: 1em 2em; color: #222; }
 h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
 #status { color: #666; } .bad { color: #b00; font-weight: bold; }
 #dag { display: flex; gap: 1em; align-items: flex-start; overflow-x: auto; }
 .column { display: flex; flex-direction: column; gap: .5em; }
 .lnode { border: 1px solid #999; border-radius: 6px; padding: .3em .6em; min-width: 9em; background: #fafafa; }
 .lnode .name { font-weight: bold; } .lnode .inputs { color: #777; font-size: .85em; }
 .replica { display: block; font-size: .9em; }
 .state-live { color: #070; } .state-joining, .state-rebuilding { color: #a60; }
 .state-unreachable, .state-absent { color: #b00; text-decoration: line-through; }
 #latency { display: flex; flex-wrap: wrap; gap: 1.5em; }
 svg { background: #fff; border: 1px solid #ddd; }
 table { border-collapse: collapse; } td, th { padding: .15em .6em; text-align: left; border-bottom: 1px solid #eee; }
 .bar { display: inline-block; height: .8em; background: #4a7fd4; vertical-align: middle; }
</style>
</head>
<body>
<h1>replicast dashboard</h1>
<div id="status">waiting for the cluster…</div>
<h2>Query DAG: replicas, their servers and states</h2>
<div id="dag"></div>
<h2>Latency CCDF per application (share of records at least this late)</h2>
<div id="latency"></div>
<h2 id="shares-title">Win share per stream replica</h2>
<table id="shares"><thead><tr><th>replica</th><th>port</th><th>upstream replica</th><th>wins</th><th>share</th></tr></thead>
<tbody></tbody></table>
<h2>Installed queries</h2>
<div id="queries"></div>
<script>
"use strict";
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const c of children) node.append(c);
  return node;
};
const ms = us => us === null || us === undefined ? "-" : (us / 1000).toFixed(1) + " ms";

function drawDag(dag) {
  const depth = {};
  for (const n of dag) depth[n.name] = n.inputs.length ? 1 + Math.max(...n.inputs.map(i => depth[i] ?? 0)) : 0;
  const columns = [];
  for (const n of dag) (columns[depth[n.name]] ??= []).push(n);
  const root = document.getElementById("dag");
  root.replaceChildren(...columns.map(col => el("div", {class: "column"}, ...col.map(n => {
    const box = el("div", {class: "lnode", "data-name": n.name, "data-kind": n.kind},
                   el("div", {class: "name"}, `${n.name} (${n.kind})`));
    if (n.inputs.length) box.append(el("div", {class: "inputs"}, "← " + n.inputs.join(", ")));
    for (const r of n.replicas)
      box.append(el("span", {class: "replica state-" + r.state, "data-replica": r.replica, "data-node": r.node,
                             "data-state": r.state}, `${r.replica} @ ${r.node}: ${r.state}`));
    return box;
  }))));
}

function drawCcdf(app, info) {
  const W = 360, H = 220, L = 46, B = 28;
  const pts = info.ccdf.filter(p => p[0] > 0 && p[1] > 0);
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H);
  svg.setAttribute("data-app", app); svg.setAttribute("data-count", info.count);
  svg.setAttribute("data-p99-us", info.p99_us ?? "");
  const add = (tag, attrs, text) => {
    const n = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
    if (text !== undefined) n.textContent = text;
    svg.append(n); return n;
  };
  add("text", {x: L, y: 14, "font-size": 12}, `${app}: n=${info.count}, p50 ${ms(info.p50_us)}, p99 ${ms(info.p99_us)}`);
  if (pts.length) {
    const lo = Math.log10(Math.min(...pts.map(p => p[0]))), hi = Math.log10(Math.max(...pts.map(p => p[0]))) + 1e-9;
    const x = v => L + (W - L - 10) * (hi > lo ? (Math.log10(v) - lo) / (hi - lo) : 0.5);
    const y = f => 20 + (H - B - 20) * (1 - f);
    let d = "";
    pts.forEach((p, i) => { d += (i ? "L" : "M") + x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1); });
    add("path", {d, fill: "none", stroke: "#4a7fd4", "stroke-width": 2, class: "ccdf"});
    add("line", {x1: L, y1: H - B, x2: W - 10, y2: H - B, stroke: "#999"});
    add("line", {x1: L, y1: 20, x2: L, y2: H - B, stroke: "#999"});
    add("text", {x: L, y: H - 8, "font-size": 11}, ms(10 ** lo));
    add("text", {x: W - 70, y: H - 8, "font-size": 11}, ms(10 ** hi));
    add("text", {x: 2, y: 26, "font-size": 11}, "1.0"); add("text", {x: 2, y: H - B, "font-size": 11}, "0");
  }
  return svg;
}

function drawShares(shares) {
  const body = document.querySelector("#shares tbody");
  body.replaceChildren(...shares.map(s => el("tr", {"data-replica": s.replica, "data-port": s.port,
      "data-upstream": s.upstream, "data-share": s.share},
    el("td", {}, s.replica), el("td", {}, String(s.port)), el("td", {}, s.upstream), el("td", {}, String(s.count)),
    el("td", {}, el("span", {class: "bar", style: `width:${Math.round(120 * s.share)}px`}),
       " " + (100 * s.share).toFixed(1) + " %"))));
}

function drawQueries(queries) {
  const root = document.getElementById("queries");
  if (!queries.length) { root.replaceChildren("none (replicast trace-query CLUSTER '…' installs one)"); return; }
  root.replaceChildren(...queries.map(q => {
    const labels = q.rows.length ? Object.keys(q.rows[0]) : [];
    return el("div", {class: "query", "data-query": q.id},
      el("p", {}, el("b", {}, q.id + ": "), el("code", {}, q.text)),
      el("table", {}, el("tr", {}, ...labels.map(l => el("th", {}, l))),
         ...q.rows.map(r => el("tr", {}, ...labels.map(l => el("td", {}, String(r[l] ?? "-")))))));
  }));
}

async function refresh() {
  try {
    const state = await (await fetch("/api/state", {cache: "no-store"})).json();
    if (state.ready) {
      drawDag(state.dag);
      document.getElementById("latency").replaceChildren(
        ...Object.entries(state.latency).sort().map(([app, info]) => drawCcdf(app, info)));
      drawShares(state.shares);
      document.getElementById("shares-title").textContent = state.shares_title;
      drawQueries(state.queries);
      const status = document.getElementById("status");
      status.replaceChildren(`${state.cluster} — updated ${new Date(state.at_us / 1000).toLocaleTimeString()}`);
      status.setAttribute("data-updated", state.at_us);
      if (state.unreachable.length)
        status.append(" ", el("span", {class: "bad"}, "not answering: " + state.unreachable.join(", ")));
    }
  } catch (e) {
    document.getElementById("status").textContent = "dashboard server not answering: " + e;
  }
  setTimeout(refresh, 1000);
}
refresh();
</script>
</body>
</html>
"""
