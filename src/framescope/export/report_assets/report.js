// framescope report: renders the inlined data as an icicle per thread (click to zoom, search)
// and a sortable summary table. Plain ES2017, no libraries, no network.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const ROW = 17;
  const MAX_ELEMENTS = 15000;  // frames drawn per thread and render; the rest are < 1 px anyway
  const names = data.names;
  const cats = data.cats;

  function fmtMs(ns) {
    const ms = ns / 1e6;
    return ms >= 100 ? ms.toFixed(0) : ms >= 1 ? ms.toFixed(2) : ms.toFixed(3);
  }
  function pct(part, whole) {
    return whole > 0 ? (100 * part / whole).toFixed(1) + "%" : "-";
  }
  function hash(s) {
    let h = 2166136261;
    for (let i = 0; i < s.length; i++) {
      h ^= s.charCodeAt(i);
      h = Math.imul(h, 16777619);
    }
    return h >>> 0;
  }
  // Python frames warm (hue by file), torch/C++ ops blue, user ranges green.
  function color(nameId) {
    const name = names[nameId];
    const cat = cats[nameId];
    const h = hash(name.split("(")[0]);
    if (cat === "cpu_op") return "hsl(" + (195 + h % 30) + ", 65%, " + (68 + h % 10) + "%)";
    if (cat === "user_annotation") return "hsl(" + (95 + h % 40) + ", 50%, " + (62 + h % 10) + "%)";
    if (cat === "") return "#ccc";
    return "hsl(" + (10 + h % 45) + ", 80%, " + (62 + h % 12) + "%)";
  }

  // ---- search ----------------------------------------------------------------------------
  let matcher = null;  // Uint8Array over names, or null when no search
  let matches = null;  // the query as a test of a name, or null
  // A query is a case-insensitive substring, or /regex/flags; an unfinished regex matches
  // nothing. Returns null for an empty query.
  function compileQuery(q) {
    q = q.trim();
    if (!q) return null;
    const m = /^\/(.*)\/([a-z]*)$/.exec(q);
    if (m) {
      let re;
      try {
        re = new RegExp(m[1], m[2].indexOf("i") >= 0 ? m[2] : m[2] + "i");
      } catch (e) {
        return () => false;
      }
      return (s) => re.test(s);
    }
    const needle = q.toLowerCase();
    return (s) => s.toLowerCase().indexOf(needle) >= 0;
  }

  // ---- flame graphs ----------------------------------------------------------------------
  const threads = data.threads.map(function (t, index) {
    const n = t.name.length;
    const children = [];
    for (let i = 0; i < n; i++) children.push([]);
    for (let i = 1; i < n; i++) children[t.parent[i]].push(i);  // preorder: parent < child
    for (const c of children) c.sort((a, b) => t.total[b] - t.total[a]);
    return { t: t, index: index, children: children, focus: 0, box: null, info: null };
  });

  function matchedTime(th) {
    // time in matching frames, each counted once (not again under a matching ancestor)
    const t = th.t;
    let sum = 0;
    const stack = [0];
    while (stack.length) {
      const n = stack.pop();
      if (n !== 0 && matcher[t.name[n]]) {
        sum += t.total[n];
        continue;
      }
      for (const c of th.children[n]) stack.push(c);
    }
    return sum;
  }

  function render(th) {
    const t = th.t;
    const box = th.box;
    box.textContent = "";
    const width = Math.max(box.clientWidth, 200);
    const minFrac = 1 / width;
    const focusTotal = Math.max(t.total[th.focus], 1);
    const path = [];
    for (let p = th.focus; p !== -1; p = t.parent[p]) path.unshift(p);
    let count = 0;
    let rows = 0;
    const frag = document.createDocumentFragment();
    function add(node, left, w, row, ancestor) {
      const el = document.createElement("div");
      el.className = "frame" + (ancestor ? " ancestor" : "");
      if (matcher && node !== 0) el.classList.add(matcher[t.name[node]] ? "match" : "dim");
      el.style.left = (left * 100) + "%";
      el.style.width = (w * 100) + "%";
      el.style.top = (row * ROW) + "px";
      el.style.background = color(t.name[node]);
      el.textContent = node === 0 ? "all (" + t.label + ")" : names[t.name[node]];
      el.dataset.node = String(node);
      frag.appendChild(el);
      rows = Math.max(rows, row + 1);
      count++;
    }
    path.forEach((n, i) => add(n, 0, 1, i, n !== th.focus));
    const stack = [[th.focus, 0, path.length - 1]];
    while (stack.length && count < MAX_ELEMENTS) {
      const top = stack.pop();
      let x = top[1];
      for (const c of th.children[top[0]]) {
        const w = t.total[c] / focusTotal;
        if (w < minFrac || count >= MAX_ELEMENTS) break;  // sorted: the rest are narrower
        add(c, x, w, top[2] + 1, false);
        stack.push([c, x, top[2] + 1]);
        x += w;
      }
    }
    box.appendChild(frag);
    box.style.height = (rows * ROW) + "px";
    const shown = th.focus === 0 ? "" : " | zoomed to " + names[t.name[th.focus]];
    const found = matcher ? " | search: " + fmtMs(matchedTime(th)) + " ms (" +
      pct(matchedTime(th), t.total[0]) + ")" : "";
    th.info.textContent = fmtMs(t.total[0]) + " ms, " + (t.name.length - 1) + " call paths" +
      shown + found;
  }

  function renderAll() {
    for (const th of threads) render(th);
  }

  const tooltip = document.getElementById("tooltip");
  function showTip(th, node, ev) {
    const t = th.t;
    const lines = node === 0 ? ["all of " + t.label] : [names[t.name[node]]];
    lines.push("total " + fmtMs(t.total[node]) + " ms (" + pct(t.total[node], t.total[0]) +
      " of thread), self " + fmtMs(t.self[node]) + " ms, " + t.calls[node] + " calls");
    tooltip.textContent = lines.join("\n");
    tooltip.style.whiteSpace = "pre-wrap";
    tooltip.hidden = false;
    tooltip.style.left = Math.min(ev.clientX + 12, window.innerWidth - 400) + "px";
    tooltip.style.top = (ev.clientY + 14) + "px";
  }

  const flames = document.getElementById("flames");
  for (const th of threads) {
    const sec = document.createElement("div");
    sec.className = "thread";
    const h = document.createElement("h2");
    const label = document.createElement("span");
    label.textContent = th.t.label;
    const info = document.createElement("span");
    info.className = "sub";
    h.appendChild(label);
    h.appendChild(info);
    const box = document.createElement("div");
    box.className = "icicle";
    box.addEventListener("click", function (ev) {
      const el = ev.target.closest(".frame");
      if (!el) return;
      const node = Number(el.dataset.node);
      th.focus = node === th.focus ? Math.max(th.t.parent[node], 0) : node;
      render(th);
    });
    box.addEventListener("mousemove", function (ev) {
      const el = ev.target.closest(".frame");
      if (el) showTip(th, Number(el.dataset.node), ev);
      else tooltip.hidden = true;
    });
    box.addEventListener("mouseleave", function () { tooltip.hidden = true; });
    sec.appendChild(h);
    sec.appendChild(box);
    flames.appendChild(sec);
    th.box = box;
    th.info = info;
  }

  // ---- summary table ---------------------------------------------------------------------
  const tbody = document.querySelector("#table tbody");
  const rows = data.table.map(function (r) {
    const tr = document.createElement("tr");
    const cells = [r[0], String(r[2]), fmtMs(r[4]), pct(r[4], data.wall_ns), fmtMs(r[3])];
    for (const c of cells) {
      const td = document.createElement("td");
      td.textContent = c;
      tr.appendChild(td);
    }
    tr.title = r[1];
    tbody.appendChild(tr);
    return { tr: tr, values: [r[0], r[1], r[2], r[3], r[4], r[4]] };
  });
  let sortKey = 4;
  let ascending = false;
  function sortTable() {
    rows.sort(function (a, b) {
      const x = a.values[sortKey];
      const y = b.values[sortKey];
      const c = typeof x === "string" ? x.localeCompare(y) : x - y;
      return ascending ? c : -c;
    });
    for (const r of rows) tbody.appendChild(r.tr);
    for (const th of document.querySelectorAll("#table th")) {
      const on = Number(th.dataset.key) === sortKey;
      th.classList.toggle("sorted", on);
      th.classList.toggle("asc", on && ascending);
    }
  }
  for (const th of document.querySelectorAll("#table th")) {
    th.addEventListener("click", function () {
      const key = Number(th.dataset.key);
      ascending = key === sortKey ? !ascending : th.dataset.type === "s";
      sortKey = key;
      sortTable();
    });
  }
  function filterTable() {
    for (const r of rows) r.tr.classList.toggle("hidden", matches !== null && !matches(r.values[0]));
  }

  // ---- page ------------------------------------------------------------------------------
  document.title = data.title;
  document.getElementById("title").textContent = data.title;
  document.getElementById("meta").textContent = data.events + " events, " +
    fmtMs(data.wall_ns) + " ms wall, " + threads.length + " thread" +
    (threads.length === 1 ? "" : "s") + ", generated " + data.generated + " by framescope";
  const notes = document.getElementById("notes");
  for (const n of data.notes) {
    const li = document.createElement("li");
    li.textContent = n;
    notes.appendChild(li);
  }
  document.getElementById("table-note").textContent = data.table_total > data.table.length
    ? "The " + data.table.length + " functions and ranges with the most self time of " +
      data.table_total + "."
    : data.table.length + " functions and ranges. Click a column to sort.";

  const search = document.getElementById("search");
  search.addEventListener("input", function () {
    matches = compileQuery(search.value);
    matcher = null;
    if (matches) {
      matcher = new Uint8Array(names.length);
      for (let i = 0; i < names.length; i++) matcher[i] = matches(names[i]) ? 1 : 0;
    }
    const result = document.getElementById("search-result");
    if (matcher) {
      let n = 0;
      for (let i = 0; i < matcher.length; i++) n += matcher[i];
      result.textContent = n + " matching name" + (n === 1 ? "" : "s");
    } else {
      result.textContent = "";
    }
    renderAll();
    filterTable();
  });
  function resetZoom() {
    for (const th of threads) th.focus = 0;
    renderAll();
  }
  document.getElementById("reset").addEventListener("click", resetZoom);
  document.addEventListener("keydown", function (ev) {
    if (ev.key === "Escape") resetZoom();
  });
  let resizeTimer = 0;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(renderAll, 100);
  });
  sortTable();
  renderAll();
  document.body.dataset.ready = "1";
})();
