// Hovering a character of a text view (hiddenstate.report.textview) shows its step and value.
// Inlined into every page by hiddenstate.report.page (package data).
(function () {
  document.querySelectorAll('pre.chars').forEach(function (pre) {
    var out = document.getElementById(pre.dataset.readout);
    pre.addEventListener('mouseover', function (ev) {
      var s = ev.target;
      if (!s || s.tagName !== 'SPAN' || s.dataset.v === undefined) return;
      var ch = s.classList.contains('nl') ? '\n' : s.textContent;  // JSON shows a newline as "\n"
      out.textContent = 't = ' + s.dataset.t + '   ' + JSON.stringify(ch) + '   value ' + s.dataset.v;
    });
  });
})();
