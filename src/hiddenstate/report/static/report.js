// The report's script, inlined into every page by hiddenstate.report.page (package data).
// 1. Hovering a character of a static text view (hiddenstate.report.textview) shows its step and value.
// 2. The explorer (hiddenstate.report.explorer): decodes the 8-bit activations embedded in the page
//    and colours the text by any unit and signal; the colour map mirrors textview.colour_scale and
//    textview.background. Plain JavaScript, no network.
(function () {
  document.querySelectorAll('pre.chars').forEach(function (pre) {
    if (pre.id === 'ex-text') return;
    var out = document.getElementById(pre.dataset.readout);
    pre.addEventListener('mouseover', function (ev) {
      var s = ev.target;
      if (!s || s.tagName !== 'SPAN' || s.dataset.v === undefined) return;
      var ch = s.classList.contains('nl') ? '\n' : s.textContent;  // JSON shows a newline as "\n"
      out.textContent = 't = ' + s.dataset.t + '   ' + JSON.stringify(ch) + '   value ' + s.dataset.v;
    });
  });

  var node = document.getElementById('ex-data');
  if (!node) return;
  var D = JSON.parse(node.textContent);
  var T = D.T, H = D.H;
  var WARM = [213, 94, 0], COOL = [0, 114, 178];
  var sig = {};  // name -> {codes: Uint8Array (H*T, unit-major), lo, hi}
  D.order.forEach(function (name) {
    var s = D.signals[name], bin = atob(s.codes), codes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) codes[i] = bin.charCodeAt(i);
    sig[name] = {codes: codes, lo: s.lo, hi: s.hi};
  });
  function value(name, k, t) {  // the decoded value of unit k at step t
    var s = sig[name];
    return s.lo[k] + s.codes[k * T + t] * (s.hi[k] - s.lo[k]) / 255;
  }
  function scale(lo, hi) {  // textview.colour_scale
    if (lo < 0) { var m = Math.max(Math.abs(lo), Math.abs(hi)); return ['diverging', -m, m]; }
    if (hi <= 1) return ['gate', 0, 1];
    return ['sequential', lo, hi];
  }
  function background(v, sc) {  // textview.background
    var f, c;
    if (sc[0] === 'diverging') { f = sc[2] > 0 ? Math.min(Math.abs(v) / sc[2], 1) : 0; c = v >= 0 ? WARM : COOL; }
    else { f = sc[2] > sc[1] ? Math.min(Math.max((v - sc[1]) / (sc[2] - sc[1]), 0), 1) : 0; c = WARM; }
    return [c[0], c[1], c[2], 0.88 * f];
  }
  function fmt(v) { return (v >= 0 ? '+' : '') + v.toFixed(3); }

  var pre = document.getElementById('ex-text'), readout = document.getElementById('ex-readout');
  var spans = [];
  for (var t = 0; t < T; t++) {
    var sp = document.createElement('span'), ch = D.text[t];
    sp.dataset.t = t;
    if (ch === '\n') { sp.className = 'nl'; pre.appendChild(sp); pre.appendChild(document.createTextNode('\n')); }
    else { sp.textContent = ch; pre.appendChild(sp); }
    spans.push(sp);
  }
  var state = {signal: D.order[0], unit: 0};

  function paint() {
    var name = state.signal, k = state.unit, s = sig[name];
    var sc = scale(s.lo[k], s.hi[k]), mean = 0;
    for (var t = 0; t < T; t++) {
      var v = value(name, k, t), c = background(v, sc);
      mean += v / T;
      spans[t].style.background = 'rgba(' + c[0] + ',' + c[1] + ',' + c[2] + ',' + c[3].toFixed(3) + ')';
      spans[t].style.color = c[3] > 0.88 * 0.7 ? '#fff' : '';
    }
    var label = name === D.order[0] ? 'unit ' + k : name + ' gate of unit ' + k;
    var best = D.units['best feature'];
    document.getElementById('ex-title').textContent = label + (best ? ' · tracks ' + best[k] : '');
    var bar = sc[0] === 'diverging' ? 'linear-gradient(90deg, rgba(0,114,178,.88), #fff, rgba(213,94,0,.88))'
      : 'linear-gradient(90deg, #fff, rgba(213,94,0,.88))';
    var leg = document.getElementById('ex-legend');
    leg.innerHTML = '';
    leg.appendChild(document.createTextNode(sc[1].toFixed(2)));
    var b = document.createElement('span'); b.className = 'bar'; b.style.background = bar; leg.appendChild(b);
    leg.appendChild(document.createTextNode(sc[2].toFixed(2) + '   values ' + s.lo[k].toFixed(2) + ' to ' +
      s.hi[k].toFixed(2) + ', mean ' + mean.toFixed(2)));
    document.querySelectorAll('#ex-signals button').forEach(function (bt) {
      bt.classList.toggle('on', bt.dataset.signal === name);
    });
    document.querySelectorAll('#ex-units li').forEach(function (li) {
      li.classList.toggle('on', +li.dataset.unit === k);
    });
  }
  function choose(unit, signal) {
    if (signal !== undefined && sig[signal]) state.signal = signal;
    if (unit !== undefined && unit >= 0 && unit < H) state.unit = unit;
    paint();
  }

  // the signal buttons: the state and each embedded gate of the chosen unit
  var sigbox = document.getElementById('ex-signals');
  D.order.forEach(function (name, i) {
    var bt = document.createElement('button');
    bt.type = 'button'; bt.dataset.signal = name;
    bt.textContent = i === 0 ? 'state ' + name : 'gate ' + name;
    bt.addEventListener('click', function () { choose(undefined, name); });
    sigbox.appendChild(bt);
  });
  document.querySelectorAll('button.ex-feat').forEach(function (bt) {
    bt.addEventListener('click', function () { choose(+bt.dataset.unit, bt.dataset.signal); });
  });

  // the unit list: searchable, sortable
  var list = document.getElementById('ex-units'), cols = Object.keys(D.units);
  function describe(k) {
    var parts = ['unit ' + k];
    cols.forEach(function (c) {
      var v = D.units[c][k];
      if (v === null || v === undefined) return;
      parts.push(typeof v === 'string' ? v : c + ' ' + (Math.abs(v) >= 100 ? v.toFixed(0) : v.toPrecision(3)));
    });
    return parts.join(' · ');
  }
  var rows = [];
  for (var k = 0; k < H; k++) {
    var li = document.createElement('li');
    li.dataset.unit = k; li.textContent = describe(k); li.tabIndex = 0;
    li.addEventListener('click', (function (u) { return function () { choose(u); }; })(k));
    rows.push(li);
  }
  function order() {
    var key = document.getElementById('ex-sort').value, q = document.getElementById('ex-search').value.trim().toLowerCase();
    var idx = rows.map(function (_, i) { return i; });
    if (key !== 'unit' && D.units[key]) {
      var col = D.units[key];
      idx.sort(function (a, b) {
        var va = col[a] === null ? -Infinity : col[a], vb = col[b] === null ? -Infinity : col[b];
        return vb - va || a - b;
      });
    }
    list.innerHTML = '';
    // a bare unit number ("7" or "unit 7") lists that unit first and shows it; text matches follow
    var num = /^(?:unit\s*)?(\d+)$/.exec(q), exact = num && +num[1] < H ? +num[1] : -1;
    if (exact >= 0) list.appendChild(rows[exact]);
    idx.forEach(function (i) {
      var hit = !q || rows[i].textContent.toLowerCase().indexOf(q) >= 0;
      if (hit && i !== exact) list.appendChild(rows[i]);
    });
    if (exact >= 0 && exact !== state.unit) choose(exact);
  }
  document.getElementById('ex-sort').addEventListener('change', order);
  document.getElementById('ex-search').addEventListener('input', order);

  // hover: the value, the state's norm and the units most active at this step
  function top(name, t, n) {
    var idx = [];
    for (var k = 0; k < H; k++) idx.push(k);
    idx.sort(function (a, b) { return Math.abs(value(name, b, t)) - Math.abs(value(name, a, t)) || a - b; });
    return idx.slice(0, n);
  }
  pre.addEventListener('mouseover', function (ev) {
    var s = ev.target;
    if (!s || s.tagName !== 'SPAN') return;
    var t = +s.dataset.t, h = D.order[0];
    var msg = 't = ' + t + '   ' + JSON.stringify(D.text[t]) + '   ' + state.signal + ' = ' +
      fmt(value(state.signal, state.unit, t));
    if (D.norm) msg += '   ‖h‖ = ' + D.norm[t].toFixed(3);
    msg += '   top units: ' + top(h, t, 5).map(function (k) { return k + ' (' + fmt(value(h, k, t)) + ')'; }).join(', ');
    readout.textContent = msg;
  });

  // select a span: units on (value > threshold) at every step of it, rarest elsewhere first
  function match(a, b) {
    state.span = [a, b];  // redone when the threshold changes
    var name = state.signal, thr = parseFloat(document.getElementById('ex-thr').value), out = [];
    if (!(thr === thr)) thr = 0.5;
    for (var k = 0; k < H; k++) {
      var all = true;
      for (var t = a; t <= b && all; t++) all = value(name, k, t) > thr;
      if (!all) continue;
      var rest = 0;
      for (var u = 0; u < T; u++) if ((u < a || u > b) && value(name, k, u) > thr) rest++;
      out.push([k, T - (b - a + 1) > 0 ? rest / (T - (b - a + 1)) : 0]);
    }
    out.sort(function (x, y) { return x[1] - y[1] || x[0] - y[0]; });
    var box = document.getElementById('ex-matches');
    box.innerHTML = '';
    var head = document.createElement('div');
    head.textContent = out.length + ' unit' + (out.length === 1 ? '' : 's') + ' with ' + name + ' > ' + thr +
      ' on all of steps ' + a + '–' + b + (out.length ? ' (fraction of the other steps where each is on):' : '.');
    box.appendChild(head);
    out.slice(0, 20).forEach(function (m) {
      var bt = document.createElement('button');
      bt.type = 'button'; bt.className = 'ex-hit'; bt.dataset.unit = m[0];
      bt.textContent = 'unit ' + m[0] + ' · ' + (100 * m[1]).toFixed(0) + '% elsewhere';
      bt.addEventListener('click', function () { choose(m[0]); });
      box.appendChild(bt);
    });
    return out;
  }
  function selected() {
    var sel = window.getSelection();
    if (!sel || sel.rangeCount === 0 || sel.isCollapsed) return;
    var ts = spans.filter(function (sp) { return sel.containsNode(sp, true); }).map(function (sp) { return +sp.dataset.t; });
    if (ts.length) match(Math.min.apply(null, ts), Math.max.apply(null, ts));
  }
  pre.addEventListener('mouseup', selected);
  pre.addEventListener('keyup', selected);
  document.getElementById('ex-thr').addEventListener('input', function () {
    if (state.span) match(state.span[0], state.span[1]);  // the same span, the new threshold
  });

  window.hsExplorer = {choose: choose, match: match, value: value, state: state};
  order();
  var first = document.querySelector('button.ex-feat');
  if (first) first.click(); else choose(0);
})();
