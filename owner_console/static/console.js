// The owner console's one script (CSP: script-src 'self'; no inline script anywhere).
// On a phone the nav is one line that scrolls sideways: it brings the current page's link
// into view. And it keeps the holds page live: every few seconds, while the page is visible, it asks
// /owner/holds.json for the pending holds and rebuilds the table. Each ask is a holds_list
// call through the owner door, audited like any other: after ten minutes without a touch,
// a key or the page coming back into view it pauses until the next one, so a forgotten tab
// does not fill the audit log. Every value is put in
// with textContent or as an attribute value, never as markup, so a visitor's arguments
// stay text whatever they hold.
"use strict";

(function () {
  var here = document.querySelector('header nav [aria-current="page"]');
  if (!here) { return; }
  var nav = here.parentNode;
  nav.scrollLeft = here.offsetLeft - (nav.clientWidth - here.offsetWidth) / 2;
})();

(function () {
  var POLL_MS = 2000;
  var IDLE_MS = 10 * 60 * 1000;
  var table = document.getElementById("holds");
  if (!table) { return; }
  var csrf = document.querySelector('meta[name="csrf-token"]').getAttribute("content");
  var body = table.querySelector("tbody");
  var empty = document.getElementById("holds-empty");
  var state = document.getElementById("holds-state");
  var shown = "";
  var lastSeen = Date.now();

  function cell(row, label, text, asCode) {
    var td = document.createElement("td");
    td.setAttribute("data-label", label);
    var inner = document.createElement(asCode ? "code" : "span");
    inner.textContent = text == null ? "" : String(text);
    td.appendChild(inner);
    row.appendChild(td);
    return td;
  }

  function hidden(form, name, value) {
    var input = document.createElement("input");
    input.type = "hidden";
    input.name = name;
    input.value = value;
    form.appendChild(input);
  }

  function decide(hold) {
    var form = document.createElement("form");
    form.method = "post";
    form.action = "/owner/holds/decide";
    form.className = "decide";
    hidden(form, "csrf", csrf);
    hidden(form, "id", hold.id);
    [["approve", "Approve", ""], ["deny", "Deny", "danger"]].forEach(function (b) {
      var button = document.createElement("button");
      button.type = "submit";
      button.name = "decision";
      button.value = b[0];
      button.textContent = b[1];
      if (b[2]) { button.className = b[2]; }
      form.appendChild(button);
      form.appendChild(document.createTextNode(" "));
    });
    return form;
  }

  function render(holds) {
    var key = JSON.stringify(holds.map(function (h) { return h.id; }));
    if (key === shown) { return; }
    shown = key;
    var rows = holds.map(function (h) {
      var row = document.createElement("tr");
      row.setAttribute("data-hold", h.id);
      cell(row, "Hold", h.id, true);
      var tool = cell(row, "Tool", h.tool, true);
      tool.appendChild(document.createTextNode(" of "));
      var capability = document.createElement("code");
      capability.textContent = h.capability;
      tool.appendChild(capability);
      cell(row, "Session", h.session_id, true);
      var args = document.createElement("td");
      args.setAttribute("data-label", "Visitor's arguments");
      var pre = document.createElement("pre");
      pre.className = "arguments";
      pre.textContent = h.arguments_text;
      args.appendChild(pre);
      row.appendChild(args);
      cell(row, "Expires", h.expires, false);
      var actions = document.createElement("td");
      actions.className = "decide";
      actions.appendChild(decide(h));
      row.appendChild(actions);
      return row;
    });
    body.replaceChildren.apply(body, rows);
    empty.hidden = holds.length > 0;
  }

  function poll() {
    if (document.visibilityState !== "visible") { return; }
    if (Date.now() - lastSeen > IDLE_MS) {
      state.textContent = "Paused while you are away; touch the page or press a key to resume.";
      return;
    }
    fetch("/owner/holds.json", { headers: { "X-CSRF-Token": csrf }, credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (r.status === 401) { window.location.assign("/owner/login"); return null; }
        return r.ok ? r.json() : null;
      })
      .then(function (answer) {
        if (!answer) { return; }
        state.textContent = answer.error ? answer.error : "";
        render(answer.holds || []);
      })
      .catch(function () { state.textContent = "The host did not answer; trying again."; });
  }

  shown = JSON.stringify(Array.prototype.map.call(body.querySelectorAll("tr[data-hold]"), function (r) {
    return r.getAttribute("data-hold");
  }));
  function seen() {
    var paused = Date.now() - lastSeen > IDLE_MS;
    lastSeen = Date.now();
    if (paused) { state.textContent = ""; poll(); }
  }

  setInterval(poll, POLL_MS);
  ["pointerdown", "keydown", "visibilitychange"].forEach(function (name) {
    document.addEventListener(name, function () { seen(); if (name === "visibilitychange") { poll(); } });
  });
})();
