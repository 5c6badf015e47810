/* stateflow studio: what the pages add to htmx (no inline script: the content security policy
   allows only this server's files). An in-page action whose request got no answer — the server
   stopped, restarting or unreachable — says so where its result would have gone and can be
   tried again; htmx alone leaves the page as it was, a lazy node "loading…" forever. */
(function () {
  "use strict";
  // a page answering a form's POST (a refused save) names the page it stands for: with that
  // address in the bar, reload and Back load the page, not the form again or a POST-only URL
  var address = document.body && document.body.dataset.address;
  if (address && window.history.replaceState) window.history.replaceState(null, "", address);

  var NO_ANSWER = "The server did not answer (stopped, restarting or unreachable).";

  function isLazy(elt) {
    return elt.matches("details.lazy-load");
  }

  function note(tag, text) {
    var el = document.createElement(tag);
    el.className = "alert alert-error net-error";
    el.setAttribute("role", "alert");
    el.textContent = text;
    return el;
  }

  document.addEventListener("htmx:beforeRequest", function (e) {
    var elt = e.detail.elt;
    if (isLazy(elt)) {
      // a lazy node loads when it is opened, until a load has succeeded (then it keeps what
      // it loaded): after a failed one, closing and opening it again retries
      if (!elt.open || elt.dataset.loaded === "yes") {
        e.preventDefault();
        return;
      }
      var list = elt.querySelector("ul");
      if (list && list.querySelector(".net-error")) {
        var loading = document.createElement("li");
        loading.className = "muted loading";
        loading.textContent = "loading…";
        list.replaceChildren(loading);
      }
      return;
    }
    var after = elt.nextElementSibling;
    if (after && after.classList.contains("net-error")) after.remove();
  });

  document.addEventListener("htmx:afterRequest", function (e) {
    if (isLazy(e.detail.elt) && e.detail.successful) e.detail.elt.dataset.loaded = "yes";
  });

  document.addEventListener("htmx:sendError", function (e) {
    var elt = e.detail.elt;
    var target = e.detail.target;
    if (isLazy(elt)) {
      target.replaceChildren(note("li", NO_ANSWER + " Close this node and open it again to retry."));
      return;
    }
    var swap = elt.getAttribute("hx-swap") || "innerHTML";
    if (elt.tagName === "FORM") {
      // a program run may be a write: whether it reached the store is not known
      target.replaceChildren(
        note("div", NO_ANSWER + " Run it again when the server is back; reload the page first to see whether a change was made.")
      );
    } else if (swap.indexOf("outerHTML") === 0) {
      // the control would have been replaced by the result: it stays, to be used again
      elt.insertAdjacentElement("afterend", note("div", NO_ANSWER + " Try again when it is back."));
    } else {
      target.replaceChildren(note("div", NO_ANSWER + " Try again when it is back."));
    }
  });
})();
