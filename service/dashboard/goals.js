// Goals: the list on the fleet view, and a goal's page with one column per iteration (its TODO, the
// worker's result, the reviewer's verdict) and the remaining work the last review left.

import { $, DetailFeed, el, fillBody, fleetList } from "./dom.js";

const feed = new DetailFeed("goal-error");

export const goalHref = (id) => `#/goal/${encodeURIComponent(id)}`;

/** A goal event's place: `it <iteration> <step>`. */
export const goalStep = (event) =>
  (event.iteration ? `it ${event.iteration}${event.step ? " " + event.step : ""}` : "");

/** The goal id of a `#/goal/<id>` address, else null. */
export function goalRoute(hash) {
  const match = hash.match(/^#\/goal\/([^/]+)$/);
  return match ? decodeURIComponent(match[1]) : null;
}

/** Forget what is on the goal page, so that the next load draws it afresh. */
export function resetGoal() {
  feed.reset();
}

const badge = (status) => el("span", { class: `badge goal-${status}` }, status);

export async function loadGoals() {
  const page = await fleetList("api/goals");
  if (!page) return;
  const rows = page.goals.map((g) => el("tr", { "data-goal": g.id, class: `goal-${g.status}` },
    el("td", {}, el("a", { href: goalHref(g.id) }, g.id)),
    el("td", { class: "status" }, badge(g.status)),
    el("td", { class: "num iteration" }, g.iteration),
    el("td", { class: "step" }, g.step || ""),
    el("td", { class: "mono worker" }, g.worker || ""),
    el("td", { class: "detail reason" }, (g.reason || "") + (g.limit ? ` (limit: ${g.limit})` : "")),
    el("td", { class: "mono" }, new Date(g.updated_at).toLocaleTimeString("en-GB"))));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colSpan: 7, class: "muted" }, "no goal yet")));
  fillBody($("goals"), rows);
}

function list(items, none) {
  if (!items || !items.length) return el("span", { class: "muted" }, none);
  return el("ul", { class: "items" }, ...items.map((item) => el("li", {}, item)));
}

function todoCell(plan) {
  if (!plan) return el("span", { class: "muted" }, "not planned yet");
  if (plan.error) return el("div", { class: "bad" }, `invalid TODO: ${plan.error}`);
  return el("ul", { class: "todo" }, ...plan.tasks.map((t) =>
    el("li", { "data-task": t.id }, el("span", { class: "mono" }, t.id), ` ${t.title}`)));
}

function workCell(work) {
  if (!work) return el("span", { class: "muted" }, "–");
  const r = work.result;
  return el("div", {},
    el("span", { class: `badge goal-${r.status}` }, r.status),
    el("div", {}, r.summary),
    el("div", { class: "muted" }, `${work.tasks_finished} finished, ${work.tasks_failed} failed, `
      + `${(work.duration_ms / 1000).toFixed(1)} s`));
}

function verdictCell(review) {
  if (!review) return el("span", { class: "muted" }, "not reviewed yet");
  const v = review.review;
  return el("span", { class: `badge ${v.complete ? "completed" : "unfinished"}` },
    `${v.decision} · ${v.complete ? "complete" : "not complete"}`);
}

const ROWS = [
  ["status", (it) => el("span", {}, badge(it.status),
    it.completion ? el("div", { class: "muted" }, it.completion.reason) : null)],
  ["todo", (it) => todoCell(it.plan)],
  ["work", (it) => workCell(it.work)],
  ["verdict", (it) => verdictCell(it.review)],
  ["summary", (it) => (it.review ? it.review.review.summary : "–")],
  ["rationale", (it) => (it.review ? it.review.review.rationale : "–")],
  ["remaining", (it) => (it.review ? list(it.review.review.remaining_work, "none") : "–")],
  ["error", (it) => (it.error ? el("span", { class: "bad" }, it.error) : "–")],
];

function outcomeLine(detail) {
  const live = detail.summary;
  const state = detail.state;
  const parts = [el("span", { id: "goal-outcome", class: `badge goal-${detail.status}` }, detail.status)];
  if (!state) return el("span", {}, ...parts, ` ${detail.note || ""}`);
  const current = state.iterations.length ? state.iterations[state.iterations.length - 1].iteration : 0;
  let text = ` iteration ${current} of at most ${state.limits.max_iterations}`;
  if (live && live.step) text += ` · ${live.step} step`;
  if (live && live.worker) text += ` on ${live.worker}`;
  if (state.completion) {
    text += ` · ${state.completion.reason}` + (state.completion.limit ? ` (limit: ${state.completion.limit})` : "");
  }
  return el("span", {}, ...parts, text);
}

function remainingWork(state) {
  const reviewed = (state ? state.iterations : []).filter((it) => it.review);
  if (!reviewed.length) return el("span", { class: "muted" }, "no review yet");
  const last = reviewed[reviewed.length - 1];
  const heading = el("div", { class: "muted" }, `from the review of iteration ${last.iteration}`);
  return el("div", {}, heading, list(last.review.review.remaining_work, "none: the reviewer left nothing to do"));
}

export async function loadGoal(id) {
  const detail = await feed.changed(`api/goals/${encodeURIComponent(id)}`);
  if (detail === null) return;
  const state = detail.state;
  $("goal-title").textContent = state ? `${detail.id}: ${state.goal}` : detail.id;
  $("goal-result").replaceChildren(outcomeLine(detail));
  $("goal-remaining").replaceChildren(remainingWork(state));
  const iterations = state ? state.iterations : [];
  const table = $("iterations");
  table.tHead.replaceChildren(el("tr", {}, el("th", {}, ""), ...iterations.map((it) =>
    el("th", { "data-iteration": it.iteration }, `iteration ${it.iteration}`))));
  fillBody(table, ROWS.map(([name, cell]) => el("tr", { "data-row": name },
    el("th", {}, name), ...iterations.map((it) => el("td", {}, cell(it))))));
}
