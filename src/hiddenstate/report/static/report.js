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
  var T = D.T, WARM = [213, 94, 0], COOL = [0, 114, 178];
  var L, H, sig;  // the shown layer's payload, its unit count and decoded signals
  function bytes(b64) {
    var bin = atob(b64), out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  function decodeLayer(lay) {  // name -> {codes: Uint8Array (H*T, unit-major), lo, hi}, once per layer
    if (lay._sig) return lay._sig;
    lay._sig = {};
    lay.order.forEach(function (name) {
      var s = lay.signals[name];
      lay._sig[name] = {codes: bytes(s.codes), lo: s.lo, hi: s.hi};
    });
    if (lay.matrix) lay.matrix._codes = bytes(lay.matrix.codes);
    return lay._sig;
  }
  function value(name, k, t) {  // the decoded value of unit k at step t of the shown layer
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
  function num(v) {  // textview.legend_number: 3 significant digits, never "-0.00 to 0.00"
    if (v === 0) return '0';
    var a = Math.abs(v);
    if (a >= 1e-3 && a < 1e5) return String(+v.toPrecision(3));
    return v.toExponential(2).replace(/e([+-])(\d)$/, 'e$10$2');
  }
  function fmt(v) { return (v >= 0 ? '+' : '') + v.toFixed(3); }

  var pre = document.getElementById('ex-text'), readout = document.getElementById('ex-readout');
  var spans = [];
  for (var t = 0; t < T; t++) {
    var sp = document.createElement('span'), ch = D.text[t];
    sp.dataset.t = t;
    if (D.tokens) {  // a token: shown legibly (textview.legible), its line break after it
      var shown = D.shown[t], nl = shown.charAt(shown.length - 1) === '\n';
      sp.className = 'tok'; sp.textContent = nl ? shown.slice(0, -1) : shown; sp.title = JSON.stringify(ch);
      pre.appendChild(sp);
      if (nl) pre.appendChild(document.createTextNode('\n'));
    } else if (ch === '\n') { sp.className = 'nl'; pre.appendChild(sp); pre.appendChild(document.createTextNode('\n')); }
    else { sp.textContent = ch; pre.appendChild(sp); }
    spans.push(sp);
  }
  var state = {signal: null, unit: 0, layer: D.layer, head: -1, step: 0};
  function perHead() { return L.heads ? H / L.heads : H; }

  function paint() {
    var name = state.signal, k = state.unit, s = sig[name];
    var sc = scale(s.lo[k], s.hi[k]), mean = 0;
    for (var t = 0; t < T; t++) {
      var v = value(name, k, t), c = background(v, sc);
      mean += v / T;
      spans[t].style.background = 'rgba(' + c[0] + ',' + c[1] + ',' + c[2] + ',' + c[3].toFixed(3) + ')';
      spans[t].style.color = c[3] > 0.88 * 0.7 ? '#fff' : '';
    }
    var label = (name === L.order[0] ? 'unit ' + k : name + ' gate of unit ' + k) +
      (L.heads ? ' (head ' + Math.floor(k / perHead()) + ')' : '') + (D.layers.length > 1 ? ', ' + L.name : '');
    var best = L.units['best feature'];
    document.getElementById('ex-title').textContent = label + (best ? ' · tracks ' + best[k] : '');
    var bar = sc[0] === 'diverging' ? 'linear-gradient(90deg, rgba(0,114,178,.88), #fff, rgba(213,94,0,.88))'
      : 'linear-gradient(90deg, #fff, rgba(213,94,0,.88))';
    var leg = document.getElementById('ex-legend');
    leg.innerHTML = '';
    leg.appendChild(document.createTextNode(num(sc[1])));
    var b = document.createElement('span'); b.className = 'bar'; b.style.background = bar; leg.appendChild(b);
    leg.appendChild(document.createTextNode(num(sc[2]) + '   values ' + num(s.lo[k]) + ' to ' + num(s.hi[k]) +
      ', mean ' + num(mean)));
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

  // the matrix view: one head's state S_t as a heat map, a step at a time
  var canvas = document.getElementById('ex-canvas'), slider = document.getElementById('ex-step');
  function cell(r, c) {  // the decoded entry (r, c) of the shown head at the shown step
    var M = L.matrix, h = Math.max(state.head, 0), i = ((state.step * M.H + h) * M.R + r) * M.C + c;
    return M.lo[h] + M._codes[i] * (M.hi[h] - M.lo[h]) / 255;
  }
  function drawMatrix() {
    var box = document.getElementById('ex-matrix'), M = L.matrix;
    box.hidden = !M;
    if (!M) return;
    var h = Math.max(state.head, 0), px = Math.max(4, Math.floor(256 / Math.max(M.R, M.C)));
    var sc = scale(M.lo[h], M.hi[h]), ctx = canvas.getContext('2d');
    canvas.width = M.C * px; canvas.height = M.R * px;
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    for (var r = 0; r < M.R; r++) for (var c = 0; c < M.C; c++) {
      var col = background(cell(r, c), sc);
      ctx.fillStyle = 'rgba(' + col[0] + ',' + col[1] + ',' + col[2] + ',' + col[3].toFixed(3) + ')';
      ctx.fillRect(c * px, r * px, px, px);
    }
    var t = M.steps[state.step];
    canvas.dataset.head = h; canvas.dataset.step = t;
    document.getElementById('ex-mtitle').textContent = 'head ' + h + ' state S_t at step ' + t + ' (' +
      JSON.stringify(D.text[t]) + '), ' + L.name + ': rows ' + (M.R < M.rows ? '0-' + (M.R - 1) + ' of ' : '') + M.rows +
      ' (key), columns ' + (M.C < M.cols ? '0-' + (M.C - 1) + ' of ' : '') + M.cols + ' (value)';
    document.getElementById('ex-mlegend').textContent = num(sc[1]) + ' to ' + num(sc[2]) + ' (the head\'s range over ' +
      M.steps.length + ' step' + (M.steps.length === 1 ? '' : 's') + ')';
    document.getElementById('ex-stepval').textContent = 'step ' + t + ' (' + (state.step + 1) + ' of ' + M.steps.length + ' drawn)';
  }
  slider.addEventListener('input', function () { state.step = +slider.value; drawMatrix(); });

  // the unit list: searchable, sortable, filtered to the chosen head
  var list = document.getElementById('ex-units'), rows = [];
  function describe(k) {
    var parts = ['unit ' + k];
    Object.keys(L.units).forEach(function (c) {
      var v = L.units[c][k];
      if (v === null || v === undefined) return;
      parts.push(typeof v === 'string' ? v : c + ' ' + (Math.abs(v) >= 100 ? v.toFixed(0) : v.toPrecision(3)));
    });
    return parts.join(' · ');
  }
  function order() {
    var key = document.getElementById('ex-sort').value, q = document.getElementById('ex-search').value.trim().toLowerCase();
    var idx = [], per = perHead();
    for (var i = 0; i < H; i++) if (state.head < 0 || Math.floor(i / per) === state.head) idx.push(i);
    if (key !== 'unit' && L.units[key]) {
      var col = L.units[key];
      idx.sort(function (a, b) {
        var va = col[a] === null ? -Infinity : col[a], vb = col[b] === null ? -Infinity : col[b];
        return vb - va || a - b;
      });
    }
    list.innerHTML = '';
    // a bare unit number ("7" or "unit 7") lists that unit first and shows it; text matches follow
    var m = /^(?:unit\s*)?(\d+)$/.exec(q), exact = m && +m[1] < H ? +m[1] : -1;
    if (exact >= 0) list.appendChild(rows[exact]);
    idx.forEach(function (i) {
      var hit = !q || rows[i].textContent.toLowerCase().indexOf(q) >= 0;
      if (hit && i !== exact) list.appendChild(rows[i]);
    });
    if (exact >= 0 && exact !== state.unit) choose(exact);
  }
  function chooseHead(h) {
    state.head = L.heads && h >= 0 && h < L.heads ? h : -1;
    document.getElementById('ex-head').value = String(state.head);
    order();
    if (state.head >= 0 && Math.floor(state.unit / perHead()) !== state.head) choose(state.head * perHead());
    drawMatrix();
  }
  function chooseLayer(j) {
    state.layer = j; L = D.layers[j]; H = L.H; sig = decodeLayer(L);
    document.getElementById('ex-layer').value = String(j);
    var sigbox = document.getElementById('ex-signals');
    sigbox.innerHTML = '';
    L.order.forEach(function (name, i) {  // the state and each embedded gate of the chosen unit
      var bt = document.createElement('button');
      bt.type = 'button'; bt.dataset.signal = name;
      bt.textContent = i === 0 ? 'state ' + name : 'gate ' + name;
      bt.addEventListener('click', function () { choose(undefined, name); });
      sigbox.appendChild(bt);
    });
    var heads = document.getElementById('ex-head');
    heads.innerHTML = '<option value="-1">' + (L.heads ? 'all ' + L.heads : 'none') + '</option>';
    for (var h = 0; h < L.heads; h++) {
      var o = document.createElement('option'); o.value = String(h); o.textContent = 'head ' + h; heads.appendChild(o);
    }
    heads.disabled = !L.heads;
    rows = [];
    for (var k = 0; k < H; k++) {
      var li = document.createElement('li');
      li.dataset.unit = k; li.textContent = describe(k); li.tabIndex = 0;
      li.addEventListener('click', (function (u) { return function () { choose(u); }; })(k));
      rows.push(li);
    }
    if (L.matrix) { slider.max = String(L.matrix.steps.length - 1); state.step = Math.min(state.step, L.matrix.steps.length - 1); slider.value = String(state.step); }
    state.signal = sig[state.signal] ? state.signal : L.order[0];
    state.unit = Math.min(state.unit, H - 1);
    chooseHead(-1);
    paint();
  }
  document.getElementById('ex-layer').addEventListener('change', function (ev) { chooseLayer(+ev.target.value); });
  document.getElementById('ex-head').addEventListener('change', function (ev) { chooseHead(+ev.target.value); });
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
    var t = +s.dataset.t, h = L.order[0];
    var msg = 't = ' + t + '   ' + JSON.stringify(D.text[t]) + '   ' + state.signal + ' = ' +
      fmt(value(state.signal, state.unit, t));
    if (L.norm) msg += '   ‖h‖ = ' + L.norm[t].toFixed(3);
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
  document.querySelectorAll('button.ex-feat').forEach(function (bt) {  // the top layer's featured units
    bt.addEventListener('click', function () {
      if (state.layer !== D.layers.length - 1) chooseLayer(D.layers.length - 1);
      choose(+bt.dataset.unit, bt.dataset.signal);
    });
  });

  window.hsExplorer = {choose: choose, match: match, value: value, state: state, chooseLayer: chooseLayer,
                       chooseHead: chooseHead, cell: cell, num: num};
  chooseLayer(D.layer);
  var first = document.querySelector('button.ex-feat');
  if (first) first.click(); else choose(0);
})();
