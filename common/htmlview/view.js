// The interactive IR view (common/htmlview). Every string of the IR is shown with textContent and never
// becomes markup or code; only what is expanded is in the document.
// With a second IR (ir2torch view A --compare B) the page holds two viewers side by side, synced through the
// comparison's counterparts (common/htmlview/compare.py), each marking what was added, removed or changed.
(function () {
  "use strict";
  function json(id) { var e = document.getElementById(id); return e ? JSON.parse(e.textContent) : null; }
  var CMP = json("ir-cmp"), syncing = false;
  function sync(fn) {  // run fn on the other side, once (its own sync calls do nothing)
    if (syncing) return;
    syncing = true;
    try { fn(); } finally { syncing = false; }
  }

  function viewer(D, pre, side) {
  var peer = null, drawn = null;  // drawn: the graph on show, as path + NUL + variant
  // IMPLS is looked up by names a link's fragment gives (#node=<path>:<name>): no prototype, so "__proto__" or
  // "constructor" name nothing
  var N = D.nodes, IMPLS = Object.assign(Object.create(null), D.impls), SVG = "http://www.w3.org/2000/svg";
  // an instance of a shared body carries no graphs ("sb": [home, instances]): it shows its body's, the modules
  // its calls name moved from the home's path to its own (common/bodies.py)
  Object.keys(IMPLS).forEach(function (key) {
    var d = IMPLS[key], home = d.sb && d.sb[0];
    if (!home || d.g || !IMPLS[home] || !IMPLS[home].g) return;
    d.g = IMPLS[home].g.map(function (g) {
      return {e: g.e, h: g.h, n: g.n.map(function (r) {
        var c = r[5];
        if (c && c.slice(0, home.length + 1) === home + ".") c = key + c.slice(home.length);
        return [r[0], r[1], r[2], r[3], r[4], c].concat(r.length > 6 ? [r[6]] : []);  // and its binding
      })};
    });
    (d.ro || []).forEach(function (o) { d.g[o[0]].n[o[1]] = o[2]; });  // rows that read otherwise here
  });
  var byPath = new Map(), parent = new Int32Array(N.length).fill(-1), runOf = new Map(), depth = new Int32Array(N.length);
  N.forEach(function (n, i) { byPath.set(n.p, i); });
  N.forEach(function (n, i) {
    n.ch.forEach(function (c) {
      if (typeof c === "number") { parent[c] = i; depth[c] = depth[i] + 1; return; }
      c[1].forEach(function (m) { parent[m] = i; depth[m] = depth[i] + 1; runOf.set(m, c); });
    });
  });
  var open = new Set(), rows = new Map(), runItems = new Map(), selected = -1, selRow = null, graphSel = null;
  // in a comparison, what differs in each module's subtree: its own mark, else "changed" when anything under it is
  // marked; a folded run, a closed module and a stack of calls in a graph say so with the tree (children come after
  // their parent in N, so one backward pass sees every descendant first)
  var inner = null;
  if (CMP) {
    inner = new Array(N.length).fill("");
    for (var q = N.length - 1; q >= 0; q--) {
      var own = CMP.m[side][N[q].p];
      if (own) inner[q] = own;
      if (inner[q] && parent[q] >= 0 && !inner[parent[q]]) inner[parent[q]] = "changed";
    }
  }
  function runMark(run) {  // [status, blocks marked] of a run of identical blocks in a comparison; null: the same
    if (!inner) return null;
    var marked = run[1].filter(function (m) { return inner[m]; });
    if (!marked.length) return null;
    var st = inner[marked[0]], same = marked.every(function (m) { return inner[m] === st; });
    return [marked.length === run[1].length && same ? st : "changed", marked.length];
  }
  function runMarkText(run, mk) { return mk[0] + " " + mk[1] + "/" + run[1].length; }
  var $ = function (id) { return document.getElementById(pre + id); };

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function sel(tag, attrs, text) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs) e.setAttribute(k, String(attrs[k]));
    if (text !== undefined) e.textContent = String(text);
    return e;
  }

  // -- the overlay (a number per module or node; common/htmlview/overlay.py) -------------------------------------
  var OV = D.ov || null;
  function ovColour(v) {  // low values pale yellow, high ones red
    if (v === null || v === undefined) return "#ddd";
    var t = OV.hi > OV.lo ? (v - OV.lo) / (OV.hi - OV.lo) : 1;
    return "hsl(" + Math.round(55 - 55 * t) + ", 95%, " + Math.round(86 - 30 * t) + "%)";
  }
  function ovBadge(entry) {
    var b = el("span", "ov", entry[1]);
    b.style.background = ovColour(entry[0]);
    b.dataset.v = entry[1];
    return b;
  }

  // -- the tree -------------------------------------------------------------------------------------------------
  function hasKids(i) { return N[i].ch.length > 0; }
  function nodeItem(i) {
    var n = N[i], item = el("div", "item" + (n.k === "alias" ? " alias" : "")), row = el("div", "row");
    row.dataset.i = String(i);
    row.appendChild(el("span", "tog", hasKids(i) ? (open.has(i) ? "▾" : "▸") : ""));
    row.appendChild(el("span", "name", n.n));
    var st = CMP && CMP.m[side][n.p];
    if (st) { row.classList.add("d-" + st); row.appendChild(el("span", "dm", st)); }
    else if (inner && inner[i]) {  // nothing of its own: something under it differs
      var mi = el("span", "dmi", "\u25cf"); mi.title = "something inside differs"; row.appendChild(mi);
    }
    if (n.c) row.appendChild(el("span", "cls", n.c));
    if (n.x) row.appendChild(el("span", "x", n.x));
    if (OV && OV.m[n.p]) row.appendChild(ovBadge(OV.m[n.p]));
    row.addEventListener("click", function (ev) {
      if (ev.target.classList.contains("tog") || ev.detail === 2) toggle(i); else select(i);
    });
    item.appendChild(row);
    rows.set(i, row);
    if (i === selected) { row.classList.add("sel"); selRow = row; }
    if (open.has(i)) item.appendChild(kidsOf(i));
    return item;
  }
  function runItem(run) {
    var first = run[1][0], key = "r" + first, item = el("div", "item run"), row = el("div", "row");
    row.dataset.run = String(first);
    row.appendChild(el("span", "tog", open.has(key) ? "▾" : "▸"));
    row.appendChild(el("span", "name", run[0]));
    var mk = runMark(run);
    if (mk) { row.classList.add("d-" + mk[0]); row.appendChild(el("span", "dm", runMarkText(run, mk))); }
    if (N[first].c) row.appendChild(el("span", "cls", N[first].c));
    if (N[first].x) row.appendChild(el("span", "x", N[first].x + " each"));
    row.addEventListener("click", function (ev) {
      if (ev.target.classList.contains("tog") || ev.detail === 2) toggleRun(run); else showRun(run);
    });
    item.appendChild(row);
    runItems.set(first, item);
    if (open.has(key)) item.appendChild(membersOf(run));
    return item;
  }
  function kidsOf(i) {
    var box = el("div", "kids");
    N[i].ch.forEach(function (c) { box.appendChild(typeof c === "number" ? nodeItem(c) : runItem(c)); });
    return box;
  }
  function membersOf(run) {
    var box = el("div", "kids");
    run[1].forEach(function (m) { box.appendChild(nodeItem(m)); });
    return box;
  }
  function setOpen(item, isOpen, build) {
    var kids = item.querySelector(":scope > .kids");
    if (kids) kids.remove();
    if (isOpen) item.appendChild(build());
    item.querySelector(":scope > .row > .tog").textContent = isOpen ? "▾" : "▸";
  }
  function toggle(i) { if (hasKids(i)) expand(i, !open.has(i)); }
  function expand(i, on) {
    if (on) open.add(i); else open.delete(i);
    var row = rows.get(i);
    if (row && row.isConnected) setOpen(row.parentNode, on, function () { return kidsOf(i); });
  }
  function toggleRun(run) { expandRun(run, !open.has("r" + run[1][0])); }
  function expandRun(run, on) {
    var key = "r" + run[1][0];
    if (on) open.add(key); else open.delete(key);
    var item = runItems.get(run[1][0]);
    if (item && item.isConnected) setOpen(item, on, function () { return membersOf(run); });
  }
  function reveal(i) {  // open every ancestor (and the run holding it) so its row is in the document
    var chain = [];
    for (var a = i; a >= 0; a = parent[a]) chain.unshift(a);
    for (var k = 0; k + 1 < chain.length; k++) {
      if (!open.has(chain[k])) expand(chain[k], true);
      var run = runOf.get(chain[k + 1]);
      if (run && !open.has("r" + run[1][0])) expandRun(run, true);
    }
    var row = rows.get(i);
    if (row && row.isConnected) row.scrollIntoView({ block: "nearest" });
  }

  // -- the side panel -------------------------------------------------------------------------------------------
  function table(title, rowsData, empty) {
    var box = el("div");
    box.appendChild(el("h3", null, title));
    if (!rowsData.length) { box.appendChild(el("div", "empty", empty)); return box; }
    var t = el("table");
    rowsData.forEach(function (r) {
      var tr = el("tr");
      r.forEach(function (cell, j) { tr.appendChild(el("td", j ? "v" : null, cell)); });
      t.appendChild(tr);
    });
    box.appendChild(t);
    return box;
  }
  function button(text, fn) { var b = el("button", "btn", text); b.type = "button"; b.addEventListener("click", fn); return b; }
  function select(i) {
    if (selRow) selRow.classList.remove("sel");
    selected = i;
    selRow = rows.get(i) || null;
    if (selRow) selRow.classList.add("sel");
    var n = N[i], d = IMPLS[n.p], panel = $("panel");
    if (peer) sync(function () { peer.selectPath(counterpart(n.p), n.p); });
    panel.replaceChildren();
    panel.appendChild(el("h2", null, n.p));
    var st = CMP && CMP.m[side][n.p], other = CMP && counterpart(n.p);
    if (CMP) panel.appendChild(el("div", "sub dm-" + (st || "same"), (st || "the same") + (other ? other === n.p ?
      " on both sides" : " · stands for " + other + " on the other side" : " · nothing stands for it on the other side")));
    panel.appendChild(el("div", "sub", (n.t ? n.t + " · " : "") + (d && d.cls ? d.cls : n.c)));
    if (n.k === "alias") { panel.appendChild(el("div", "sub", "another path of " + n.c.replace(/^= /, ""))); return; }
    if (!d) return;
    var btns = el("div", "btns");
    d.g.forEach(function (g, v) {
      btns.appendChild(button(v ? "graph variant " + v : "show graph (" + g.n.length + " nodes)", function () { drawGraph(n.p, v); }));
    });
    if (parent[i] >= 0) btns.appendChild(button("parent", function () { reveal(parent[i]); select(parent[i]); }));
    panel.appendChild(btns);
    var node = el("div"); node.id = pre + "nodeinfo"; panel.appendChild(node);  // a clicked node: above the records
    if (d.sb) panel.appendChild(el("div", "sub", "one shared body with " + (d.sb[1] - 1) + " other instance" + (d.sb[1] === 2 ? "" : "s") + (d.sb[0] === n.p ? "" : " (stored as " + d.sb[0] + ")")));
    panel.appendChild(table("Attributes", d.a, "none"));
    panel.appendChild(table("State", d.s, "no parameters or buffers of its own"));
    if (d.al.length) panel.appendChild(table("Aliases", d.al.map(function (a) { return [a]; }), ""));
    var raw = { in_spec: 1, out_spec: 1, parameters: 1 };  // calling-convention records: long JSON, folded, last
    panel.appendChild(table("Meta", d.m.filter(function (r) { return !raw[r[0]]; }), "none"));
    var specs = d.m.filter(function (r) { return raw[r[0]]; });
    if (specs.length) {
      var fold = el("details", "raw");
      fold.appendChild(el("summary", null, "calling convention (" + specs.map(function (r) { return r[0]; }).join(", ") + ")"));
      fold.appendChild(table("Raw records", specs, ""));
      panel.appendChild(fold);
    }
  }
  function showRun(run, stack) {  // stack: the box of the run's calls in the graph on show, when one was clicked
    var panel = $("panel"), m = run[1], first = N[m[0]], mk = runMark(run);
    panel.replaceChildren();
    panel.appendChild(el("h2", null, run[0]));
    if (CMP) panel.appendChild(el("div", "sub dm-" + (mk ? mk[0] : "same"), mk ? runMarkText(run, mk) : "the same on both sides"));
    panel.appendChild(el("div", "sub", m.length + " identical blocks of " + (first.c || first.t) +
      ": same type, attributes, graph and state records (paths aside)"));
    var btns = el("div", "btns");
    btns.appendChild(button(open.has("r" + m[0]) ? "fold" : "list the blocks", function () { toggleRun(run); showRun(run, stack); }));
    btns.appendChild(button("first block", function () { reveal(m[0]); select(m[0]); }));
    if (stack) {
      btns.appendChild(button("draw the " + stack.calls.length + " calls one by one", stack.unfold));
      if (IMPLS[first.p] && IMPLS[first.p].g && IMPLS[first.p].g.length) btns.appendChild(button("graph of one block", function () {
        reveal(m[0]); select(m[0]); drawGraph(first.p, 0);
      }));
    }
    panel.appendChild(btns);
    if (stack) panel.appendChild(el("div", "sub", "in the graph: one box for " + stack.calls.length + " calls" +
      (stack.between ? " and the " + stack.between + " nodes between them" : "") + "; reads " + stack.ins + " values, " +
      "gives " + stack.outs));
    panel.appendChild(table("Blocks", m.slice(0, 200).map(function (j) { return [N[j].p]; }), ""));
  }
  function showNode(path, g, k, inPlace) {
    var box = $("nodeinfo");
    if (!box) { select(byPath.get(path)); box = $("nodeinfo"); }
    var r = g.n[k], ins = [], v = IMPLS[path] ? IMPLS[path].g.indexOf(g) : 0;
    if (peer) sync(function () { peer.nodeAt(counterpart(path), v, r[0]); });
    g.e.forEach(function (e) { if (e[1] === k) ins.push([g.n[e[0]][0], e[2] || "?"]); });
    box.replaceChildren();
    var ns = CMP && CMP.n[side][path], nst = ns && ns[v + ":" + r[0]];
    box.appendChild(table("Node " + r[0], [["kind", r[1]], ["op", r[2]], ["output", r[3] || "-"], ["arguments", r[4] || "-"]]
      .concat(CMP ? [["compared", nst || "the same"]] : []), ""));
    if (ins.length) box.appendChild(table("Inputs", ins, ""));
    if (r[5]) box.appendChild(button("open " + r[5], function () { var j = byPath.get(r[5]); reveal(j); select(j); drawGraph(r[5], 0); }));
    if (inPlace && expandable(r)) box.appendChild(button("draw " + r[5] + " in place", inPlace));
    box.scrollIntoView({ block: "nearest" });
  }

  // -- one graph, layered top to bottom -------------------------------------------------------------------------
  // dagre (vendored, common/htmlview/dagre.min.js) ranks the nodes, orders them against crossings and routes each
  // edge through spaces of its own in the rows it crosses; every edge label is a box dagre places, so labels never
  // overlap. Edges leave a node at its bottom centre and enter at the top centre and cross every row vertically
  // (at the space dagre kept for them), so their slanted parts lie between rows, where no node is. A graph of more
  // than BIG nodes (dagre's time grows faster than linearly), or one dagre fails on, keeps the simple layering.
  var H = 38, LABEL_H = 14, BIG = 2000;
  function nodeWidths(g) {
    return g.n.map(function (r) { return Math.max(60, 7.2 * Math.max(r[0].length, Math.min(r[2].length, 48)) + 16); });
  }
  function labelWidth(text) { return 6.2 * text.length + 8; }
  // A value read by more than FANOUT nodes (a mask, rotary tables read by every decoder layer) keeps its edge to its
  // first reader; each other reader gets a small reference box above it ("↑ name", a click selects the value's
  // node) instead of an edge across the whole graph: long fan-outs are what make a layered layout slow and tangled.
  var FANOUT = 5, PH = 20;
  function layout(g) {  // dagre's, or the simple layering for a graph it cannot take (too large, too deep a chain)
    if (typeof dagre === "undefined" || g.n.length > BIG) return layered(g);
    try {
      return routed(g);
    } catch (err) {  // its recursion overflows the stack on chains of a few thousand rows
      return layered(g);
    }
  }
  function routed(g) {
    var n = g.n.length, W = nodeWidths(g), i;
    var clusters = g.clusters || [], G = new dagre.graphlib.Graph({ multigraph: true, compound: clusters.length > 0 });
    G.setGraph({ rankdir: "TB", nodesep: 24, edgesep: 14, ranksep: 28, marginx: 16, marginy: 16 });
    for (i = 0; i < n; i++) G.setNode("n" + i, { width: W[i], height: H });
    clusters.forEach(function (c, j) {  // a call drawn in place: its nodes inside a box
      G.setNode("c" + j, {});
      if (c.parent >= 0) G.setParent("c" + j, "c" + c.parent);
    });
    for (i = 0; i < n && clusters.length; i++) if (g.cl[i] >= 0) G.setParent("n" + i, "c" + g.cl[i]);
    var readers = new Map();
    g.e.forEach(function (e) {
      if (e[0] === e[1]) return;
      var r = readers.get(e[0]) || [];
      if (r.indexOf(e[1]) < 0) r.push(e[1]);
      readers.set(e[0], r);
    });
    var proxyOf = new Map(), proxies = [];
    readers.forEach(function (r, a) {
      if (r.length <= FANOUT) return;
      r.slice().sort(function (u, v) { return u - v; }).slice(1).forEach(function (b) {
        var text = "\u2191 " + g.n[a][0], id = n + proxies.length;
        proxyOf.set(a + "\u0000" + b, id);
        proxies.push({ id: id, a: a, b: b, text: text, w: labelWidth(text) + 4 });
        G.setNode("n" + id, { width: labelWidth(text) + 4, height: PH });
        if (clusters.length && g.cl[b] >= 0) G.setParent("n" + id, "c" + g.cl[b]);  // beside its reader
      });
    });
    var labelled = new Set(), edges = [];
    g.e.forEach(function (e, k) {
      if (e[0] === e[1]) return;
      var via = proxyOf.get(e[0] + "\u0000" + e[1]), a = via === undefined ? e[0] : via;
      var once = e[0] + "\u0000" + e[2], text = via === undefined && e[2] && !labelled.has(once) ? e[2] : "";  // once
      if (text) labelled.add(once);
      G.setEdge("n" + a, "n" + e[1], text ? { width: labelWidth(text), height: LABEL_H, labelpos: "c" } : {}, "e" + k);
      edges.push({ k: k, a: a, b: e[1], text: text });
    });
    dagre.layout(G);
    var total = n + proxies.length, x = new Float64Array(total), y = new Float64Array(total), h = new Float64Array(total);
    var cy = new Float64Array(total), rows = new Map();  // row centre -> half the row's height
    for (i = 0; i < total; i++) {
      var d = G.node("n" + i), w = i < n ? W[i] : proxies[i - n].w;
      h[i] = i < n ? H : PH; x[i] = d.x - w / 2; y[i] = d.y - h[i] / 2; cy[i] = d.y;
      rows.set(Math.round(d.y), Math.max(rows.get(Math.round(d.y)) || 0, h[i] / 2));
    }
    var width = function (v) { return v < n ? W[v] : proxies[v - n].w; };
    edges.forEach(function (e) {
      var d = G.edge("n" + e.a, "n" + e.b, "e" + e.k), ax = x[e.a] + width(e.a) / 2, bx = x[e.b] + width(e.b) / 2;
      var pts = [[ax, y[e.a] + h[e.a]]], below = cy[e.a] + rows.get(Math.round(cy[e.a]));
      if (below > y[e.a] + h[e.a] + 0.01) pts.push([ax, below]);  // a low box: down to its row's bottom first
      d.points.slice(1, -1).forEach(function (p) {  // a row crossed: vertically, through the edge's own space
        var half = rows.has(Math.round(p.y)) ? rows.get(Math.round(p.y)) : LABEL_H / 2;
        pts.push([p.x, p.y - half], [p.x, p.y + half]);
      });
      var above = cy[e.b] - rows.get(Math.round(cy[e.b]));
      if (above < y[e.b] - 0.01) pts.push([bx, above]);
      pts.push([bx, y[e.b]]);
      e.points = pts;
      if (e.text) { e.lx = d.x; e.ly = d.y; e.lw = labelWidth(e.text); }
    });
    proxies.forEach(function (p) { p.x = x[p.id]; p.y = y[p.id]; });
    var boxes = clusters.map(function (c, j) {
      var d = G.node("c" + j);
      return { x: d.x - d.width / 2, y: d.y - d.height / 2, w: d.width, h: d.height };
    });
    var size = G.graph();
    return { x: x, y: y, w: W, h: H, width: size.width, height: size.height, edges: edges, proxies: proxies, clusters: boxes };
  }
  function layered(g) {  // the simple layering: longest path, barycentre sweeps; curved edges, labels under producers
    var n = g.n.length, preds = [], succs = [], layer = new Int32Array(n), i;
    for (i = 0; i < n; i++) { preds.push([]); succs.push([]); }
    g.e.forEach(function (e) { if (e[0] !== e[1]) { preds[e[1]].push(e[0]); succs[e[0]].push(e[1]); } });
    var indeg = preds.map(function (p) { return p.length; }), queue = [], order = [];
    for (i = 0; i < n; i++) if (!indeg[i]) queue.push(i);
    while (queue.length) {
      var u = queue.shift(); order.push(u);
      succs[u].forEach(function (v) { layer[v] = Math.max(layer[v], layer[u] + 1); if (--indeg[v] === 0) queue.push(v); });
    }
    var seen = new Uint8Array(n);
    order.forEach(function (u) { seen[u] = 1; });
    for (i = 0; i < n; i++) if (!seen[i]) order.push(i);  // on a cycle (never from torch2ir): drawn anyway
    order.slice().reverse().forEach(function (u) {  // sources just above their first reader
      if (!preds[u].length && succs[u].length) layer[u] = Math.max(0, Math.min.apply(null, succs[u].map(function (v) { return layer[v]; })) - 1);
    });
    var layers = [];
    for (i = 0; i < n; i++) { (layers[layer[i]] = layers[layer[i]] || []).push(i); }
    layers = layers.filter(Boolean);
    var pos = new Float64Array(n);
    function place() { layers.forEach(function (l) { l.forEach(function (v, j) { pos[v] = j; }); }); }
    place();
    for (var sweep = 0; sweep < 4; sweep++) {
      var down = sweep % 2 === 0, seq = down ? layers : layers.slice().reverse();
      seq.forEach(function (l) {
        var bary = new Map();
        l.forEach(function (v) {
          var nb = down ? preds[v] : succs[v];
          bary.set(v, nb.length ? nb.reduce(function (s, w) { return s + pos[w]; }, 0) / nb.length : pos[v]);
        });
        l.sort(function (a, b) { return bary.get(a) - bary.get(b); });
        l.forEach(function (v, j) { pos[v] = j; });
      });
    }
    var W = nodeWidths(g), GAP = 18, VGAP = 58, x = new Float64Array(n), y = new Float64Array(n), width = 0;
    layers.forEach(function (l) { width = Math.max(width, l.reduce(function (s, v) { return s + W[v] + GAP; }, 0)); });
    layers.forEach(function (l, li) {
      var total = l.reduce(function (s, v) { return s + W[v] + GAP; }, 0) - GAP, cx = (width - total) / 2 + 20;
      l.forEach(function (v) { x[v] = cx; y[v] = 20 + li * (H + VGAP); cx += W[v] + GAP; });
    });
    var edges = [], labelled = new Set(), outs = new Int32Array(n);
    g.e.forEach(function (e, k) {
      if (e[0] === e[1]) return;
      var a = e[0], b = e[1], x1 = x[a] + W[a] / 2, y1 = y[a] + H, once = a + "\u0000" + e[2];
      var edge = { k: k, a: a, b: b, text: "", points: [[x1, y1], [x[b] + W[b] / 2, y[b]]], curved: true };
      if (e[2] && !labelled.has(once)) {
        labelled.add(once);
        edge.text = e[2]; edge.lw = labelWidth(e[2]); edge.lx = x1 + 4 + 12 * (outs[a]++) + edge.lw / 2; edge.ly = y1 + 9;
      }
      edges.push(edge);
    });
    return { x: x, y: y, w: W, h: H, width: width + 40, height: layers.length * (H + VGAP) + 20, edges: edges };
  }
  // zoom: the wheel zooms around the pointer, a drag on the background pans. A new graph opens at the zoom that fits
  // it in its pane but never below READABLE (the smallest text, the 10 px edge labels, stays at least 9 px on
  // screen): a graph larger than the pane opens at its top, centred on its first rows, with a minimap of the whole
  // in the pane's corner (a click or a drag there scrolls). "fit" fits the whole graph, whatever its text size.
  var zoom = 1, shown = null, drag = null, miniDrag = false, READABLE = 0.9, MINI = 170;
  function pane() { return $("middle"); }
  function barH() { return $("graphbar").offsetHeight; }
  function fitZoom(floor) {
    var p = pane(), L = shown.L;
    var fit = Math.min(1, (p.clientWidth - 24) / L.width, (p.clientHeight - barH() - 24) / L.height);
    return isFinite(fit) && fit > 0 ? Math.max(floor, fit) : 1;
  }
  function origin() {  // where the graph's (0, 0) is in the pane's scrolled content
    var p = pane(), a = p.getBoundingClientRect(), b = shown.svg.getBoundingClientRect();
    return { x: b.left - a.left + p.scrollLeft + 1, y: b.top - a.top + p.scrollTop + 1 };  // inside its border
  }
  function setSize() {  // the drawing at the current zoom; a graph lower than its pane is centred in it
    var p = pane(), svg = shown.svg, L = shown.L;
    svg.setAttribute("width", L.width * zoom); svg.setAttribute("height", L.height * zoom);
    svg.style.marginTop = Math.max(0, Math.floor((p.clientHeight - barH() - 22 - L.height * zoom) / 2)) + "px";
    miniMap();
  }
  function viewed() {  // the part of the graph the pane shows, in graph units: [x0, y0, x1, y1]
    var p = pane(), o = origin(), top = barH();
    return [(p.scrollLeft - o.x) / zoom, (p.scrollTop + top - o.y) / zoom, (p.scrollLeft + p.clientWidth - o.x) / zoom,
      (p.scrollTop + p.clientHeight - o.y) / zoom];
  }
  function record() {  // what is on show, kept on the graph element (the tests read it) and drawn on the minimap
    if (!shown) return;
    var v = viewed(), g = $("graph");
    g.dataset.zoom = String(Math.round(zoom * 1000) / 1000);
    g.dataset.view = v.map(function (t) { return Math.round(t); }).join(" ");
    if (shown.mini) {
      var L = shown.L, x0 = Math.max(0, v[0]), y0 = Math.max(0, v[1]);
      var r = shown.mini; r.view.setAttribute("x", x0); r.view.setAttribute("y", y0);
      r.view.setAttribute("width", Math.max(1, Math.min(L.width, v[2]) - x0));
      r.view.setAttribute("height", Math.max(1, Math.min(L.height, v[3]) - y0));
    }
  }
  function centreOn(gx, gy, h) {  // scroll so graph point (gx, gy) is in the middle of the pane (gy: top when h says so)
    var p = pane(), o = origin(), top = barH();
    p.scrollLeft = o.x + gx * zoom - p.clientWidth / 2;
    p.scrollTop = h ? o.y + gy * zoom - top - 8 : o.y + gy * zoom - top - (p.clientHeight - top) / 2;
    record();
  }
  function showBox(x0, y0, x1, y1, fit) {  // the box x0..x1, y0..y1 centred (fitted first: zoom between READABLE and 1)
    var p = pane(), top = barH();
    if (fit) {
      zoom = Math.max(READABLE, Math.min(1, (p.clientWidth - 24) / (x1 - x0), (p.clientHeight - top - 24) / (y1 - y0)));
      setSize();
    }
    var high = (y1 - y0) * zoom > p.clientHeight - top - 16;  // higher than the pane: its top
    centreOn((x0 + x1) / 2, high ? y0 : (y0 + y1) / 2, high);
  }
  function firstView() {  // the whole graph when it fits at a readable zoom; else its first rows, centred on them
    var L = shown.L, p = pane();
    zoom = fitZoom(READABLE);
    setSize();
    var h = (p.clientHeight - barH() - 24) / zoom, x0 = Infinity, x1 = -Infinity;
    for (var k = 0; k < L.w.length; k++) if (L.y[k] < h) { x0 = Math.min(x0, L.x[k]); x1 = Math.max(x1, L.x[k] + L.w[k]); }
    if (!(x1 > x0)) { x0 = 0; x1 = L.width; }
    p.scrollTop = 0;
    centreOn((x0 + x1) / 2, 0, true);
  }
  function zoomAt(z, px, py) {  // keep the graph point under (px, py) of the pane where it is
    if (!shown) return;
    var p = pane();
    if (px === undefined) { px = p.clientWidth / 2; py = p.clientHeight / 2; }
    var o = origin(), gx = (p.scrollLeft + px - o.x) / zoom, gy = (p.scrollTop + py - o.y) / zoom;
    zoom = Math.min(3, Math.max(0.1, z));
    setSize();
    o = origin();
    p.scrollLeft = o.x + gx * zoom - px; p.scrollTop = o.y + gy * zoom - py;
    record();
  }
  function miniMap() {  // the whole graph, small, in the pane's corner, when the pane does not show all of it
    var box = $("minimap");
    if (!box) return;
    box.replaceChildren(); box.hidden = true;
    var p = pane(), L = shown && shown.L;
    var need = !!L && (L.width * zoom > p.clientWidth - 22 || L.height * zoom > p.clientHeight - barH() - 22);
    $("graph").classList.toggle("withmini", need);  // room below the graph to scroll its last rows above the minimap
    if (shown) shown.mini = null;
    if (!need) return;
    var s = Math.min(MINI / L.width, MINI / L.height);
    var w = Math.min(MINI, Math.max(48, L.width * s)), h = Math.min(MINI, Math.max(48, L.height * s));
    var svg = sel("svg", { "class": "mini", viewBox: "0 0 " + L.width + " " + L.height, width: w, height: h, preserveAspectRatio: "none" });
    (L.clusters || []).forEach(function (c) { svg.appendChild(sel("rect", { "class": "mc", x: c.x, y: c.y, width: c.w, height: c.h })); });
    for (var k = 0; k < L.w.length; k++) {
      var kind = shown.M.n[k][1];
      svg.appendChild(sel("rect", { "class": "mn m-" + kind, x: L.x[k], y: L.y[k], width: L.w[k], height: L.h }));
    }
    var view = sel("rect", { "class": "mv" });
    svg.appendChild(view);
    box.appendChild(svg);
    box.hidden = false;
    shown.mini = { view: view };
    function go(ev) {
      var r = svg.getBoundingClientRect();
      centreOn((ev.clientX - r.left) * L.width / w, (ev.clientY - r.top) * L.height / h);
    }
    svg.addEventListener("mousedown", function (ev) { miniDrag = go; go(ev); ev.preventDefault(); });
  }
  $("graph").addEventListener("wheel", function (ev) {
    if (!shown) return;
    ev.preventDefault();
    var r = pane().getBoundingClientRect();
    zoomAt(zoom * (ev.deltaY < 0 ? 1.15 : 1 / 1.15), ev.clientX - r.left, ev.clientY - r.top);
  }, { passive: false });
  $("graph").addEventListener("mousedown", function (ev) {
    if (ev.button !== 0 || (ev.target.closest && ev.target.closest(".node"))) return;
    var box = pane();
    drag = { x: ev.clientX, y: ev.clientY, l: box.scrollLeft, t: box.scrollTop };
    $("graph").classList.add("dragging");
    ev.preventDefault();
  });
  pane().addEventListener("scroll", record);
  window.addEventListener("resize", function () {  // the same graph point stays in the middle of the pane
    if (!shown) return;
    var v = viewed();
    setSize();
    centreOn((v[0] + v[2]) / 2, (v[1] + v[3]) / 2);
  });
  window.addEventListener("mousemove", function (ev) {
    if (miniDrag) { miniDrag(ev); return; }
    if (!drag) return;
    var box = pane();
    box.scrollLeft = drag.l - (ev.clientX - drag.x); box.scrollTop = drag.t - (ev.clientY - drag.y);
  });
  window.addEventListener("mouseup", function () {
    miniDrag = false;
    if (drag) { drag = null; $("graph").classList.remove("dragging"); }
  });
  // A call of a module with a graph can be drawn in place (double-click it, or "expand here" in its panel): the
  // callee's graph inside a box named after the module, its inputs fed by what the call passes (the binding the
  // page data gives, as the rebuild binds arguments), its output node read by the call's readers. Nested calls
  // expand the same way; a click on the box's name folds it again. A call drawn in place is fitted and scrolled
  // into view.
  // The calls of a graph to two or more blocks of one run of identical blocks (decoder layers) are one stack box,
  // "layers.0–79 ×80", with every node between two of them (reachable from one and reaching another: a getitem
  // between two layers): contracting such a set leaves the graph acyclic; a value read by every block is one edge
  // into the box. A double-click (or its panel) draws the calls one by one; a link's stack=0 draws every run so.
  // Export plumbing (common/htmlview/data.py's plumbing: its checks, unused None inputs) is hidden until asked.
  var inplace = new Set();  // the expanded calls of the graph on show, as "<call>/<call>/..." paths of node names
  var unstacked = new Set(), stacksOn = true, plumbingOn = false;  // runs drawn call by call (by key); the toggles
  function expandable(r) { return r[6] && IMPLS[r[5]] && IMPLS[r[5]].g && IMPLS[r[5]].g[r[6][0]] ? true : false; }
  function runOfCall(r) {  // the run of identical blocks the module a call runs belongs to (undefined: none)
    if (r[1] !== "call" || !r[5]) return undefined;
    var i = byPath.get(r[5]);
    return i === undefined ? undefined : runOf.get(i);
  }
  function opensUnder(key) {  // a call drawn in place is key or inside it
    var found = false;
    inplace.forEach(function (k) { if (k === key || k.indexOf(key + "/") === 0) found = true; });
    return found;
  }
  function stacksOf(g, prefix, focusKey) {  // node index -> the stack box holding it
    var of = new Map(), groups = new Map();
    if (!stacksOn) return of;
    g.n.forEach(function (r, k) {
      var run = runOfCall(r);
      if (!run) return;
      var key = N[run[1][0]].p, grp = groups.get(key);
      if (!grp) { grp = { run: run, sk: prefix + key, calls: [] }; groups.set(key, grp); }
      grp.calls.push(k);
    });
    var succ = null, pred = null;
    function reach(from, adj) {
      var seen = new Uint8Array(g.n.length), todo = from.slice();
      from.forEach(function (k) { seen[k] = 1; });
      while (todo.length) adj[todo.pop()].forEach(function (w) { if (!seen[w]) { seen[w] = 1; todo.push(w); } });
      return seen;
    }
    groups.forEach(function (grp) {
      if (grp.calls.length < 2 || unstacked.has(grp.sk)) return;
      if (grp.calls.some(function (k) { return opensUnder(prefix + g.n[k][0]); })) return;
      if (!succ) {
        succ = g.n.map(function () { return []; }); pred = g.n.map(function () { return []; });
        g.e.forEach(function (e) { if (e[0] !== e[1]) { succ[e[0]].push(e[1]); pred[e[1]].push(e[0]); } });
      }
      var f = reach(grp.calls, succ), b = reach(grp.calls, pred), hull = [];
      for (var k = 0; k < g.n.length; k++) if (f[k] && b[k]) hull.push(k);
      if (hull.some(function (k) {
        var r = g.n[k];
        return of.has(k) || r[1] === "input" || r[1] === "output" || prefix + r[0] === focusKey;
      })) return;
      var s = { run: grp.run, sk: grp.sk, calls: grp.calls, between: hull.length - grp.calls.length, ins: 0,
                last: g.n[grp.calls[grp.calls.length - 1]] };
      hull.forEach(function (k) { of.set(k, s); });
    });
    return of;
  }
  function stackRow(s) {
    var first = N[s.run[1][0]], all = s.calls.length === s.run[1].length;
    return [all ? s.run[0] : s.run[0] + " (" + s.calls.length + " calls)", "stack", first.c || first.t, s.last[3], "", ""];
  }
  function assemble(path, v, focusKey) {
    var M = { n: [], e: [], cl: [], src: [], clusters: [], top: [], stacks: [], hidden: 0 };
    function walk(p, vv, cluster, prefix, feeds) {
      var g = IMPLS[p].g[vv], ids = [], opened = new Set(), inputs = 0, out = -1;
      var hide = new Set(plumbingOn || !g.h ? [] : g.h), stk = stacksOf(g, prefix, focusKey), made = new Map();
      g.n.forEach(function (r, k) {
        var key = prefix + r[0], s = stk.get(k), f = r[1] === "input" && feeds ? feeds[inputs++] : undefined;
        if (s) {
          if (!made.has(s)) {
            made.set(s, M.n.length); M.stacks[M.n.length] = s;
            M.n.push(stackRow(s)); M.cl.push(cluster); M.src.push([p, vv, k, key]);
          }
          ids[k] = made.get(s);
        } else if (hide.has(k) && key !== focusKey) {
          ids[k] = -1; M.hidden++;
        } else if (expandable(r) && inplace.has(key)) {
          var c = M.clusters.length;
          M.clusters.push({ path: r[5], parent: cluster, key: key });
          opened.add(k);
          ids[k] = walk(r[5], r[6][0], c, key + "/", r[6][1].map(function (j) { return j >= 0 ? ids[j] : -1; }));
        } else {
          ids[k] = M.n.length;
          M.n.push(r); M.cl.push(cluster); M.src.push([p, vv, k, key]);
          if (f !== undefined && f >= 0) M.e.push([f, ids[k], r[3] || ""]);
          if (r[1] === "output") out = ids[k];
        }
        if (!prefix) M.top[k] = ids[k];
      });
      var once = new Set();
      g.e.forEach(function (e) {
        if (opened.has(e[1])) return;  // fed through the callee's inputs
        var a = ids[e[0]], b = ids[e[1]];
        if (a === undefined || b === undefined || a < 0 || b < 0 || a === b) return;
        if (M.stacks[a] || M.stacks[b]) {  // one edge per value into a stack box, one per reader out of it
          var t = a + "," + b + "," + e[2];
          if (once.has(t)) return;
          once.add(t);
          if (M.stacks[b]) M.stacks[b].ins++;
        }
        M.e.push([a, b, e[2]]);
      });
      return out;
    }
    walk(path, v, -1, "", null);
    return M;
  }
  function redraw(path, v) {  // the same graph drawn again, at the same zoom and scroll
    var p = pane(), left = p.scrollLeft, top = p.scrollTop;
    drawGraph(path, v);
    p.scrollLeft = left; p.scrollTop = top;
    record();
  }
  function fitCall(key) {  // the box of a call drawn in place, fitted and scrolled into view
    if (!shown) return;
    var j = shown.M.clusters.findIndex(function (c) { return c.key === key; }), c = j >= 0 && shown.L.clusters ? shown.L.clusters[j] : null;
    if (c) showBox(c.x, c.y, c.x + c.w, c.y + c.h, true);
  }
  function setInPlace(path, v, key, on) {
    if (on) inplace.add(key);
    else inplace.forEach(function (k) { if (k === key || k.indexOf(key + "/") === 0) inplace.delete(k); });
    redraw(path, v);
    if (on) fitCall(key);
  }
  function toggleInPlace(path, v, key) {  // and the same call on the other side, where it has one (same node names)
    var on = !inplace.has(key);
    setInPlace(path, v, key, on);
    if (peer) sync(function () { peer.inPlace(counterpart(path), v, key, on); });
  }
  function setStacked(path, v, sk, on) {  // draw a run's calls as one box (on) or one by one, here and on the other side
    if (on) unstacked.delete(sk); else unstacked.add(sk);
    redraw(path, v);
    if (peer) sync(function () { peer.stacked(counterpart(path), v, sk, on); });
  }
  function setPlumbing(path, v, on) {
    plumbingOn = on;
    redraw(path, v);
    if (peer) sync(function () { peer.plumbing(counterpart(path), v, on); });
  }
  function drawGraph(path, v, focus, keys) {  // keys: calls to draw in place as well
    var d = IMPLS[path], g = d && d.g[v];
    var bar = $("graphbar"), box = $("graph");
    var same = drawn === path + "\u0000" + v;
    drawn = g ? path + "\u0000" + v : null;
    if (!same) { inplace.clear(); unstacked.clear(); }
    (keys || []).forEach(function (k) { inplace.add(k); });
    if (peer) sync(function () { peer.graphAt(counterpart(path), v, g && focus !== undefined && g.n[focus] ? g.n[focus][0] : null, keys); });
    bar.replaceChildren(); box.replaceChildren();
    shown = null;
    if (!g) { miniMap(); box.appendChild(el("div", "hint", "no graph: " + path + " is rebuilt by the handler of its type")); return; }
    var focusKey = focus !== undefined && focus >= 0 && g.n[focus] ? g.n[focus][0] : null;
    var M = assemble(path, v, focusKey);
    bar.appendChild(el("span", "t", path + (v ? " (variant " + v + ")" : "")));
    var stacks = M.stacks.filter(Boolean).length;
    bar.appendChild(el("span", null, g.n.length + " nodes, " + g.e.length + " edges" +
      (M.clusters.length ? ", " + M.clusters.length + " call" + (M.clusters.length > 1 ? "s" : "") + " drawn in place" : "") +
      (stacks ? ", " + stacks + " run" + (stacks > 1 ? "s" : "") + " of blocks in one box" : "")));
    var L = layout(M), svg = sel("svg", { "class": "graph-svg", viewBox: "0 0 " + L.width + " " + L.height });
    shown = { svg: svg, L: L, M: M, mini: null };
    bar.appendChild(button("−", function () { zoomAt(zoom / 1.25); }));
    bar.appendChild(button("+", function () { zoomAt(zoom * 1.25); }));
    bar.appendChild(button("fit", function () { zoomAt(fitZoom(0.1)); }));
    if (unstacked.size) bar.appendChild(button("fold runs", function () { unstacked.clear(); redraw(path, v); }));
    if (M.hidden || (plumbingOn && (g.h || []).length)) {
      var pb = button(plumbingOn ? "hide plumbing" : "show plumbing (" + M.hidden + ")", function () { setPlumbing(path, v, !plumbingOn); });
      pb.title = "export's checks (_assert_tensor_metadata, ...) and inputs that are None and read by nothing";
      pb.classList.add("plumbing");
      bar.appendChild(pb);
    }
    var defs = sel("defs", {}), arrow = sel("marker", { id: pre + "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
      markerWidth: 7, markerHeight: 7, markerUnits: "userSpaceOnUse", orient: "auto" });
    arrow.appendChild(sel("path", { d: "M0,1 L10,5 L0,9 z" }));
    defs.appendChild(arrow);
    svg.appendChild(defs);
    var boxes = sel("g", {}), edges = sel("g", {}), nodes = sel("g", {}), labels = sel("g", {});
    (L.clusters || []).forEach(function (c, j) {
      var info = M.clusters[j], gr = sel("g", { "class": "cluster", transform: "translate(" + c.x + "," + c.y + ")" });
      gr.appendChild(sel("rect", { width: c.w, height: c.h }));
      var name = sel("text", { x: 6, y: 12 }, info.path + "  \u2212");
      name.addEventListener("click", function () { toggleInPlace(path, v, info.key); });
      gr.appendChild(name);
      gr.appendChild(sel("title", {}, info.path + " drawn in place of its call (click its name to fold it)"));
      boxes.appendChild(gr);
    });
    L.edges.forEach(function (e) {
      // a straight line down through a row; between rows, a curve with vertical ends, whose height stays within the
      // gap (a cubic whose control points share the middle height never leaves the band between its ends)
      var p = e.points, dpath = "M" + p[0][0] + "," + p[0][1];
      for (var j = 1; j < p.length; j++) {
        var a = p[j - 1], b = p[j], my = (a[1] + b[1]) / 2;
        dpath += Math.abs(a[0] - b[0]) < 0.01 ? " L" + b[0] + "," + b[1] : " C" + a[0] + "," + my + " " + b[0] + "," + my + " " + b[0] + "," + b[1];
      }
      var path_ = sel("path", { "class": "edge", d: dpath, "marker-end": "url(#" + pre + "arrow)" });
      path_.dataset.a = String(e.a); path_.dataset.b = String(e.b);
      if (!e.curved) path_.dataset.routed = "1";  // laid out by dagre (the fallback layering routes nothing)
      edges.appendChild(path_);
      if (e.text) {
        var t = sel("text", { "class": "el", x: e.lx, y: e.ly + 4, "text-anchor": "middle" }, e.text);
        t.dataset.w = String(e.lw); t.dataset.h = String(LABEL_H);
        labels.appendChild(t);
      }
    });
    var focusAt = focus !== undefined && focus >= 0 && focus < g.n.length ? M.top[focus] : -1;
    M.n.forEach(function (r, k) {
      var at = M.src[k], sp = at[0], sg = IMPLS[sp].g[at[1]], s = M.stacks[k], mk = s ? runMark(s.run) : null;
      var nst = s ? (mk ? mk[0] : "") : CMP && CMP.n[side][sp] && CMP.n[side][sp][at[1] + ":" + r[0]];
      var within = !nst && inner && r[5] && byPath.has(r[5]) && inner[byPath.get(r[5])];  // a change inside the callee
      var gr = sel("g", { "class": "node k-" + r[1] + (nst ? " d-" + nst : within ? " d-inside" : "") + (expandable(r) ? " expandable" : ""),
                          transform: "translate(" + L.x[k] + "," + L.y[k] + ")" });
      var rect = sel("rect", { width: L.w[k], height: L.h }), ov = !s && OV && (OV.n[sp + ":" + r[0]] || (r[5] && OV.m[r[5]]));
      if (ov) { rect.style.fill = ovColour(ov[0]); gr.dataset.ov = ov[1]; }
      gr.appendChild(rect);
      gr.appendChild(sel("text", { x: 8, y: 15 }, r[0]));
      if (r[2]) gr.appendChild(sel("text", { "class": "op", x: 8, y: 30 }, r[2].length > 48 ? r[2].slice(0, 47) + "…" : r[2]));
      if (s) {
        gr.appendChild(sel("rect", { "class": "stk", x: 3, y: 3, width: L.w[k] - 6, height: L.h - 6 }));
        gr.appendChild(sel("title", {}, s.calls.length + " calls of identical blocks (" + r[2] + ")" +
          (s.between ? " and " + s.between + " nodes between them" : "") + (r[3] ? ": " + r[3] : "") +
          (mk ? "\n" + runMarkText(s.run, mk) : "") + "\nclick: the run; double-click: draw the calls one by one"));
        gr.addEventListener("click", function () {
          if (graphSel) graphSel.classList.remove("sel");
          graphSel = gr; gr.classList.add("sel");
          showRun(s.run, { calls: s.calls, between: s.between, ins: s.ins, outs: r[3] || "-",
                           unfold: function () { setStacked(path, v, s.sk, false); } });
        });
        gr.addEventListener("dblclick", function () { setStacked(path, v, s.sk, false); });
        nodes.appendChild(gr);
        return;
      }
      gr.appendChild(sel("title", {}, r[0] + (r[3] ? ": " + r[3] : "") + (ov ? "\n" + OV.name + ": " + ov[1] : "") +
        (nst ? "\n" + nst : within ? "\n" + "something inside " + r[5] + " differs" : "") +
        (expandable(r) ? "\ndouble-click: draw " + r[5] + " in place" : "")));
      gr.addEventListener("click", function () {
        if (graphSel) graphSel.classList.remove("sel");
        graphSel = gr; gr.classList.add("sel"); showNode(sp, sg, at[2], function () { toggleInPlace(path, v, at[3]); });
      });
      if (expandable(r)) gr.addEventListener("dblclick", function () { toggleInPlace(path, v, at[3]); });
      nodes.appendChild(gr);
      if (M.cl[k] === -1) gr.dataset.top = String(at[2]);  // a node of the graph itself (not of a call drawn in place)
      if (k === focusAt) { graphSel = gr; gr.classList.add("sel"); gr.dataset.focus = "1"; }
    });
    (L.proxies || []).forEach(function (p) {
      var at = M.src[p.a], sg = IMPLS[at[0]].g[at[1]], r = M.n[p.a];
      var gr = sel("g", { "class": "proxy", transform: "translate(" + p.x + "," + p.y + ")" });
      gr.appendChild(sel("rect", { width: p.w, height: PH }));
      gr.appendChild(sel("text", { x: 6, y: 14 }, p.text));
      gr.appendChild(sel("title", {}, "read from " + r[0] + (r[3] ? ": " + r[3] : "") + " (click to select it)"));
      gr.addEventListener("click", function () { showNode(at[0], sg, at[2]); });
      nodes.appendChild(gr);
    });
    svg.appendChild(boxes); svg.appendChild(edges); svg.appendChild(nodes); svg.appendChild(labels);
    box.appendChild(svg);
    if (same) setSize(); else firstView();
    if (focusAt >= 0) {
      showNode(path, g, focus);
      showBox(L.x[focusAt], L.y[focusAt], L.x[focusAt] + L.w[focusAt], L.y[focusAt] + L.h, false);
    }
    record();
  }

  // -- search ---------------------------------------------------------------------------------------------------
  // modules by path, class or type; graph nodes by name, op or output (a shape such as "f32[2, 8" or a dtype);
  // a node hit draws its module's graph with the node selected
  var LIMIT = 200, timer = 0;
  function nodeHits(q) {
    var hits = [];
    Object.keys(IMPLS).forEach(function (path) {
      IMPLS[path].g.forEach(function (g, v) {
        g.n.forEach(function (r, k) {
          if (r[0].toLowerCase().indexOf(q) >= 0 || r[2].toLowerCase().indexOf(q) >= 0 || r[3].toLowerCase().indexOf(q) >= 0) hits.push([path, v, k]);
        });
      });
    });
    return hits;
  }
  function search(q) {
    var box = $("results");
    box.replaceChildren();
    q = q.trim().toLowerCase();
    if (!q) return;
    var hits = [];
    for (var i = 0; i < N.length; i++) {
      var n = N[i];
      if (n.p.toLowerCase().indexOf(q) >= 0 || n.c.toLowerCase().indexOf(q) >= 0 || n.t.toLowerCase().indexOf(q) >= 0) hits.push(i);
    }
    var found = nodeHits(q);
    box.appendChild(el("div", "note", hits.length + (hits.length === 1 ? " module" : " modules") + ", " + found.length +
      (found.length === 1 ? " graph node" : " graph nodes") + (hits.length + found.length > LIMIT ? ", first " + LIMIT + " shown" : "")));
    hits.slice(0, LIMIT).forEach(function (i) {
      var h = el("div", "hit");
      h.appendChild(el("span", null, N[i].p));
      h.appendChild(el("span", "cls", N[i].c));
      h.addEventListener("click", function () { reveal(i); select(i); });
      box.appendChild(h);
    });
    found.slice(0, Math.max(0, LIMIT - hits.length)).forEach(function (f) {
      var r = IMPLS[f[0]].g[f[1]].n[f[2]], h = el("div", "hit node-hit");
      h.appendChild(el("span", null, f[0] + (f[1] ? " (variant " + f[1] + ")" : "") + " : " + r[0]));
      h.appendChild(el("span", "cls", r[2] + (r[3] ? " → " + r[3] : "")));
      h.addEventListener("click", function () { openNode(f[0], f[1], f[2]); });
      box.appendChild(h);
    });
  }
  function openNode(path, v, k) {
    var i = byPath.get(path);
    if (i !== undefined) { reveal(i); select(i); }
    drawGraph(path, v, k);
  }
  $("search").addEventListener("input", function (ev) {
    clearTimeout(timer);
    timer = setTimeout(function () { search(ev.target.value); }, 120);
  });
  $("collapse").addEventListener("click", function () { open.clear(); open.add(0); render(); });

  // -- start ----------------------------------------------------------------------------------------------------
  function resolve(p) {  // a path, or the unique path ending with "." + p
    if (byPath.has(p)) return byPath.get(p);
    var found = -1;
    for (var i = 0; i < N.length; i++) if (N[i].p.endsWith("." + p)) { if (found >= 0) return -1; found = i; }
    return found;
  }
  function render() {
    rows.clear(); runItems.clear();
    var tree = $("tree");
    tree.replaceChildren(nodeItem(0));
  }
  // a link's lists are capped: the first LINK_ITEMS entries are read (a link of 20 000 took 10 s to open)
  var LINK_ITEMS = 64, LINK_TEXT = 256;
  function linkList(args, key) { return (args.get(key) || "").split(",", LINK_ITEMS).filter(Boolean); }
  function fromFragment() {
    var args = new URLSearchParams(location.hash.slice(1, 1 + LINK_ITEMS * LINK_TEXT));
    linkList(args, "expand").forEach(function (p) {
      var i = resolve(p);
      if (i >= 0) { reveal(i); expand(i, true); }
    });
    if (args.get("stack") === "0") stacksOn = false;  // every call of a run drawn on its own
    if (args.get("plumbing") === "1") plumbingOn = true;  // export's checks and unused None inputs drawn
    if (peer) sync(function () { peer.toggles(stacksOn, plumbingOn); });
    if (drawn && !args.get("graph") && (!stacksOn || plumbingOn)) {  // the graph on show (the root's), redrawn so
      var on = drawn.split("\u0000");
      drawGraph(on[0], +on[1]);
      if (peer) sync(function () { peer.graphAt(counterpart(on[0]), +on[1], null); });
    }
    var s = args.get("select"), g = args.get("graph"), q = args.get("search");
    if (s && resolve(s) >= 0) { reveal(resolve(s)); select(resolve(s)); }
    if (g && resolve(g) >= 0) {
      if (!s) { reveal(resolve(g)); select(resolve(g)); }
      // the calls the link draws in place (node names, "/"-nested), all at once: the graph is laid out once, here
      // and on the other side
      var ip = linkList(args, "inplace");
      drawGraph(N[resolve(g)].p, 0, undefined, ip);
      if (ip.length) fitCall(ip[ip.length - 1]);
    }
    if (q) { q = q.slice(0, LINK_TEXT); $("search").value = q; search(q); }
    var nd = args.get("node"), colon = nd ? nd.lastIndexOf(":") : -1;  // node=<module path>:<node name>
    if (colon > 0 && IMPLS[nd.slice(0, colon)]) {
      var where = nd.slice(0, colon), name = nd.slice(colon + 1);
      IMPLS[where].g.some(function (gr, v) {
        var k = gr.n.findIndex(function (r) { return r[0] === name; });
        if (k >= 0) openNode(where, v, k);
        return k >= 0;
      });
    }
  }
  function counterpart(path) {  // the other side's module standing for path (undefined: none)
    if (!CMP) return path;
    var other = CMP.pair[side][path];
    return other !== undefined ? other : CMP.m[side][path] ? undefined : path;  // an alias: the same path
  }
  function absent(path, other) {  // nothing on this side stands for the other side's module
    var panel = $("panel");
    if (selRow) selRow.classList.remove("sel");
    selRow = null; selected = -1;
    panel.replaceChildren(el("h2", null, "—"), el("div", "sub dm-" + (side ? "removed" : "added"), "nothing here stands for " + other +
      " of the other side (" + (side ? "removed" : "added") + ")"));
    $("graphbar").replaceChildren();
    $("graph").replaceChildren(el("div", "hint", "no counterpart of " + other));
    drawn = null; shown = null; inplace.clear();
    miniMap();
  }
  function start() {
    $("title").textContent = D.title + " · " + N.length + " modules";
    $("summary").textContent = D.summary.join("\n") + (OV ? "\noverlay " + OV.name + ": " + Object.keys(OV.m).length +
      " modules, " + Object.keys(OV.n).length + " nodes, " + OV.lo.toPrecision(3) + " (pale) to " + OV.hi.toPrecision(3) +
      " (red)" + (OV.unmatched ? "; " + OV.unmatched + " keys name nothing in this IR" : "") : "");
    N.forEach(function (n, i) {  // open the top two levels, and a module holding only a run of identical blocks
      if (hasKids(i) && (depth[i] < 2 || (n.ch.length === 1 && typeof n.ch[0] !== "number"))) open.add(i);
    });
    render();
    select(0);
    if (IMPLS[N[0].p] && IMPLS[N[0].p].g && IMPLS[N[0].p].g.length) drawGraph(N[0].p, 0);  // the root's graph on open
    else $("graph").appendChild(el("div", "hint", "select a module and press 'show graph' to draw its graph"));
  }
  return {
    start: start, fromFragment: fromFragment, title: D.title,
    setPeer: function (p) { peer = p; },
    selectPath: function (path, other) {
      var i = path === undefined ? undefined : byPath.get(path);
      if (i === undefined) { absent(path, other); return; }
      reveal(i); select(i);
    },
    inPlace: function (path, v, key, on) {  // the other side drew (or folded) a call in place: here too
      if (path !== undefined && drawn === path + "\u0000" + v) setInPlace(path, v, key, on);
    },
    stacked: function (path, v, sk, on) {  // the other side drew a run's calls one by one (or as one box again)
      if (path === undefined || drawn !== path + "\u0000" + v) return;
      if (on) unstacked.delete(sk); else unstacked.add(sk);
      redraw(path, v);
    },
    plumbing: function (path, v, on) {
      plumbingOn = on;
      if (path !== undefined && drawn === path + "\u0000" + v) redraw(path, v);
    },
    toggles: function (stacks, plumbing) { stacksOn = stacks; plumbingOn = plumbing; },
    graphAt: function (path, v, name, keys) {  // keys: the calls the other side draws in place (a link)
      var d = path === undefined ? undefined : IMPLS[path];
      if (!d || !d.g[v]) { if (!d) $("graph").replaceChildren(el("div", "hint", "no counterpart")); else drawGraph(path, v); return; }
      var k = name === null ? -1 : d.g[v].n.findIndex(function (r) { return r[0] === name; });
      drawGraph(path, v, k >= 0 ? k : undefined, keys);
      if (keys && keys.length) fitCall(keys[keys.length - 1]);
    },
    nodeAt: function (path, v, name) {
      var d = path === undefined ? undefined : IMPLS[path], g = d && d.g[v];
      var k = g ? g.n.findIndex(function (r) { return r[0] === name; }) : -1;
      var box = $("nodeinfo");
      if (k >= 0) {
        if (drawn !== path + "\u0000" + v) drawGraph(path, v, k); else showNode(path, g, k);
        $("graph").querySelectorAll(".node").forEach(function (e) { e.classList.toggle("sel", e.dataset.top === String(k)); });
      } else if (box) {
        box.replaceChildren(el("h3", null, "Node " + name), el("div", "empty", "not in this graph (" + (side ? "removed" : "added") + ")"));
        box.scrollIntoView({ block: "nearest" });
      }
    }
  };
  }

  var main = viewer(json("ir-data"), "", 0), B = json("ir-data-b");
  var ms;
  if (B) {  // side by side: A on the left, B on the right
    var right = viewer(B, "b-", 1);
    main.setPeer(right); right.setPeer(main);
    var c = CMP.count;
    $0("cmpsum").textContent = CMP.names[0] + " → " + CMP.names[1] + ": " + c.changed + " modules changed, " + c.added +
      " added, " + c.removed + " removed";
    syncing = true;
    try { main.start(); right.start(); } finally { syncing = false; }
    main.fromFragment();
    window.addEventListener("hashchange", main.fromFragment);
    ms = Math.round(performance.now());
    document.title = main.title + " vs " + right.title + " · IR compare · loaded in " + ms + " ms";
  } else {
    main.start();
    main.fromFragment();
    window.addEventListener("hashchange", main.fromFragment);
    ms = Math.round(performance.now());
    document.title = main.title + " · IR view · loaded in " + ms + " ms";
  }
  document.body.dataset.loadMs = String(ms);
  function $0(id) { return document.getElementById(id); }
})();
