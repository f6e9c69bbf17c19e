// groundstream dashboard: polls /api/summary and /api/review, follows /api/events (SSE).
// Every value from the server is written with textContent: nothing is parsed as HTML.
"use strict";

const OUTCOMES = [
  ["state", "state", "good"],
  ["escalations.fallback", "fallback", "info"],
  ["escalations.regenerate", "regenerate", "info"],
  ["escalations.reject", "reject", "bad"],
  ["escalations.review", "review", "warn"],
  ["deadletter", "deadletter", "muted"],
];
const STAGE_ORDER = ["geometry", "switch", "consistency", "judge", "rules", "review"];
const ACTION_CLASS = {
  accept: "good", committed: "good", pass: "good",
  reject: "bad", deadletter: "bad",
  escalate: "warn", review: "warn", requires_clarification: "warn", unresolved: "warn",
  fallback: "info", regenerate: "info",
};
const MAX_ROWS = 200;

const $ = (id) => document.getElementById(id);
const state = { writesEnabled: true, killSwitch: false, filter: "", pendingLogin: null };

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

function fmtTime(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return isNaN(d) ? String(iso) : d.toLocaleTimeString([], { hour12: false });
}

function fmtAgo(epochSeconds) {
  const s = Math.max(0, Date.now() / 1000 - epochSeconds);
  if (s < 60) return `${Math.round(s)}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  return `${(s / 3600).toFixed(1)}h ago`;
}

const fmtScore = (x) => (typeof x === "number" ? x.toFixed(3) : "");
const actionClass = (a) => ACTION_CLASS[a] || "muted";

// ---------------------------------------------------------------- credentials --

const creds = {
  get by() { return sessionStorage.getItem("gs.by") || ""; },
  get token() { return sessionStorage.getItem("gs.token") || ""; },
  save(by, token) {
    sessionStorage.setItem("gs.by", by);
    sessionStorage.setItem("gs.token", token);
    showWho();
  },
  forgetToken() { sessionStorage.removeItem("gs.token"); showWho(); },
  clear() { sessionStorage.removeItem("gs.by"); sessionStorage.removeItem("gs.token"); showWho(); },
};

function showWho() {
  $("who").textContent = creds.token ? `reviewer: ${creds.by}` : "";
  $("creds").textContent = creds.token ? "Sign out" : "Sign in";
}

function askCreds() {
  if (creds.by && creds.token) return Promise.resolve(true);
  $("login-by").value = creds.by;
  $("login-token").value = "";
  $("login").showModal();
  return new Promise((resolve) => { state.pendingLogin = resolve; });
}

function closeLogin(ok) {
  if (ok) {
    const by = $("login-by").value.trim();
    const token = $("login-token").value;
    if (!by || !token) return;
    creds.save(by, token);
  }
  const resolve = state.pendingLogin;
  state.pendingLogin = null;
  $("login").close();
  if (resolve) resolve(ok);
}

// ------------------------------------------------------------------------ api --

async function getJSON(path) {
  const res = await fetch(path, { cache: "no-store" });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.error || `${res.status} ${res.statusText}`);
  return body;
}

async function post(path, body) {
  if (!state.writesEnabled) {
    throw new Error("GROUNDSTREAM_WEB_TOKEN is not set on the server: actions are disabled");
  }
  if (!(await askCreds())) return null;
  const res = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${creds.token}` },
    body: JSON.stringify({ ...body, by: creds.by }),
  });
  const data = await res.json().catch(() => ({}));
  if (res.status === 401) creds.forgetToken();
  if (!res.ok) throw new Error(data.error || `${res.status} ${res.statusText}`);
  return data;
}

// -------------------------------------------------------------------- summary --

function renderCards(s) {
  const total = s.candidates_finished || 0;
  const cards = OUTCOMES.map(([topic, label, cls]) => {
    const n = s.outcomes[topic] || 0;
    const pct = total ? `${((100 * n) / total).toFixed(1)}%` : "–";
    return el("div", { class: `card ${cls}`, title: topic },
      el("div", { class: "label", text: label }),
      el("div", { class: "value", text: n.toLocaleString() }),
      el("div", { class: "sub", text: pct }));
  });
  cards.push(el("div", { class: "card plain" },
    el("div", { class: "label", text: "decisions" }),
    el("div", { class: "value", text: s.records.toLocaleString() }),
    el("div", { class: "sub", text: `${s.rate_per_minute} in the last minute` })));
  $("cards").replaceChildren(...cards);
}

function renderStages(stages) {
  const names = Object.keys(stages).sort((a, b) => {
    const ia = STAGE_ORDER.indexOf(a), ib = STAGE_ORDER.indexOf(b);
    return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || a.localeCompare(b);
  });
  const seen = new Set();
  const rows = names.map((stage) => {
    const actions = Object.entries(stages[stage])
      .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
    const total = actions.reduce((t, [, n]) => t + n, 0);
    const bar = el("div", { class: "bar" });
    for (const [action, n] of actions) {
      seen.add(action);
      const seg = el("span", { class: `seg ${actionClass(action)}`, title: `${action}: ${n}` });
      seg.style.width = `${(100 * n) / total}%`;
      bar.append(seg);
    }
    const text = actions.map(([a, n]) => `${a} ${n}`).join(" · ");
    return el("tr", {},
      el("th", { text: stage }),
      el("td", { class: "num", text: total.toLocaleString() }),
      el("td", { class: "wide" }, bar, el("div", { class: "small muted", text })));
  });
  $("stages").replaceChildren(...(rows.length ? rows : [emptyRow(3, "no decisions yet")]));
  $("legend").replaceChildren(...[...seen].sort().map((a) =>
    el("span", {}, el("i", { class: `dot ${actionClass(a)}` }), a)));
}

function kvRows(entries, empty, cls = () => "") {
  if (!entries.length) return [emptyRow(2, empty)];
  return entries.map(([k, v]) => el("tr", {},
    el("th", { text: k }), el("td", { class: `num ${cls(k, v)}`, text: String(v) })));
}

function renderSide(s) {
  $("gates").replaceChildren(...kvRows(Object.entries(s.gates), "none"));
  $("breakers").replaceChildren(...kvRows(
    s.breakers.map((b) => [`${b.endpoint} @ ${b.route}`, b.state]), "none seen",
    (k, v) => (v === "closed" ? "good-text" : "bad-text")));
  const routes = [];
  for (const [route, modes] of Object.entries(s.routes)) {
    for (const [mode, n] of Object.entries(modes)) routes.push([`${route} / ${mode}`, n]);
  }
  $("routes").replaceChildren(...kvRows(routes, "none yet"));
}

function renderHists(hists) {
  const blocks = Object.entries(hists).map(([method, h]) => {
    const max = Math.max(1, ...h.bins);
    const plot = el("div", { class: "hist" });
    h.bins.forEach((n, i) => {
      const lo = h.lo + ((h.hi - h.lo) * i) / h.bins.length;
      const b = el("span", { class: "hbar", title: `≥ ${lo.toFixed(2)}: ${n}` });
      b.style.height = `${(100 * n) / max}%`;
      plot.append(b);
    });
    for (const [name, t] of Object.entries(h.thresholds || {})) {
      if (t < h.lo || t > h.hi) continue;
      const m = el("span", { class: "mark", title: `${name} = ${t}` });
      m.style.left = `${(100 * (t - h.lo)) / (h.hi - h.lo)}%`;
      plot.append(m);
    }
    const marks = Object.entries(h.thresholds || {}).map(([k, v]) => `${k} ${v}`).join(" · ");
    return el("div", { class: "hist-block" },
      el("div", { class: "hist-title" }, el("strong", { text: method.toUpperCase() }),
        el("span", { class: "muted", text: ` ${h.count} scored` })),
      plot,
      el("div", { class: "axis small muted" },
        el("span", { text: `${h.lo}${h.under ? ` (${h.under} below)` : ""}` }),
        el("span", { text: `${h.over ? `(${h.over} above) ` : ""}${h.hi}` })),
      marks ? el("div", { class: "small muted", text: `thresholds: ${marks}` }) : "");
  });
  $("hists").replaceChildren(...(blocks.length ? blocks
    : [el("p", { class: "muted", text: "no geometry scores yet" })]));
}

function renderKill(k) {
  state.killSwitch = k.on;
  $("banner").hidden = !k.on;
  $("banner-detail").textContent = k.on
    ? `Turned on${k.by ? ` by ${k.by}` : ""}${k.at ? ` at ${new Date(k.at * 1000).toLocaleString()}` : ""}.`
    : "";
  const btn = $("kill");
  btn.textContent = k.on ? "Kill switch: ON" : "Kill switch: off";
  btn.classList.toggle("on", k.on);
  btn.title = k.on ? "Click to allow automatic acceptance again" : "Click to stop all automatic acceptance";
}

async function refreshSummary() {
  try {
    const s = await getJSON("/api/summary");
    renderCards(s);
    renderStages(s.stages);
    renderSide(s);
    renderHists(s.histograms);
    renderKill(s.kill_switch);
    $("last").textContent = s.last_decided_at ? `last decision ${fmtTime(s.last_decided_at)}` : "";
  } catch (err) {
    $("last").textContent = `summary unavailable: ${err.message}`;
  }
}

async function refreshHealth() {
  try {
    const h = await getJSON("/api/health");
    state.writesEnabled = h.writes_enabled;
    for (const id of ["kill", "creds"]) {
      $(id).disabled = !h.writes_enabled;
      if (!h.writes_enabled) $(id).title = "GROUNDSTREAM_WEB_TOKEN is not set: read-only";
    }
    if (!h.feed.connected) setConn("broker unreachable", "bad");
  } catch {
    setConn("server unreachable", "bad");
  }
}

// --------------------------------------------------------------------- review --

function reviewMsg(text, cls = "") {
  const m = $("review-msg");
  m.hidden = !text;
  m.textContent = text || "";
  m.className = `msg ${cls}`;
}

async function decide(item, verdict, noteInput, buttons) {
  buttons.forEach((b) => { b.disabled = true; });
  try {
    const res = await post(`/api/review/${encodeURIComponent(item.candidate_id)}`,
      { verdict, note: noteInput.value });
    if (res) reviewMsg(`${item.candidate_id}: ${verdict}ed by ${creds.by}`, "good-text");
  } catch (err) {
    reviewMsg(`${item.candidate_id}: ${err.message}`, "bad-text");
  }
  buttons.forEach((b) => { b.disabled = false; });
  refreshReview();
}

function renderReview(items) {
  $("review-count").textContent = String(items.length);
  const rows = items.map((item) => {
    const note = el("input", { type: "text", placeholder: "optional", maxlength: "2000" });
    const buttons = [];
    const accept = el("button", { type: "button", class: "accept", text: "Accept",
      onclick: () => decide(item, "accept", note, buttons) });
    const reject = el("button", { type: "button", class: "reject", text: "Reject",
      onclick: () => decide(item, "reject", note, buttons) });
    buttons.push(accept, reject);
    if (!state.writesEnabled) buttons.forEach((b) => { b.disabled = true; });
    return el("tr", {},
      el("td", { class: "mono" }, el("a", { href: "#", text: item.candidate_id,
        onclick: (e) => { e.preventDefault(); setFilter(item.candidate_id); } })),
      el("td", { class: "mono", text: item.session_id }),
      el("td", { class: "num", text: String(item.turn) }),
      el("td", { text: item.stage || "" }),
      el("td", { class: "reason", text: item.reason, title: item.reason }),
      el("td", { class: "small", text: fmtAgo(item.queued_at) }),
      el("td", {}, note),
      el("td", {}, el("div", { class: "actions" }, accept, reject)));
  });
  $("review").replaceChildren(...(rows.length ? rows : [emptyRow(8, "nothing waits for review")]));
}

async function refreshReview() {
  try {
    const r = await getJSON("/api/review");
    renderReview(r.pending);
  } catch (err) {
    reviewMsg(`review queue: ${err.message}`, "bad-text");
  }
}

// ------------------------------------------------------------------ decisions --

function emptyRow(span, text) {
  return el("tr", { class: "empty" }, el("td", { colspan: String(span), text }));
}

function decisionRow(d) {
  return el("tr", {},
    el("td", { class: "small", text: fmtTime(d.decided_at), title: d.decided_at || "" }),
    el("td", { class: "mono", text: d.candidate_id }),
    el("td", { class: "mono", text: d.session_id }),
    el("td", { text: d.stage === "outcome" ? `→ ${d.topic || "?"}` : d.stage }),
    el("td", {}, el("span", { class: `chip ${actionClass(d.action)}`, text: d.action })),
    el("td", { class: "reason", text: d.reason || "", title: d.reason || "" }),
    el("td", { class: "num", text: fmtScore(d.score) }),
    el("td", { text: d.method || "" }),
    el("td", { text: d.mode || "" }),
    el("td", { class: d.gate ? "warn-text" : "", text: d.gate || "" }));
}

function addDecision(d) {
  if (state.filter && d.candidate_id !== state.filter) return;
  const body = $("decisions");
  if (body.firstElementChild && body.firstElementChild.classList.contains("empty")) {
    body.replaceChildren();
  }
  body.prepend(decisionRow(d));
  while (body.childElementCount > MAX_ROWS) body.lastElementChild.remove();
}

async function loadDecisions() {
  const q = state.filter ? `&candidate_id=${encodeURIComponent(state.filter)}` : "";
  try {
    const r = await getJSON(`/api/decisions?limit=${MAX_ROWS}${q}`);
    const rows = r.decisions.map(decisionRow);
    $("decisions").replaceChildren(...(rows.length ? rows : [emptyRow(10, "no decisions")]));
  } catch (err) {
    $("decisions").replaceChildren(emptyRow(10, `decisions unavailable: ${err.message}`));
  }
}

function setFilter(value) {
  $("filter").value = value;
  state.filter = value.trim();
  loadDecisions();
}

function setConn(text, cls) {
  const c = $("conn");
  c.textContent = text;
  c.className = `pill ${cls}`;
}

function follow() {
  const source = new EventSource("/api/events");
  source.addEventListener("open", () => { setConn("live", "good"); loadDecisions(); });
  source.addEventListener("error", () => setConn("reconnecting…", "warn"));
  source.addEventListener("decision", (e) => {
    try { addDecision(JSON.parse(e.data)); } catch { /* ignore a bad event */ }
  });
}

// ----------------------------------------------------------------------- wire --

function wire() {
  showWho();
  $("login-cancel").addEventListener("click", () => closeLogin(false));
  $("login").addEventListener("close", () => {
    if (state.pendingLogin) { state.pendingLogin(false); state.pendingLogin = null; }
  });
  $("login").querySelector("form").addEventListener("submit", (e) => {
    e.preventDefault();
    closeLogin(true);
  });
  $("creds").addEventListener("click", () => {
    if (creds.token) creds.clear(); else askCreds();
  });
  $("kill").addEventListener("click", async () => {
    const on = !state.killSwitch;
    const question = on
      ? "Turn the kill switch ON? Every worker stops accepting candidates automatically."
      : "Turn the kill switch off? Workers may accept candidates automatically again.";
    if (!window.confirm(question)) return;
    try {
      const res = await post("/api/kill-switch", { on });
      if (res) renderKill({ on, by: creds.by, at: res.kill_switch.at });
    } catch (err) {
      window.alert(`Kill switch not changed: ${err.message}`);
    }
    refreshSummary();
  });
  let typing;
  $("filter").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => setFilter($("filter").value), 250);
  });
}

wire();
refreshHealth().then(() => refreshReview());
refreshSummary();
loadDecisions();
follow();
setInterval(refreshSummary, 2000);
setInterval(refreshHealth, 10000);
setInterval(refreshReview, 10000);
