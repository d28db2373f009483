// The console's live view: fetch the decisions after the newest shown, once a second,
// and add them at the top of the table (text only: nothing from a URL becomes markup).
"use strict";
(function () {
  const table = document.getElementById("live");
  if (!table) { return; }
  const body = table.querySelector("tbody");
  const base = table.dataset.events;
  let after = table.dataset.after || "0";
  const query = new URLSearchParams(window.location.search);
  const keep = 500;
  function cell(row, text) {
    const td = document.createElement("td");
    td.textContent = text;
    row.appendChild(td);
    return td;
  }
  async function tick() {
    query.set("after", after);
    try {
      const response = await fetch(base + "?" + query.toString(), {credentials: "same-origin"});
      if (response.status === 401) { window.location.reload(); return; }
      if (!response.ok) { return; }
      const data = await response.json();
      const rows = data.events;
      for (let i = rows.length - 1; i >= 0; i--) {
        const e = rows[i];
        const row = document.createElement("tr");
        row.className = e.action;
        cell(row, e.time);
        cell(row, (e.origin || "-") + (e.pid ? "[" + e.pid + "]" : ""));
        cell(row, e.client || "-");
        cell(row, e.group || "-");
        cell(row, e.action);
        cell(row, e.category || "-");
        cell(row, e.rule || "-");
        const link = document.createElement("a");
        link.href = data.explain + "?url=" + encodeURIComponent(e.url) + "&client=" + encodeURIComponent(e.client || "");
        link.textContent = e.url;
        cell(row, "").appendChild(link);
        body.insertBefore(row, body.firstChild);
      }
      while (body.rows.length > keep) { body.deleteRow(body.rows.length - 1); }
      after = String(data.after);
    } catch (err) {
      // the service restarting: try again on the next tick
    }
  }
  window.setInterval(tick, 1000);
})();
