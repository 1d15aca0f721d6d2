"""The page ``scrapy cluster dashboard`` serves: HTML, CSS and JS inline, nothing external.

It polls ``/api/status`` every second and fills the elements by id
(``#pages-per-second``, ``#acked-total``, ``#nodes-count``, ``#lag-total``,
``#failures``, ``#bloom-fill``, ``#proxies-alive``, ``#proxy-blame``, the ``#nodes-body``
table, and the proxy failures by the party at fault: ``#proxies-body`` per proxy and
``#hosts-body`` for the top hosts); the
throughput chart (inline SVG) keeps the last two minutes in the browser. Values
from Redis are set with ``textContent`` only, never parsed as HTML.
"""

from __future__ import annotations

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>crawl dashboard</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:0;background:#f4f5f7;color:#1d2330}
header{background:#1d2330;color:#fff;padding:12px 20px;display:flex;gap:20px;
 align-items:baseline}
header h1{font-size:18px;margin:0}
#conn.err{color:#ff8a80}#conn.ok{color:#9be59b}
main{padding:16px 20px;max-width:1240px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(180px,1fr));gap:12px}
.card{background:#fff;border-radius:6px;padding:10px 14px;box-shadow:0 1px 2px #0002}
.card .v{font-size:26px;font-weight:600;margin:4px 0}
.card .l,.card .d{color:#667;font-size:12px}
section{background:#fff;border-radius:6px;padding:10px 14px;margin-top:14px;
 box-shadow:0 1px 2px #0002}
h2{font-size:14px;margin:0 0 8px}
table{border-collapse:collapse;width:100%}
th,td{text-align:right;padding:4px 8px;border-bottom:1px solid #eee}
th:nth-child(-n+3),td:nth-child(-n+3){text-align:left}
.h-ok{color:#1b7f2a}.h-idle{color:#8a6d00}.h-lost{color:#c62828;font-weight:600}
svg{width:100%;height:180px;background:#fbfcfd}
.faults th,.faults td{text-align:right}
.faults th:first-child,.faults td:first-child,#proxies-table td:nth-child(2),
#proxies-table th:nth-child(2){text-align:left}
.split{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:16px}
section .d{color:#667;font-size:12px;margin-top:4px}
.s-alive{color:#1b7f2a}.s-probation{color:#8a6d00}.s-dead{color:#c62828;font-weight:600}
</style></head>
<body>
<header><h1>crawl <span id="crawl-id">?</span></h1>
<span id="conn">connecting</span><span id="updated"></span></header>
<main>
<div class="cards">
 <div class="card"><div class="l">pages/s (acked)</div>
  <div class="v" id="pages-per-second">-</div><div class="d">sum over live nodes</div></div>
 <div class="card"><div class="l">pages acked</div>
  <div class="v" id="acked-total">-</div><div class="d" id="pages-detail"></div></div>
 <div class="card"><div class="l">nodes</div>
  <div class="v" id="nodes-count">-</div><div class="d" id="nodes-health"></div></div>
 <div class="card"><div class="l">lag (records)</div>
  <div class="v" id="lag-total">-</div><div class="d" id="work-detail"></div></div>
 <div class="card"><div class="l">failures</div>
  <div class="v" id="failures">-</div><div class="d" id="failures-detail"></div></div>
 <div class="card"><div class="l">Bloom fill</div>
  <div class="v" id="bloom-fill">-</div><div class="d" id="bloom-detail"></div></div>
 <div class="card"><div class="l">proxies alive</div>
  <div class="v" id="proxies-alive">-</div><div class="d" id="proxies-detail"></div></div>
 <div class="card"><div class="l">proxy / origin faults</div>
  <div class="v" id="proxy-blame">-</div><div class="d" id="proxy-blame-detail"></div></div>
</div>
<section><h2>throughput, pages/s (last 2 minutes; max <span id="chart-max">0</span>)</h2>
<svg id="chart" viewBox="0 0 1200 180" preserveAspectRatio="none">
<polyline id="chart-line" fill="none" stroke="#2f6fde" stroke-width="2" points=""/>
</svg></section>
<section><h2>nodes</h2><table><thead><tr><th>id</th><th>host</th><th>health</th>
<th>pid</th><th>beat</th><th>lag</th><th>partitions</th><th>acked</th><th>pages/s</th>
</tr></thead><tbody id="nodes-body"></tbody></table></section>
<section><h2>proxy failures by the party at fault (every worker, since the crawl began)</h2>
<div class="split"><div><table class="faults" id="proxies-table"><thead><tr><th>proxy</th>
<th>state</th><th>proxy faults</th><th>origin faults</th></tr></thead>
<tbody id="proxies-body"></tbody></table><div class="d" id="proxies-more"></div></div>
<div><table class="faults" id="hosts-table"><thead><tr><th>host</th><th>proxy faults</th>
<th>origin faults</th></tr></thead><tbody id="hosts-body"></tbody></table>
<div class="d" id="hosts-note"></div></div></div></section>
<section><h2>crawl ledger (every worker, since the crawl began)</h2><div id="ledger">-</div>
<div class="d" id="ledger-balance">pending and unaccounted records: scrapy cluster report</div>
</section>
<section><h2>alerts</h2><div id="alerts">-</div>
<div id="finished" class="d"></div></section>
</main>
<script>
"use strict";
const WINDOW = 120, PAGE_PROXIES = 20, history = [];
let apiErrors = 0;
const $ = (id) => document.getElementById(id);
const put = (id, v) => { $(id).textContent = (v === null || v === undefined) ? "-" : v; };

function drawChart() {
  const max = Math.max(1, ...history.map((p) => p.rate));
  const now = Date.now() / 1000;
  const pts = history.map((p) => {
    const x = 1200 - (now - p.t) * 1200 / WINDOW;
    return x.toFixed(1) + "," + (175 - p.rate * 165 / max).toFixed(1);
  });
  $("chart-line").setAttribute("points", pts.join(" "));
  put("chart-max", max.toFixed(1));
}

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = (text === null || text === undefined) ? "-" : text;
  if (cls) td.className = cls;
  row.appendChild(td);
}

function showNodes(nodes) {
  const body = $("nodes-body");
  body.replaceChildren();
  for (const n of nodes) {
    const tr = document.createElement("tr");
    cell(tr, n.id); cell(tr, n.host); cell(tr, n.health, "h-" + n.health);
    cell(tr, n.pid); cell(tr, n.age + "s"); cell(tr, n.lag); cell(tr, n.partitions);
    cell(tr, n.acked); cell(tr, n.rate);
    body.appendChild(tr);
  }
}

function rows(id, list, fill) {
  const body = $(id);
  body.replaceChildren();
  for (const item of list) {
    const tr = document.createElement("tr");
    fill(tr, item);
    body.appendChild(tr);
  }
}

function showProxyFailures(f) {
  put("proxy-blame", f ? f.totals.proxy_faults + " / " + f.totals.origin_faults : "none");
  put("proxy-blame-detail", f ? "blamed on proxies / on origin sites; " + f.hosts +
      " hosts" : "no proxy in this crawl");
  const proxies = f ? f.by_proxy : [], hosts = f ? f.by_host : [];
  rows("proxies-body", proxies.slice(0, PAGE_PROXIES), (tr, p) => {
    cell(tr, p.id); cell(tr, p.state, "s-" + p.state);
    cell(tr, p.proxy_faults); cell(tr, p.origin_faults);
  });
  put("proxies-more", proxies.length > PAGE_PROXIES ? (proxies.length - PAGE_PROXIES) +
      " more proxies in /api/status" : "");
  rows("hosts-body", hosts, (tr, h) => {
    cell(tr, h.host); cell(tr, h.proxy_faults); cell(tr, h.origin_faults);
  });
  put("hosts-note", f ? "the " + hosts.length + " of " + f.hosts +
      " hosts with the most failures" : "no proxy in this crawl");
}

function showFailures(s) {
  const t = s.totals, dead = s.proxies ? s.proxies.dead : 0;
  const alerts = (s.alerts && s.alerts.active) ? s.alerts.active.length : 0;
  put("failures", t.lost + s.unreadable.length + dead + alerts);
  put("failures-detail", t.lost + " lost nodes, " + s.unreadable.length +
      " bad heartbeats, " + dead + " dead proxies, " + alerts + " alerts, " +
      apiErrors + " API errors");
}

function showStores(s) {
  const b = s.dedup, p = s.proxies;
  put("bloom-fill", b ? (100 * b.fill).toFixed(2) + "%" : "none");
  put("bloom-detail", b ? b.items + " of " + b.capacity + " fingerprints, " +
      b.slices + " slice(s)" : "no Bloom filter in Redis yet");
  put("proxies-alive", p ? p.alive + "/" + p.members : "none");
  put("proxies-detail", p ? p.probation + " on probation, " + p.dead + " dead" :
      "no proxy in this crawl");
}

function showLedger(l) {
  if (!l) { put("ledger", "-"); return; }
  const dropped = Object.entries(l.dropped).map(([k, v]) => k + " " + v).join(", ");
  put("ledger", l.fetched + " fetched, " + l.failed + " failed, dropped: " +
      (dropped || "none") + ", " + l.dead + " dead, " + l.seeds + " seed records, " +
      l.items_stored + " items stored, " + l.items_dropped + " items rejected, " +
      l.redelivered + " redelivered");
  const b = l.balance || {};
  if (b.pending !== undefined) put("ledger-balance", "pending " + b.pending + ", unaccounted " +
      b.unaccounted + ", Kafka lag " + b.lag + " (a worker's read, every 30 s)");
}

function finishedLine(f) {  // the finished crawl's summary, as scrapy cluster status gives it
  const ran = f.duration_s === null ? "" : ", ran " + Math.round(f.duration_s) + " s";
  return "finished " + new Date(f.closed * 1000).toLocaleString() + " (" + f.reason + ")" +
      ran + ": " + f.pages + " pages fetched, " + f.failed + " failed, " + f.dropped +
      " dropped, " + f.dead + " dead-lettered, " + f.stored + " stored; " +
      (f.balanced ? "every request accounted for" : "NOT balanced");
}

function show(s) {
  const t = s.totals;
  put("crawl-id", s.crawl_id);
  put("pages-per-second", t.rate === null ? "n/a" : t.rate.toFixed(1));
  put("acked-total", t.acked);
  put("pages-detail", s.nodes.reduce((a, n) => a + (n.pages || 0), 0) + " responses, " +
      s.nodes.reduce((a, n) => a + (n.items || 0), 0) + " items");
  put("nodes-count", t.nodes);
  put("nodes-health", t.ok + " ok, " + t.idle + " idle, " + t.lost + " lost");
  put("lag-total", t.lag);
  put("work-detail", t.partitions + " partitions, " + t.leases + " leases, " +
      t.buffered + " buffered, " + t.delayed + " delayed");
  showFailures(s); showStores(s); showNodes(s.nodes);
  showProxyFailures(s.proxy_failures || null);
  showLedger(s.ledger || null);
  const active = (s.alerts && s.alerts.active) || [];
  const how = (s.alerts && s.alerts.status) || "-";
  put("alerts", active.length ? active.map((a) => JSON.stringify(a)).join("; ")
      : how === "ok" ? "ok: none active" : how);
  put("finished", s.finished ? finishedLine(s.finished) : s.finished_at ? "marked drained at " +
      new Date(s.finished_at * 1000).toLocaleTimeString() : "");
  const at = Date.now() / 1000;  // the browser's clock: the history is the browser's
  history.push({t: at, rate: t.rate || 0});
  while (history.length && history[0].t < at - WINDOW) history.shift();
  drawChart();
}

function status(ok, text) {
  $("conn").className = ok ? "ok" : "err";
  put("conn", text);
  put("updated", "updated " + new Date().toLocaleTimeString());
}

async function poll() {
  try {
    const r = await fetch("/api/status", {cache: "no-store"});
    const s = await r.json();
    if (!r.ok) throw new Error(s.error || ("HTTP " + r.status));
    show(s);
    status(true, "live");
  } catch (e) {
    apiErrors += 1;
    status(false, String(e.message || e));
  }
}

poll();
setInterval(poll, 1000);
</script>
</body></html>
"""
