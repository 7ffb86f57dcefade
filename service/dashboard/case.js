// The case page: one column per try (void tries included), one row per thing a try leaves.

import { $, DetailFeed, el, fillBody, fmtInt, fmtUsd, short } from "./dom.js";

const feed = new DetailFeed("case-error");

/** Forget what is on the page, so that the next load draws it afresh. */
export function resetCase() {
  feed.reset();
}

function usageOf(attempt) {
  const usages = [attempt.run?.output?.usage, attempt.feedback?.usage, attempt.apply?.output?.usage];
  return usages.filter(Boolean).reduce(
    (sum, u) => ({ tokens: sum.tokens + u.input_tokens + u.output_tokens, cost: sum.cost + u.cost_usd }),
    { tokens: 0, cost: 0 });
}

function rubricCell(feedback) {
  if (!feedback) return "–";
  const list = el("div", { class: "rubric" });
  for (const [item, score] of Object.entries(feedback.rubric)) {
    const meter = el("span", { class: "meter" }, el("span", { class: "fill" }));
    meter.firstChild.style.width = `${Math.round(score * 100)}%`;
    list.append(el("div", { class: "score", "data-item": item }, el("span", {}, item), meter,
      el("span", { class: "num" }, score.toFixed(2))));
  }
  return list;
}

function improvementsCell(feedback) {
  if (!feedback || !feedback.improvements.length) return "–";
  return el("ul", { class: "improvements" }, ...feedback.improvements.map((i) =>
    el("li", {}, el("span", { class: `tag ${i.target}` }, i.target), " ", i.change)));
}

function applyCell(apply) {
  if (!apply) return "–";
  const out = apply.output;
  return el("div", {},
    out.structural ? el("div", { class: "bad" }, `structural: ${out.structural}`)
      : el("div", { class: "mono" }, apply.version ? `published ${short(apply.version)}` : "no change"),
    out.summary ? el("div", {}, out.summary) : null,
    out.skills.length ? el("div", { class: "muted" }, `skills: ${out.skills.join(", ")}`) : null,
    el("div", { class: "muted" }, `lock #${apply.fence}, base ${short(apply.base_version)}`));
}

function runCell(run) {
  if (!run) return "–";
  return el("div", {},
    el("div", { class: "mono" }, `version ${short(run.version)}`),
    el("div", {}, `${(run.duration_ms / 1000).toFixed(1)} s, exit ${run.exit_code}, ${run.output.turns} turns`),
    run.memory_in ? el("div", { class: "muted" }, "started from memory") : null,
    run.void ? el("div", { class: "bad" }, `void: ${run.void}`) : null,
    run.missed_skills.length ? el("div", { class: "warn" }, `missed skills: ${run.missed_skills.join(", ")}`) : null);
}

const ROWS = [
  ["verdict", (a) => a.feedback
    ? el("span", { class: `badge ${a.feedback.verdict}` }, a.feedback.verdict + (a.feedback.done ? " · done" : ""))
    : el("span", { class: "muted" }, "not analyzed yet")],
  ["rubric", (a) => rubricCell(a.feedback)],
  ["summary", (a) => (a.feedback ? a.feedback.summary || a.feedback.infra || "–" : "–")],
  ["improvements", (a) => improvementsCell(a.feedback)],
  ["apply", (a) => applyCell(a.apply)],
  ["run", (a) => runCell(a.run)],
  ["tokens", (a) => { const u = usageOf(a); return `${fmtInt(u.tokens)} · $${fmtUsd(u.cost)}`; }],
  ["analysis", (a) => (a.analysis ? el("details", {}, el("summary", {}, "text"), el("pre", {}, a.analysis)) : "–")],
];

export async function loadCase(tuning, caseId) {
  const path = `api/tunings/${encodeURIComponent(tuning)}/cases/${encodeURIComponent(caseId)}`;
  const detail = await feed.changed(path);
  if (detail === null) return;
  $("case-title").textContent = `${detail.tuning} / ${detail.case} r${detail.rev}`;
  const result = detail.result;
  $("case-result").replaceChildren(result
    ? el("span", {}, el("span", { class: `badge ${result.state}`, id: "case-outcome" }, result.state),
      ` ${result.reason || ""} · ${fmtInt(result.usage.input_tokens + result.usage.output_tokens)} tokens`
      + ` · $${fmtUsd(result.usage.cost_usd)} · ${result.steps} steps`)
    : el("span", { class: "badge unfinished", id: "case-outcome" }, "running"));
  const table = $("tries");
  const head = el("tr", {}, el("th", {}, ""), ...detail.attempts.map((a) =>
    el("th", { class: a.folder.includes("void") ? "void" : "", "data-attempt": `${a.phase}/${a.folder}` },
      `${a.phase} ${a.folder}`)));
  table.tHead.replaceChildren(head);
  fillBody(table, ROWS.map(([name, cell]) => el("tr", { "data-row": name },
    el("th", {}, name), ...detail.attempts.map((a) => el("td", {}, cell(a))))));
}
