// tunefleet dashboard: the fleet view and the routing. No build step, no external resources.

import { loadCase, resetCase } from "./case.js";
import { CASE_ENDS, EVENT_FIELDS, GOAL_ENDS } from "./contract.js";
import { loadEvals } from "./evals.js";
import { goalHref, goalRoute, goalStep, loadGoal, loadGoals, resetGoal } from "./goals.js";
import { $, caseHref, el, fillBody, fmtInt, fmtUsd, getJSON, short, svg } from "./dom.js";
import { loadVersions, resetVersions, versionsHref, versionsRoute } from "./versions.js";

const SAMPLE_MS = 1000;
const CASES_MS = 3000;
const CASE_MS = 2000;
const SERIES_MAX = 300;
const CHART_MIN_SPAN_MS = 30000;
const EVENTS_MAX = 100;
// The event contract (served from service/core/models/events.py): a case's final states, and the
// badge that an event ending a case or a goal shows in the events table.
const STATES = Object.keys(CASE_ENDS);
const END_BADGES = new Map([
  ...Object.entries(CASE_ENDS).map(([state, kind]) => [kind, state]),
  ...Object.entries(GOAL_ENDS).map(([status, kind]) => [kind, `goal-${status}`]),
]);
// A field of an event's data, read through the contract (EVENT_FIELDS: each kind's fields, from its
// payload model): the value when the event's kind carries the field, else undefined. A name that no
// kind carries is a mistake, refused when the dashboard loads.
function dataField(name) {
  if (!Object.values(EVENT_FIELDS).some(({ fields }) => name in fields)) {
    throw new Error(`no event kind carries data.${name} (contract.js EVENT_FIELDS)`);
  }
  return (event) => (EVENT_FIELDS[event.kind] && name in EVENT_FIELDS[event.kind].fields && event.data
    ? event.data[name] : undefined);
}
const itemEval = dataField("eval");
const itemRepeat = dataField("repeat");
// What a case a worker holds may wait for before its next step (service/core/models/status.py WAIT_WORDS).
const WAIT_WORDS = {
  resume: "waiting for resume", hold: "waiting for the hold", sandbox: "waiting for the sandbox",
  apply: "waiting for an apply", lock: "waiting for the lock", gate: "waiting for its gate",
  approval: "waiting for a person's approval",
};

const state = {
  series: [],
  events: [],
  lastEventId: null,
  caseTimer: null,
};

function setConnection(ok, text) {
  const badge = $("connection");
  badge.textContent = text;
  badge.className = "badge " + (ok ? "good" : "bad");
}

// ---- the fleet view -------------------------------------------------------------------------

async function sampleStatus() {
  let status;
  try {
    status = await getJSON("api/status");
  } catch (err) {
    setConnection(false, `unreachable: ${err.message}`);
    return;
  }
  setConnection(true, "live");
  state.series.push({ t: Date.now(), queue: status.queue_depth, running: status.in_progress });
  if (state.series.length > SERIES_MAX) state.series.shift();
  renderTiles(status);
  renderChart();
  renderTunings(status);
  renderWorkers(status);
  syncTuningChoice(status.tunings.map((t) => t.name));
}

function renderTiles(status) {
  $("queue-depth").textContent = fmtInt(status.queue_depth);
  $("in-progress").textContent = fmtInt(status.in_progress);
  $("workers-alive").textContent = fmtInt(status.workers.length);
  const slots = status.workers.reduce((n, w) => n + w.slots, 0);
  const held = status.workers.reduce((n, w) => n + w.cases.length, 0);
  $("slots").textContent = `${held} of ${slots} slots busy`;
  const open = status.breaker.state === "open";
  const breaker = $("breaker");
  breaker.textContent = open ? "open" : "closed";
  breaker.className = "value " + (open ? "bad" : "good");
  const trips = status.breaker.trips || "0";
  $("breaker-detail").textContent = open
    ? `${status.breaker.reason || ""} · probes every ${(status.breaker.interval_ms || 0) / 1000} s`
    : `${trips} trips`;
  const locks = status.locks || [];
  const holding = locks.filter((l) => l.held);
  const pending = locks.reduce((n, l) => n + l.pending, 0);
  const lock = $("lock");
  lock.textContent = holding.length ? "held" : "free";
  lock.className = "value " + (holding.length ? "warn" : "good");
  $("lock-detail").textContent = holding.length
    ? holding.map((l) => `${l.tuning}: ${lockHolder(l)}`).join(", ") + ` · ${pending} pending`
    : `${pending} pending`;
  const tokens = status.tunings.reduce((n, t) => n + t.tokens, 0);
  const cost = status.tunings.reduce((n, t) => n + t.cost_usd, 0);
  $("tokens").textContent = fmtInt(tokens);
  $("cost").textContent = "$" + fmtUsd(cost);
  $("paused").hidden = !status.paused;
}

function renderChart() {
  const chart = $("queue-chart");
  const [width, height, pad] = [800, 180, 6];
  const points = state.series;
  const now = points.length ? points[points.length - 1].t : Date.now();
  const span = Math.max(CHART_MIN_SPAN_MS, points.length ? now - points[0].t : 0);
  const top = Math.max(1, ...points.map((p) => Math.max(p.queue, p.running)));
  const x = (t) => width - ((now - t) / span) * width;
  const y = (v) => height - pad - (v / top) * (height - 2 * pad);
  const nodes = [];
  for (const frac of [0, 0.5, 1]) {
    const at = y(top * frac);
    nodes.push(svg("line", { x1: 0, x2: width, y1: at, y2: at, class: "grid" }));
  }
  for (const key of ["running", "queue"]) {
    const line = points.map((p) => `${x(p.t).toFixed(1)},${y(p[key]).toFixed(1)}`).join(" ");
    nodes.push(svg("polyline", { points: line, class: `series ${key}`, "data-points": points.length }));
  }
  chart.replaceChildren(...nodes);
  const seconds = Math.round(span / 1000);
  $("chart-span").textContent = `last ${seconds} s · top of the chart: ${top}`;
}

function outcomeBar(t) {
  const parts = [
    ["completed", t.completed], ["difficult", t.difficult], ["failed", t.failed],
    ["cancelled", t.cancelled], ["running", t.running], ["waiting", t.waiting],
  ];
  const total = Math.max(1, parts.reduce((n, [, v]) => n + v, 0));
  const bar = svg("svg", { viewBox: "0 0 100 10", preserveAspectRatio: "none", class: "bar" });
  let at = 0;
  for (const [name, value] of parts) {
    if (!value) continue;
    const rect = svg("rect", { x: at, y: 0, width: (value / total) * 100, height: 10, class: name });
    const title = svg("title", {});
    title.textContent = `${name}: ${value}`;
    rect.append(title);
    bar.append(rect);
    at += (value / total) * 100;
  }
  return bar;
}

// A held tuning starts no run (its cases wait) until `tunefleet resume TUNING` or a raised budget.
function heldBadge(held) {
  if (!held) return null;
  return el("div", { class: "held" },
    el("span", { class: "badge bad held-kind", title: held.reason }, `held: ${held.kind}`),
    el("span", { class: "held-reason" }, ` ${held.reason}`));
}

// The case and worker holding a lock (its fencing token only while the holder is not known yet).
function lockHolder(lock) {
  const h = lock.holder;
  return h ? `${h.case} r${h.rev} on ${h.worker || "?"}` : "an apply just granted";
}

function waitsText(t) {
  return Object.entries(t.waiting_by_cause || {}).sort()
    .filter(([k, v]) => v && WAIT_WORDS[k]).map(([k, v]) => `${v} ${WAIT_WORDS[k]}`).join(" · ");
}

// A tuning's acceptance gates: candidates under gate, verdicts, re-bases and what the gates spent.
function gatesText(gates) {
  if (!gates) return "–";
  return `${gates.under} under gate · ${gates.passed} passed · ${gates.rejected} rejected`
    + (gates.rebased ? ` · ${gates.rebased} re-based` : "") + ` · ${fmtUsd(gates.cost_usd)} $`;
}

function renderTunings(status) {
  const locks = Object.fromEntries((status.locks || []).map((l) => [l.tuning, l]));
  const rows = status.tunings.map((t) => {
    const steps = Object.entries(t.running_by_step).sort().map(([k, v]) => `${k} ${v}`)
      .concat(waitsText(t) || []).join(" · ");
    const runs = Object.entries(t.runs_by_outcome).sort().map(([k, v]) => `${k} ${v}`).join(" · ");
    const lock = locks[t.name];
    const lockText = lock ? (lock.held ? `held by ${lockHolder(lock)}` : "free") + (lock.pending ? `, ${lock.pending} pending` : "") : "–";
    return el("tr", { "data-tuning": t.name },
      el("td", {}, t.name, " ", el("a", { href: versionsHref(t.name), class: "versions-link" }, "versions"),
        heldBadge(t.held)), el("td", {}, outcomeBar(t)),
      el("td", { class: "num submitted" }, fmtInt(t.submitted)),
      el("td", { class: "num waiting" }, fmtInt(t.waiting)),
      el("td", { class: "num running" }, `${t.running}${steps ? " (" + steps + ")" : ""}`),
      ...STATES.map((s) => el("td", { class: `num ${s}` }, fmtInt(t[s]))),
      el("td", {}, runs || "–"),
      el("td", { class: "num" }, fmtInt(t.tokens)),
      el("td", { class: "num" }, fmtUsd(t.cost_usd)),
      el("td", {}, lockText),
      el("td", { class: "gates" }, gatesText(t.gates)),
      el("td", { class: "mono" }, short(t.version)));
  });
  fillBody($("tunings"), rows);
}

function jobLink(job) {
  // job ids are case:<tuning>:<case>:<rev>
  const parts = job.split(":");
  if (parts[0] === "goal" && parts.length === 2) return el("a", { href: goalHref(parts[1]) }, `goal ${parts[1]}`);
  if (parts.length !== 4) return el("span", {}, job);
  return el("a", { href: caseHref(parts[1], parts[2]) }, `${parts[1]}/${parts[2]} r${parts[3]}`);
}

function renderWorkers(status) {
  const now = Date.now();
  const rows = status.workers.map((w) => {
    const cases = el("td", { class: "cases" });
    w.cases.forEach((job, i) => { if (i) cases.append(", "); cases.append(jobLink(job)); });
    return el("tr", { "data-worker": w.name },
      el("td", { class: "mono" }, w.name),
      el("td", { class: "num" }, `${w.cases.length}/${w.slots}`),
      cases,
      el("td", { class: "num" }, `${Math.max(0, Math.round((now - w.last_seen_ms) / 1000))} s ago`));
  });
  if (!rows.length) rows.push(el("tr", {}, el("td", { colSpan: 4, class: "muted" }, "no worker is alive")));
  fillBody($("workers"), rows);
}

async function pollEvents() {
  const query = state.lastEventId ? `after=${encodeURIComponent(state.lastEventId)}&limit=200` : "limit=40";
  let page;
  try {
    page = await getJSON(`api/events?${query}`);
  } catch (_) {
    return;
  }
  if (page.last_id) state.lastEventId = page.last_id;
  if (!page.events.length) return;
  state.events = page.events.slice().reverse().concat(state.events).slice(0, EVENTS_MAX);
  const rows = state.events.map(({ id, event }) => {
    const time = new Date(event.at).toLocaleTimeString("en-GB");
    const item = itemEval(event);  // an evaluation item's: its evaluation, case and repeat
    const repeat = itemRepeat(event);
    const where = event.goal ? el("a", { href: goalHref(event.goal) }, `goal ${event.goal}`)
      : item ? `${item}/${event.case || ""}${repeat ? " #" + repeat : ""}`
      : event.case ? el("a", { href: caseHref(event.tuning, event.case) }, `${event.tuning}/${event.case}`)
      : event.tuning;
    const step = event.goal ? goalStep(event)
      : item ? event.step || ""
      : event.step ? `${event.phase || ""}/${event.attempt || ""} ${event.step}` : "";
    const badge = END_BADGES.get(event.kind);
    const kind = badge ? el("span", { class: `badge ${badge}` }, event.kind) : event.kind;
    return el("tr", { "data-id": id, class: `kind-${event.kind}` },
      el("td", { class: "mono" }, time), el("td", { class: "kind" }, kind), el("td", {}, where),
      el("td", {}, step), el("td", { class: "detail" }, event.detail || ""));
  });
  fillBody($("events"), rows);
}

function syncTuningChoice(names) {
  const select = $("case-tuning");
  const have = Array.from(select.options).map((o) => o.value);
  if (have.join() === names.join()) return;
  const chosen = select.value;
  select.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
  if (names.includes(chosen)) select.value = chosen;
  loadCases();
}

async function loadCases() {
  const tuning = $("case-tuning").value;
  if (!tuning || $("fleet-view").hidden) return;
  const stateFilter = $("case-state").value;
  const query = stateFilter ? `?state=${encodeURIComponent(stateFilter)}` : "";
  let page;
  try {
    page = await getJSON(`api/tunings/${encodeURIComponent(tuning)}/cases${query}`);
  } catch (_) {
    return;
  }
  const rows = page.cases.map((r) => el("tr", { "data-case": r.case, class: `state-${r.state}` },
    el("td", {}, el("a", { href: caseHref(tuning, r.case) }, r.case)),
    el("td", { class: "num" }, r.rev),
    el("td", {}, el("span", { class: `badge ${r.state}` }, r.state)),
    el("td", { class: "detail" }, r.reason || ""),
    el("td", { class: "num" }, fmtInt(r.tokens)),
    el("td", { class: "num" }, fmtUsd(r.cost_usd))));
  fillBody($("cases"), rows);
}

// ---- routing --------------------------------------------------------------------------------

function route() {
  clearInterval(state.caseTimer);
  resetCase();
  resetGoal();
  resetVersions();
  const match = location.hash.match(/^#\/case\/([^/]+)\/([^/]+)$/);
  const goal = goalRoute(location.hash);
  const versions = versionsRoute(location.hash);
  $("fleet-view").hidden = Boolean(match || goal || versions !== null);
  $("case-view").hidden = !match;
  $("goal-view").hidden = goal === null;
  $("versions-view").hidden = versions === null;
  if (versions !== null) {
    document.title = `${versions} versions · tunefleet`;
    loadVersions(versions);
    state.caseTimer = setInterval(() => loadVersions(versions), CASES_MS);
  } else if (goal !== null) {
    document.title = `${goal} · tunefleet`;
    loadGoal(goal);
    state.caseTimer = setInterval(() => loadGoal(goal), CASE_MS);
  } else if (match) {
    const [tuning, caseId] = [decodeURIComponent(match[1]), decodeURIComponent(match[2])];
    document.title = `${caseId} · tunefleet`;
    loadCase(tuning, caseId);
    state.caseTimer = setInterval(() => loadCase(tuning, caseId), CASE_MS);
  } else {
    document.title = "tunefleet";
    loadCases();
    loadGoals();
    loadEvals();
  }
}

function start() {
  $("case-tuning").addEventListener("change", loadCases);
  $("case-state").addEventListener("change", loadCases);
  window.addEventListener("hashchange", route);
  route();
  every(sampleStatus, SAMPLE_MS);
  every(pollEvents, SAMPLE_MS);
  every(loadCases, CASES_MS);
  every(loadGoals, CASES_MS);
  every(loadEvals, CASES_MS);
}

// Run `task` now and again `ms` after each run ends, so slow answers never pile up.
async function every(task, ms) {
  for (;;) {
    try { await task(); } catch (err) { console.error(err); }
    await new Promise((resolve) => setTimeout(resolve, ms));
  }
}

start();
