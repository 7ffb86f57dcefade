// Evaluations: a chart of the pass rate of every evaluated version with its 95 % interval, the
// evaluations and their progress, and the numbers of each tuning's report (held-out before and after).

import { $, el, fillBody, fleetList, fmtInt, fmtUsd, getJSON, svg } from "./dom.js";

const pct = (x) => `${(100 * x).toFixed(1)} %`;

/** `66.7 % (4/6, 59.1-90.3 %)`, or a dash when nothing was graded. */
export function rateText(rate) {
  if (!rate.graded) return "–";
  return `${pct(rate.rate)} (${rate.passed}/${rate.graded}, ${(100 * rate.low).toFixed(1)}–${pct(rate.high)})`;
}

const label = (head) => `${head.version.slice(0, 7)} ${head.version_asked === head.version ? "" : head.version_asked}`.trim();

/** One point per evaluation (oldest left): the pass rate, a bar from the interval's low to its high. */
function renderChart(evals) {
  const chart = $("eval-chart");
  const [width, height, left, bottom, top] = [800, 200, 40, 36, 8];
  const y = (v) => top + (1 - v) * (height - top - bottom);
  const nodes = [];
  for (const frac of [0, 0.25, 0.5, 0.75, 1]) {
    nodes.push(svg("line", { x1: left, x2: width, y1: y(frac), y2: y(frac), class: "grid" }));
    const tick = svg("text", { x: left - 6, y: y(frac) + 4, class: "axis", "text-anchor": "end" });
    tick.textContent = `${100 * frac}%`;
    nodes.push(tick);
  }
  const graded = evals.filter((e) => e.rate.graded);
  const step = (width - left) / Math.max(1, graded.length);
  graded.forEach((e, i) => {
    const x = left + step * (i + 0.5);
    const group = svg("g", { class: `eval-point status-${e.status}`, "data-eval": e.head.id });
    group.append(svg("line", { x1: x, x2: x, y1: y(e.rate.low), y2: y(e.rate.high), class: "interval" }));
    for (const end of [e.rate.low, e.rate.high]) {
      group.append(svg("line", { x1: x - 6, x2: x + 6, y1: y(end), y2: y(end), class: "interval" }));
    }
    group.append(svg("circle", { cx: x, cy: y(e.rate.rate), r: 5, class: "rate" }));
    const title = svg("title", {});
    title.textContent = `${e.head.id}: ${rateText(e.rate)} · ${e.status}`;
    group.append(title);
    const name = svg("text", { x, y: height - bottom + 16, class: "axis", "text-anchor": "middle" });
    name.textContent = label(e.head);
    const id = svg("text", { x, y: height - bottom + 30, class: "axis small", "text-anchor": "middle" });
    id.textContent = e.head.id.length > 24 ? e.head.id.slice(0, 23) + "…" : e.head.id;
    nodes.push(group, name, id);
  });
  if (!graded.length) {
    const none = svg("text", { x: width / 2, y: height / 2, class: "axis", "text-anchor": "middle" });
    none.textContent = "no evaluation graded yet";
    nodes.push(none);
  }
  chart.replaceChildren(...nodes);
}

function renderTable(evals) {
  const rows = evals.slice().reverse().map((e) => {
    const done = e.passed + e.failed_grade + e.failed + e.cancelled;
    return el("tr", { "data-eval": e.head.id, class: `eval-${e.status}` },
      el("td", { class: "mono" }, e.head.id),
      el("td", {}, e.head.tuning),
      el("td", { class: "mono" }, `${e.head.version.slice(0, 10)} (${e.head.version_asked})`),
      el("td", {}, el("span", { class: `badge eval-${e.status}` }, e.status)),
      el("td", { class: "num done" }, `${done}/${e.head.items}`),
      el("td", { class: "num rate" }, rateText(e.rate)),
      el("td", { class: "num" }, fmtInt(e.failed)),
      el("td", { class: "num" }, fmtInt(e.voids)));
  });
  if (!rows.length) rows.push(el("tr", {}, el("td", { colSpan: 8, class: "muted" }, "no evaluation yet")));
  fillBody($("evals"), rows);
}

function reportRow(report) {
  const c = report.comparison;
  const side = (r) => (r ? rateText(r.rate) + (r.status === "finished" ? "" : ` · ${r.status}`) : "–");
  const diff = c ? `${(100 * c.difference.difference).toFixed(1)} (${(100 * c.difference.low).toFixed(1)} to `
    + `${(100 * c.difference.high).toFixed(1)})` : "–";
  return el("tr", { "data-report": report.tuning },
    el("td", {}, report.tuning, report.complete ? null : el("span", { class: "muted" }, " (in progress)")),
    el("td", { class: "num before" }, side(report.before)),
    el("td", { class: "num after" }, side(report.after)),
    el("td", { class: "num diff" }, diff),
    el("td", { class: "num" }, c ? c.mcnemar_p.toPrecision(3) : "–"),
    el("td", {}, c ? `+${c.gained} / −${c.lost}` : "–"),
    el("td", { class: "num" }, fmtUsd(report.train.usage.cost_usd)),
    el("td", { class: "num" }, fmtUsd(report.evaluation_usage.cost_usd)));
}

async function renderReports(evals) {
  const tunings = [...new Set(evals.filter((e) => e.head.purpose !== "user").map((e) => e.head.tuning))];
  const reports = [];
  for (const tuning of tunings) {
    try {
      reports.push(await getJSON(`api/tunings/${encodeURIComponent(tuning)}/report.json`));
    } catch (_) { /* the next round tries again */ }
  }
  $("reports-card").hidden = !reports.length;
  fillBody($("reports"), reports.map(reportRow));
}

export async function loadEvals() {
  const page = await fleetList("api/evals");
  if (!page) return;
  // The acceptance gates' evaluations (one per candidate) show as each tuning's gates, not here.
  const evals = page.evals.filter((e) => !e.head.purpose.startsWith("gate"));
  $("evals-card").hidden = !evals.length;
  renderChart(evals);
  renderTable(evals);
  await renderReports(evals);
}
