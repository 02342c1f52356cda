// outbox dashboard: live refresh of the overview, confirmations, select-all.
// Plain script, served from the package: no framework, nothing loaded from elsewhere.
(function () {
  "use strict";

  function refresh(box) {
    var state = document.getElementById("live-state");
    var every = Math.max(1, parseFloat(box.getAttribute("data-interval")) || 5) * 1000;
    function tick() {
      if (document.hidden) { return; }
      fetch(box.getAttribute("data-live"), { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) {
          if (!r.ok) { throw new Error(r.status); }
          return r.text();
        })
        .then(function (html) {
          box.innerHTML = html;
          if (state) {
            state.textContent = "live · updated " + new Date().toISOString().substring(11, 19) + " UTC";
            state.classList.remove("stale");
          }
        })
        .catch(function () {
          if (state) { state.textContent = "not updating: the dashboard did not answer"; state.classList.add("stale"); }
        });
    }
    setInterval(tick, every);
    document.addEventListener("visibilitychange", function () { if (!document.hidden) { tick(); } });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var live = document.querySelector("[data-live]");
    if (live) { refresh(live); }

    document.addEventListener("click", function (event) {
      var button = event.target.closest("[data-confirm]");
      if (button && !window.confirm(button.getAttribute("data-confirm"))) {
        event.preventDefault();
      }
    });

    document.querySelectorAll("[data-select-all]").forEach(function (all) {
      all.addEventListener("change", function () {
        all.form.querySelectorAll("input[type=checkbox][name=id]").forEach(function (box) {
          box.checked = all.checked;
        });
      });
    });
  });
})();
