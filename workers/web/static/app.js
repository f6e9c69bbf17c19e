// groundstream dashboard: polls /api/summary and /api/review, follows /api/events (SSE).
// Every value from the server is written with textContent: nothing is parsed as HTML.
// Charts are inline SVG built here: the page loads nothing from outside this server.
"use strict";

// topic, label, colour class: one colour per outcome, the same on cards, charts and chips.
const OUTCOMES = [
  ["state", "state", "state"],
  ["escalations.fallback", "fallback", "fallback"],
  ["escalations.regenerate", "regenerate", "regenerate"],
  ["escalations.reject", "reject", "reject"],
  ["escalations.review", "review", "review"],
  ["deadletter", "deadletter", "deadletter"],
];
const REVIEW_TOPIC = "escalations.review";
const STAGE_ORDER = ["geometry", "switch", "consistency", "judge", "rules", "review"];
const ACTION_CLASS = {
  accept: "good", committed: "good", pass: "good", scored: "muted",
  reject: "bad", deadletter: "bad",
  escalate: "warn", review: "warn", requires_clarification: "warn",
  unresolved: "unresolved",
  fallback: "fallback", regenerate: "regenerate", skip: "muted",
};
// Histograms: title, and which threshold is the upper (pass) and lower (review) cut.
const SCORES = {
  grounding: { title: "P(grounded)", upper: "grounding_accept", lower: "grounding_review" },
  grounding_long: {
    title: "P(grounded), long-form", upper: "grounding_long_accept", lower: "grounding_long_review",
  },
  sgi: { title: "SGI", upper: "sgi_strong_pass", lower: "sgi_review" },
  dgi: { title: "DGI", upper: "dgi_pass", lower: null },
};
const MAX_ROWS = 200;
const MINUTES = 60;
const SVG = "http://www.w3.org/2000/svg";

const $ = (id) => document.getElementById(id);
const state = {
  writesEnabled: true, killSwitch: false, filter: "", pendingLogin: null,
  reviewWaiting: null, summary: null, summaryTimer: null, reviewAsked: 0,
  proxy: null, follow: null,
};

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

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") node.textContent = v;
    else node.setAttribute(k, String(v));
  }
  for (const c of children) node.append(c);
  return node;
}

const tip = (text) => svg("title", { text });

function fmtTime(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return isNaN(d) ? String(iso) : d.toLocaleTimeString([], { hour12: false });
}

function fmtClock(ms) {
  return new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hour12: false });
}

function fmtAgo(epochSeconds) {
  const s = Math.max(0, Date.now() / 1000 - epochSeconds);
  if (s < 60) return `${Math.round(s)}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  return `${(s / 3600).toFixed(1)}h ago`;
}

const fmtScore = (x) => (typeof x === "number" ? x.toFixed(3) : "");
const fmtCut = (x) => (typeof x === "number" ? x.toFixed(4) : String(x));
// Date and time, 24-hour like every other time on the page.
const fmtDateTime = (ms) => new Date(ms).toLocaleString([], { hour12: false });
const fmtMs = (x) => (typeof x !== "number" ? "–" : x < 10 ? x.toFixed(1) : Math.round(x).toLocaleString());
const actionClass = (a) => ACTION_CLASS[a] || "muted";
const outcomeClass = (topic) => (OUTCOMES.find(([t]) => t === topic) || [0, 0, "muted"])[2];

// The one score a row shows: P(grounded) where the geometry stage computed it (the switch
// routes on it), else the record's own score. Geometry rows carry SGI beside it.
function routedScore(d) {
  const p = d.evidence && d.evidence.grounding_probability;
  if (typeof p === "number") {
    return { label: "P(grounded)", value: p, also: typeof d.score === "number" ? `${(d.method || "").toUpperCase()} ${fmtScore(d.score)}` : "" };
  }
  if (typeof d.score !== "number") return null;
  const label = d.method === "grounding" ? "P(grounded)" : (d.method || "score").toUpperCase();
  return { label, value: d.score, also: "" };
}

// ---------------------------------------------------------------- credentials --

// The token is the credential; who it names (a reviewer, or nobody for the shared
// dashboard token) is the server's answer (/api/me), never what was typed. Behind an
// authenticating proxy the proxy names the reviewer and the page holds no token at all.
const creds = {
  get by() { return sessionStorage.getItem("gs.by") || ""; },
  get token() { return sessionStorage.getItem("gs.token") || ""; },
  get reviewer() { return state.proxy || sessionStorage.getItem("gs.reviewer") || ""; },
  get signedIn() { return Boolean(state.proxy || creds.token); },
  save(by, token) {
    sessionStorage.setItem("gs.by", by);
    sessionStorage.setItem("gs.token", token);
    sessionStorage.removeItem("gs.reviewer");
    showWho();
    refreshWho();
    refollow();
  },
  forgetToken() {
    const had = Boolean(creds.token);
    sessionStorage.removeItem("gs.token");
    sessionStorage.removeItem("gs.reviewer");
    showWho();
    if (had) refollow();
  },
  clear() { sessionStorage.removeItem("gs.by"); creds.forgetToken(); },
};

const authHeader = (token) => (token ? { Authorization: `Bearer ${token}` } : {});

function showWho() {
  const who = creds.reviewer ? `reviewer: ${creds.reviewer}`
    : creds.token ? "signed in with the dashboard token (reads; no verdicts)" : "";
  $("who").textContent = who;
  $("creds").textContent = creds.token ? "Sign out" : "Sign in";
  $("creds").hidden = Boolean(state.proxy);
  $("review-hint").textContent = creds.signedIn ? "" : "sign in with your reviewer token to read the texts and decide";
}

// Who this tab's credential names: a reviewer, nobody (the dashboard token), or the
// proxy's signed-in user.
async function refreshWho() {
  const token = creds.token;
  try {
    const me = await getJSON("/api/me", authHeader(token));
    if (me.via === "proxy") state.proxy = me.reviewer;
    else if (token && token === creds.token && me.reviewer) sessionStorage.setItem("gs.reviewer", me.reviewer);
  } catch { /* a wrong token is forgotten by getJSON */ }
  showWho();
}

function askCreds() {
  if (creds.signedIn) return Promise.resolve(true);
  $("login-by").value = creds.by;
  $("login-token").value = "";
  $("login").showModal();
  return new Promise((resolve) => { state.pendingLogin = resolve; });
}

function closeLogin(ok) {
  if (ok) {
    const by = $("login-by").value.trim();
    const token = $("login-token").value;
    if (!token) return;
    creds.save(by, token);
  }
  const resolve = state.pendingLogin;
  state.pendingLogin = null;
  // A refusal that asked to sign in is answered now: do not leave it up, red, till the
  // next refresh.
  if (ok && $("review-msg").textContent.includes("Sign in")) reviewMsg("");
  $("login").close();
  if (resolve) resolve(ok);
  if (ok) refreshReview();
}

// ------------------------------------------------------------------------ api --

async function getJSON(path, headers = {}) {
  const res = await fetch(path, { cache: "no-store", headers });
  const body = await res.json().catch(() => ({}));
  if (res.status === 401) creds.forgetToken();
  if (!res.ok) throw new Error(refusal(res.status, body.error || res.statusText));
  return body;
}

function refusal(status, error) {
  if (status === 401) return `refused: ${error}. Sign in again with your token.`;
  if (status === 403) return `refused: ${error}.`;
  return `${error} (${status})`;
}

async function post(path, body) {
  if (!state.writesEnabled) {
    throw new Error("refused: no credential is configured on the server, actions are disabled.");
  }
  if (!(await askCreds())) {
    throw new Error("not sent: this action needs your token. Sign in first.");
  }
  const res = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...authHeader(creds.token) },
    body: JSON.stringify({ ...body, by: creds.by }),
  });
  const data = await res.json().catch(() => ({}));
  if (res.status === 401) creds.forgetToken();
  if (!res.ok) throw new Error(refusal(res.status, data.error || res.statusText));
  return data;
}

// ---------------------------------------------------------------------- cards --

function card(cls, label, value, sub, title = "") {
  return el("div", { class: `card ${cls}`, title },
    el("div", { class: "label", text: label }),
    el("div", { class: "value", text: value }),
    el("div", { class: "sub", text: sub }));
}

function renderCards() {
  const s = state.summary;
  if (!s) return;
  const total = s.candidates_finished || 0;
  const cards = OUTCOMES.map(([topic, label, cls]) => {
    const n = s.outcomes[topic] || 0;
    const pct = total ? `${((100 * n) / total).toFixed(1)}% of ${total.toLocaleString()}` : "–";
    if (topic !== REVIEW_TOPIC) return card(cls, label, n.toLocaleString(), pct, topic);
    const waiting = state.reviewWaiting === null ? "…" : state.reviewWaiting.toLocaleString();
    return card(cls, "review waiting", waiting, `${n.toLocaleString()} sent in total`,
      "waiting for a person now; below it, everything ever sent to review");
  });
  cards.push(card("plain", "decisions", s.records.toLocaleString(),
    `${s.rate_per_minute} in the last minute`));
  $("cards").replaceChildren(...cards);
}

// ------------------------------------------------------------------- timeline --

// The last MINUTES minutes, ending now (or at the newest data, when all of it is older).
function minuteWindow(perMinute) {
  const byMinute = new Map(perMinute.map((m) => [Math.floor(Date.parse(m.minute) / 60000), m]));
  const now = Math.floor(Date.now() / 60000);
  const newest = byMinute.size ? Math.max(...byMinute.keys()) : now;
  const end = newest < now - MINUTES ? newest : now;
  const out = [];
  for (let m = end - MINUTES + 1; m <= end; m++) out.push([m, byMinute.get(m)]);
  return out;
}

function niceMax(n) {
  if (n <= 5) return 5;
  const p = 10 ** Math.floor(Math.log10(n));
  return [1, 2, 2.5, 5, 10].map((f) => f * p).find((v) => v >= n);
}

function renderTimeline(perMinute) {
  const W = 640, H = 250, L = 40, R = 8, T = 10, B = 22;
  const slots = minuteWindow(perMinute);
  const peak = Math.max(0, ...slots.map(([, m]) => (m ? m.outcomes : 0)));
  const top = niceMax(peak);
  const y = (v) => T + (H - T - B) * (1 - v / top);
  const step = (W - L - R) / slots.length;
  const plot = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "timeline", preserveAspectRatio: "none" });
  for (const v of [0, top / 2, top]) {
    plot.append(svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "gridline" }),
      svg("text", { x: L - 6, y: y(v) + 4, class: "tick", "text-anchor": "end", text: String(v) }));
  }
  slots.forEach(([minute, m], i) => {
    if (!m) return;
    let base = 0;
    const parts = [];
    for (const [topic, label, cls] of OUTCOMES) {
      const n = (m.by_outcome || {})[topic] || 0;
      if (!n) continue;
      parts.push(`${label} ${n}`);
      plot.append(svg("rect", {
        x: L + i * step + 1, width: Math.max(1, step - 2),
        y: y(base + n), height: y(base) - y(base + n), class: `fill ${cls}`,
      }, tip(`${fmtClock(minute * 60000)}: ${label} ${n}`)));
      base += n;
    }
    plot.append(svg("rect", { x: L + i * step, width: step, y: T, height: H - T - B,
      class: "hover" }, tip(`${fmtClock(minute * 60000)} · ${m.decisions} records · ${parts.join(", ") || "no outcomes"}`)));
  });
  const first = slots[0][0], last = slots[slots.length - 1][0];
  for (const [i, minute] of [[0, first], [Math.floor(slots.length / 2), first + Math.floor(slots.length / 2)], [slots.length - 1, last]]) {
    plot.append(svg("text", { x: L + (i + 0.5) * step, y: H - 6, class: "tick",
      "text-anchor": i === 0 ? "start" : i === slots.length - 1 ? "end" : "middle",
      text: fmtClock(minute * 60000) }));
  }
  $("timeline").replaceChildren(plot);
  const finished = slots.reduce((t, [, m]) => t + (m ? m.outcomes : 0), 0);
  $("timeline-note").textContent = `${finished.toLocaleString()} finished in the last ${MINUTES} min`;
  $("timeline-legend").replaceChildren(...OUTCOMES.map(([, label, cls]) =>
    el("span", {}, el("i", { class: `dot ${cls}` }), label)));
}

// ----------------------------------------------------------------- histograms --

function zone(x, width, marks, spec) {
  const upper = spec && marks[spec.upper];
  const lower = spec && spec.lower ? marks[spec.lower] : undefined;
  if (upper === undefined) return "info";
  if (x >= upper) return "good";
  if (lower === undefined || x + width <= lower) return "bad";
  return "warn";
}

// `routed`: the switch routes on this score, so its bars take the colours of its zones.
function histogram(method, h, routed) {
  const spec = SCORES[method];
  const W = 420, H = 130, T = 28, B = 18, L = 4, R = 4;
  const marks = h.thresholds || {};
  const width = (h.hi - h.lo) / h.bins.length;
  const max = Math.max(1, ...h.bins);
  const x = (v) => L + ((W - L - R) * (v - h.lo)) / (h.hi - h.lo);
  const y = (n) => T + (H - T - B) * (1 - n / max);
  const plot = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "histogram" });
  h.bins.forEach((n, i) => {
    const lo = h.lo + width * i;
    plot.append(svg("rect", { x: x(lo) + 0.5, width: Math.max(0.5, x(lo + width) - x(lo) - 1),
      y: y(n), height: y(0) - y(n), class: `fill ${routed ? zone(lo, width, marks, spec) : "plain"}` },
    tip(`[${lo.toFixed(2)}, ${(lo + width).toFixed(2)}): ${n}`)));
  });
  plot.append(svg("line", { x1: L, x2: W - R, y1: y(0), y2: y(0), class: "axisline" }));
  const off = [];
  // Cuts in order along the axis, labels on alternate lines so that close cuts stay legible;
  // a label in the right half reads leftwards from its line.
  // An accept cut of "inf" accepts nothing: it is labelled at the axis end, never drawn.
  const value = (t) => (t === "inf" ? Infinity : t);
  const cuts = Object.entries(marks).sort((a, b) => value(a[1]) - value(b[1]));
  cuts.forEach(([name, t], i) => {
    const short = name.slice(method.length + 1);
    if (t === "inf") {
      plot.append(svg("text", { x: W - R, y: 10 + 12 * (i % 2), "text-anchor": "end",
        class: "tick cut-label", text: `${short} inf (accepts nothing)` }, tip(`${name} = inf`)));
      return;
    }
    if (t < h.lo || t > h.hi) { off.push(`${short} ${fmtCut(t)}`); return; }
    const right = x(t) > W / 2;
    const ly = 10 + 12 * (i % 2);
    plot.append(svg("line", { x1: x(t), x2: x(t), y1: ly + 2, y2: y(0), class: "cut" },
      tip(`${name} = ${fmtCut(t)}`)),
    svg("text", { x: x(t) + (right ? -3 : 3), y: ly, "text-anchor": right ? "end" : "start",
      class: "tick cut-label", text: `${short} ${fmtCut(t)}` }));
  });
  plot.append(svg("text", { x: L, y: H - 4, class: "tick", text: `${h.lo}` }),
    svg("text", { x: W - R, y: H - 4, class: "tick", "text-anchor": "end", text: `${h.hi}` }));
  const outside = [h.under ? `${h.under} below ${h.lo}` : "", h.over ? `${h.over} above ${h.hi}` : ""]
    .filter(Boolean).join(" · ");
  return el("div", { class: "hist-block", "data-method": method },
    el("div", { class: "hist-title" },
      el("strong", { text: spec ? spec.title : method }),
      el("span", { class: routed ? "tag routed" : "tag", text: routed ? "routed on" : "geometry only" }),
      el("span", { class: "muted", text: ` ${h.count.toLocaleString()} scored` })),
    plot,
    el("div", { class: "small muted", text: [outside, off.length ? `off axis: ${off.join(" · ")}` : ""].filter(Boolean).join(" · ") }));
}

function renderHists(hists) {
  const grounded = (m) => m === "grounding" || m === "grounding_long";
  const order = (m) => (grounded(m) ? 0 : m in SCORES ? 1 : 2);
  const methods = Object.keys(hists).sort((a, b) => order(a) - order(b) || a.localeCompare(b));
  // With a grounding model the switch routes on P(grounded) (short and long-form answers
  // under their own cuts); without one, on SGI or DGI.
  const model = Object.keys(hists).some(grounded);
  const routedOn = (m) => (grounded(m) || !model) && m in SCORES;
  const blocks = methods.map((m) => histogram(m, hists[m], routedOn(m)));
  $("hists").replaceChildren(...(blocks.length ? blocks
    : [el("p", { class: "muted", text: "no geometry scores yet" })]));
}

// -------------------------------------------------------------- stages, latency --

function stageSort(names) {
  return names.sort((a, b) => {
    const ia = STAGE_ORDER.indexOf(a), ib = STAGE_ORDER.indexOf(b);
    return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || a.localeCompare(b);
  });
}

function renderStages(stages) {
  const seen = new Set();
  const rows = stageSort(Object.keys(stages)).map((stage) => {
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

function renderLatency(latency, ladder) {
  const rows = stageSort(Object.keys(latency)).map((s) => [s, latency[s]]);
  if (ladder && ladder.count) rows.push(["whole ladder", ladder]);
  const max = Math.max(1, ...rows.map(([, l]) => l.p95 || 0));
  $("latency").replaceChildren(...(rows.length ? rows.map(([stage, l]) => {
    const bar = el("div", { class: "lbar" });
    const p50 = el("span", { class: "p50" }), p95 = el("span", { class: "p95" });
    p50.style.width = `${(100 * (l.p50 || 0)) / max}%`;
    p95.style.width = `${(100 * ((l.p95 || 0) - (l.p50 || 0))) / max}%`;
    bar.append(p50, p95);
    return el("tr", { class: stage === "whole ladder" ? "total" : "" },
      el("th", { text: stage }),
      el("td", { class: "num", text: fmtMs(l.p50) }),
      el("td", { class: "num", text: fmtMs(l.p95) }),
      el("td", { class: "wide", title: `p50 ${fmtMs(l.p50)} ms, p95 ${fmtMs(l.p95)} ms` }, bar),
      el("td", { class: "num small muted", text: l.count.toLocaleString() }));
  }) : [emptyRow(5, "no timings yet")]));
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
  $("judge-budget").replaceChildren(...kvRows((s.judge_budget || []).map(judgeSpend), "no budget"));
}

// Spend against budget of one route (or tenant), over the input partitions seen so far.
function judgeSpend(b) {
  const parts = [];
  if (b.calls_share != null) parts.push(`calls ${b.calls_share - b.calls_left}/${b.calls_share}`);
  if (b.tokens_share != null) parts.push(`tokens ${b.tokens_share - b.tokens_left}/${b.tokens_share}`);
  const seen = b.partitions ? ` (${b.partitions_seen} of ${b.partitions} partitions)` : "";
  return [`${b.route}${b.tenant ? ` / ${b.tenant}` : ""}`, parts.join(" · ") + seen];
}

function renderKill(k) {
  state.killSwitch = k.on;
  $("banner").hidden = !k.on;
  $("banner-detail").textContent = k.on
    ? `Turned on${k.by ? ` by ${k.by}` : ""}${k.at ? ` at ${fmtDateTime(k.at * 1000)}` : ""}.`
    : "";
  const btn = $("kill");
  btn.textContent = k.on ? "Kill switch: ON" : "Kill switch: off";
  btn.classList.toggle("on", k.on);
  btn.title = k.on ? "Click to allow automatic acceptance again" : "Click to stop all automatic acceptance";
}

async function refreshSummary() {
  try {
    const s = await getJSON("/api/summary");
    state.summary = s;
    renderCards();
    renderTimeline(s.per_minute);
    renderHists(s.histograms);
    renderStages(s.stages);
    renderLatency(s.latency || {}, s.ladder_latency);
    renderSide(s);
    renderKill(s.kill_switch);
    $("last").textContent = s.last_decided_at ? `last decision ${fmtTime(s.last_decided_at)}` : "no decisions yet";
  } catch (err) {
    $("last").textContent = `summary unavailable: ${err.message}`;
  }
}

// A burst of live events asks for one summary, not one per event.
function summarySoon() {
  if (state.summaryTimer) return;
  state.summaryTimer = setTimeout(() => { state.summaryTimer = null; refreshSummary(); }, 300);
}

async function refreshHealth() {
  try {
    const h = await getJSON("/api/health");
    state.writesEnabled = h.writes_enabled;
    for (const id of ["kill", "creds"]) {
      $(id).disabled = !h.writes_enabled;
      if (!h.writes_enabled) $(id).title = "no credential is configured on the server: read-only";
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
    const by = res && res.decision.evidence && res.decision.evidence.reviewer;
    if (res) reviewMsg(`${item.candidate_id}: ${verdict}ed by ${by}`, "good-text");
  } catch (err) {
    reviewMsg(`${item.candidate_id}: ${err.message}`, "bad-text");
  }
  buttons.forEach((b) => { b.disabled = false; });
  refreshReview();
}

function textsRow(texts) {
  const block = (label, ...paras) => el("div", { class: "text-block" },
    el("div", { class: "text-label", text: label }),
    ...paras.map((p) => el("p", { class: "raw", text: p })));
  const context = texts.context && texts.context.length ? texts.context : ["(no context: scored by DGI)"];
  return el("tr", { class: "texts" }, el("td", { colspan: "8" },
    el("div", { class: "text-grid" },
      block("question", texts.question), block("context", ...context), block("answer", texts.response))));
}

function renderReview(items) {
  state.reviewWaiting = items.length;
  renderCards();
  $("review-count").textContent = String(items.length);
  const rows = items.flatMap((item) => {
    const note = el("input", { type: "text", placeholder: "optional note", maxlength: "2000" });
    const buttons = [];
    const accept = el("button", { type: "button", class: "accept", text: "Accept",
      onclick: () => decide(item, "accept", note, buttons) });
    const reject = el("button", { type: "button", class: "reject", text: "Reject",
      onclick: () => decide(item, "reject", note, buttons) });
    buttons.push(accept, reject);
    if (!state.writesEnabled) buttons.forEach((b) => { b.disabled = true; });
    const row = el("tr", { class: "item", "data-candidate": item.candidate_id },
      el("td", { class: "mono" }, el("a", { href: "#", text: item.candidate_id,
        onclick: (e) => { e.preventDefault(); setFilter(item.candidate_id); } })),
      el("td", { class: "mono", text: item.session_id }),
      el("td", { class: "num", text: String(item.turn) }),
      el("td", { text: item.stage || "" }),
      el("td", { class: "reason", text: item.reason, title: item.reason }),
      el("td", { class: "small", text: fmtAgo(item.queued_at) }),
      el("td", {}, note),
      el("td", {}, el("div", { class: "actions" }, accept, reject)));
    return item.texts ? [row, textsRow(item.texts)] : [row];
  });
  $("review").replaceChildren(...(rows.length ? rows : [emptyRow(8, "nothing waits for review")]));
}

async function refreshReview() {
  const token = creds.token;
  const asked = ++state.reviewAsked;
  try {
    const r = await getJSON("/api/review", authHeader(token));
    // Only the newest answer, and only under the credentials it was asked with: a queue
    // read with the token (texts included) must not land after the reviewer signed out.
    if (asked !== state.reviewAsked || token !== creds.token) return;
    renderReview(r.pending);
  } catch (err) {
    reviewMsg(`review queue: ${err.message}`, "bad-text");
  }
}

// ------------------------------------------------------------------ decisions --

function emptyRow(span, text) {
  return el("tr", { class: "empty" }, el("td", { colspan: String(span), text }));
}

function stageLabel(d) {
  return d.stage === "outcome" ? `→ ${d.topic || "?"}` : d.stage;
}

function decidedAt(d) {
  const ms = Date.parse(d.decided_at);
  return isNaN(ms) ? 0 : ms;
}

function decisionRow(d) {
  const score = routedScore(d);
  const scoreCell = score
    ? el("td", { class: "num score", title: score.also ? `${score.label}; ${score.also}` : score.label },
      el("span", { class: "score-label", text: score.label }), ` ${fmtScore(score.value)}`)
    : el("td", {});
  return el("tr", { "data-candidate": d.candidate_id, "data-at": String(decidedAt(d)) },
    el("td", { class: "small", text: fmtTime(d.decided_at), title: d.decided_at || "" }),
    el("td", { class: "mono", text: d.candidate_id }),
    el("td", { class: "mono", text: d.session_id }),
    el("td", { class: d.stage === "outcome" ? `outcome-text ${outcomeClass(d.topic)}` : "", text: stageLabel(d) }),
    el("td", {}, el("span", { class: `chip ${actionClass(d.action)}`, text: d.action })),
    scoreCell,
    // Without a credential a record is its public projection: a reason code, no free text.
    el("td", { class: "reason", text: d.reason || d.reason_code || "", title: d.reason || d.reason_code || "" }),
    el("td", { text: d.mode || "" }),
    el("td", { class: d.gate ? "warn-text" : "", text: d.gate || "" }));
}

// A candidate's path through the ladder, oldest first: geometry → switch → … → topic.
function renderTrail(records) {
  const box = $("trail");
  box.hidden = !state.filter;
  if (!state.filter) return;
  if (!records.length) {
    box.replaceChildren(el("span", { class: "muted", text: `no records for ${state.filter} (yet)` }));
    return;
  }
  const steps = [...records].reverse().flatMap((d, i) => [
    ...(i ? [el("span", { class: "arrow", text: "→" })] : []),
    // The arrows between steps are the trail's; the outcome step is its topic alone.
    el("span", { class: "step" }, el("strong", { text: d.stage === "outcome" ? (d.topic || "?") : d.stage }), " ",
      el("span", { class: `chip ${d.stage === "outcome" ? outcomeClass(d.topic) : actionClass(d.action)}`, text: d.action })),
  ]);
  box.replaceChildren(el("span", { class: "muted", text: "trail " }),
    el("span", { class: "mono", text: state.filter }), el("span", { text: ": " }), ...steps);
}

function addDecision(d) {
  summarySoon();
  if (d.stage === "outcome" && d.topic === REVIEW_TOPIC) setTimeout(refreshReview, 2500);
  if (state.filter && d.candidate_id !== state.filter) return;
  if (state.filter) { loadDecisions(); return; }
  const body = $("decisions");
  if (body.firstElementChild && body.firstElementChild.classList.contains("empty")) {
    body.replaceChildren();
  }
  // Newest first by decision time (records of several partitions arrive interleaved);
  // among equal times the latest to arrive goes first, as the server orders them.
  const at = decidedAt(d);
  const next = [...body.children].find((row) => Number(row.dataset.at) <= at);
  body.insertBefore(decisionRow(d), next || null);
  while (body.childElementCount > MAX_ROWS) body.lastElementChild.remove();
}

async function loadDecisions() {
  const q = state.filter ? `&candidate_id=${encodeURIComponent(state.filter)}` : "";
  try {
    const r = await getJSON(`/api/decisions?limit=${MAX_ROWS}${q}`, authHeader(creds.token));
    const rows = r.decisions.map(decisionRow);
    $("decisions").replaceChildren(...(rows.length ? rows
      : [emptyRow(9, state.filter ? "no such candidate" : "no decisions yet")]));
    renderTrail(r.decisions);
  } catch (err) {
    $("decisions").replaceChildren(emptyRow(9, `decisions unavailable: ${err.message}`));
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

// Server-sent events read with fetch rather than EventSource, which cannot send a token:
// signed in, the stream carries whole records; signed out, their public projection.
// Signing in or out restarts it (`refollow`) under the new credential.
async function follow() {
  for (;;) {
    const control = new AbortController();
    state.follow = control;
    try {
      const res = await fetch("/api/events", {
        headers: authHeader(creds.token), signal: control.signal, cache: "no-store",
      });
      if (res.status === 401) creds.forgetToken();
      if (!res.ok) throw new Error(String(res.status));
      setConn("live", "good");
      loadDecisions();
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const lines = buffer.slice(0, end).split("\n");
          buffer = buffer.slice(end + 2);
          const data = lines.filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
          if (!lines.includes("event: decision") || !data) continue;
          try { addDecision(JSON.parse(data)); } catch { /* ignore a bad event */ }
        }
      }
    } catch { /* dropped, refused or restarted */ }
    if (!control.signal.aborted) {
      setConn("reconnecting…", "warn");
      await new Promise((resolve) => { setTimeout(resolve, 3000); });
    }
  }
}

function refollow() {
  if (state.follow) state.follow.abort();
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
    if (creds.token) {
      creds.clear();
      for (const row of document.querySelectorAll("#review tr.texts")) row.remove();
      refreshReview();
    } else askCreds();
  });
  $("kill").addEventListener("click", async () => {
    const on = !state.killSwitch;
    const question = on
      ? "Turn the kill switch ON? Every worker stops accepting candidates automatically."
      : "Turn the kill switch off? Workers may accept candidates automatically again.";
    if (!window.confirm(question)) return;
    try {
      const res = await post("/api/kill-switch", { on });
      if (res) renderKill({ on, by: res.kill_switch.by, at: res.kill_switch.at });
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
refreshWho();
refreshHealth().then(() => refreshReview());
refreshSummary();
loadDecisions();
follow();
setInterval(refreshSummary, 5000);
setInterval(refreshHealth, 10000);
setInterval(refreshReview, 10000);
