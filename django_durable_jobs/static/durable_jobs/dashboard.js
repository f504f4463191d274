/* The dashboard of django_durable_jobs refreshes its panels in place.
 *
 * Every data-refresh seconds it fetches the panels alone (?fragment=1) and swaps them in, so the
 * page never flashes; it says how long ago the last update arrived, fetches nothing while the tab
 * is hidden and catches up as soon as it is shown again. Without this script the page is whole,
 * only still. No library, no outside network.
 */
(function () {
  "use strict";
  var root = document.getElementById("dj-dashboard");
  if (!root || !window.fetch || !window.DOMParser) {
    return;
  }
  var seconds = parseFloat(root.getAttribute("data-refresh")) || 5;
  var url = root.getAttribute("data-fragment-url");
  var live = document.getElementById("dj-updated");
  var updatedAt = Date.now();
  var busy = false;
  var problem = "";

  function say() {
    var ago = Math.max(0, Math.floor((Date.now() - updatedAt) / 1000));
    var text = "Updated " + ago + " s ago";
    if (document.hidden) {
      text += ", paused while the tab is hidden";
    } else if (problem) {
      text += "; the last update failed (" + problem + "), retrying";
    } else {
      text += ", every " + seconds + " s";
    }
    live.textContent = text;
    live.classList.toggle("dj-warn", Boolean(problem));
  }

  function refresh() {
    if (busy || document.hidden) {
      return;
    }
    busy = true;
    fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("dj-panels");
        if (!fresh) {
          throw new Error("signed out? reload the page");
        }
        document.getElementById("dj-panels").replaceWith(document.adoptNode(fresh));
        updatedAt = Date.now();
        problem = "";
      })
      .catch(function (error) {
        problem = error.message;
      })
      .then(function () {
        busy = false;
        say();
      });
  }

  document.addEventListener("visibilitychange", function () {
    say();
    refresh();
  });
  window.setInterval(refresh, seconds * 1000);
  window.setInterval(say, 1000);
  say();
})();
