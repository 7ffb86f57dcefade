// A tuning's Versions page (#/versions/<tuning>): a timeline of pass rate (every evaluation, with its
// 95 % interval) and of size in tokens by version, and the list of versions and rejected candidates;
// each opens its diff from its parent, the case and analysis behind it, and the gate's evidence.

import { $, DetailFeed, el, getJSON, short, svg } from "./dom.js";

const feed = new DetailFeed("versions-error");
const enc = encodeURIComponent;

export const versionsHref = (tuning) => `#/versions/${enc(tuning)}`;

/** The tuning of a `#/versions/<tuning>` address, else null. */
export function versionsRoute(hash) {
  const match = hash.match(/^#\/versions\/([^/]+)$/);
  return match ? decodeURIComponent(match[1]) : null;
}

export function resetVersions() {
  feed.reset();
  $("version-detail").replaceChildren();
}

export async function loadVersions(tuning) {
  const found = await feed.changed(`api/tunings/${enc(tuning)}/versions`);
  if (!found) return;
  $("versions-title").textContent = `${found.tuning}: versions`;
  renderTimeline(found.versions);
  renderList(tuning, found.versions);
}

function renderTimeline(rows) {
  const chart = $("versions-chart");
  const [width, height, pad, gap] = [800, 240, 28, 20];
  const half = (height - gap) / 2;
  const n = rows.length;
  const x = (i) => pad + (n <= 1 ? (width - 2 * pad) / 2 : (i / (n - 1)) * (width - 2 * pad));
  const rateY = (v) => half - 6 - v * (half - 12);
  const topTokens = Math.max(1, ...rows.map((r) => r.tokens));
  const sizeY = (v) => height - 6 - (v / topTokens) * (half - 12);
  const nodes = [];
  for (const frac of [0, 0.5, 1]) {
    nodes.push(svg("line", { x1: pad, x2: width - pad, y1: rateY(frac), y2: rateY(frac), class: "grid" }));
  }
  const rateLabel = svg("text", { x: 2, y: 12, class: "axis" });
  rateLabel.textContent = "pass rate";
  const sizeLabel = svg("text", { x: 2, y: half + gap + 12, class: "axis" });
  sizeLabel.textContent = `tokens (top ${topTokens})`;
  nodes.push(rateLabel, sizeLabel);
  rows.forEach((r, i) => {
    r.evals.forEach((e, k) => {
      const at = x(i) + (k - (r.evals.length - 1) / 2) * 6;
      nodes.push(svg("line", { x1: at, x2: at, y1: rateY(e.rate.low), y2: rateY(e.rate.high), class: "interval" }));
      const dot = svg("circle", { cx: at, cy: rateY(e.rate.rate), r: 3.5, class: `rate ${e.purpose}`, "data-eval": e.eval });
      const title = svg("title", {});
      title.textContent = `${e.eval} (${e.purpose}): ${(100 * e.rate.rate).toFixed(1)} % [${(100 * e.rate.low).toFixed(1)}, ${(100 * e.rate.high).toFixed(1)}]`;
      dot.append(title);
      nodes.push(dot);
    });
  });
  const published = rows.map((r, i) => [r, i]).filter(([r]) => r.status !== "rejected" && r.status !== "candidate");
  nodes.push(svg("polyline", {
    points: published.map(([r, i]) => `${x(i).toFixed(1)},${sizeY(r.tokens).toFixed(1)}`).join(" "),
    class: "series size", "data-points": published.length,
  }));
  rows.forEach((r, i) => {
    const mark = svg("circle", { cx: x(i), cy: sizeY(r.tokens), r: 4, class: `size ${r.status}`, "data-version": r.id });
    const title = svg("title", {});
    title.textContent = `${short(r.id)} ${r.status}: ${r.tokens} tokens`;
    mark.append(title);
    nodes.push(mark);
  });
  chart.replaceChildren(...nodes);
}

function gateText(r) {
  const g = r.gate;
  if (!g) return "–";
  const figures = g.candidate_rate !== null && g.baseline_rate !== null
    ? ` ${g.baseline_rate.toFixed(2)} → ${g.candidate_rate.toFixed(2)} over ${g.items} items` : "";
  return `${g.verdict} (${g.by})${figures}`;
}

function evalsText(r) {
  return r.evals.map((e) => `${e.eval}: ${(100 * e.rate.rate).toFixed(0)} % [${(100 * e.rate.low).toFixed(0)}, ${(100 * e.rate.high).toFixed(0)}]`).join(" · ") || "–";
}

function renderList(tuning, rows) {
  const body = rows.slice().reverse().map((r) => {
    const origin = r.origin ? `${r.origin.case} r${r.origin.rev}/${r.origin.phase}/${r.origin.attempt}` : "import";
    const open = el("button", { type: "button", class: "open" }, "diff · why");
    open.addEventListener("click", () => openVersion(tuning, r));
    const actions = el("td", { class: "actions" }, open);
    if (r.status === "candidate" && r.gate && r.gate.verdict === "passed") {
      for (const action of ["approve", "reject"]) {
        const button = el("button", { type: "button", class: action }, action);
        button.addEventListener("click", () => decide(tuning, r, action));
        actions.append(" ", button);
      }
    }
    return el("tr", { "data-version": r.id, class: `status-${r.status}` },
      el("td", { class: "mono" }, short(r.id), r.current ? " ★" : ""),
      el("td", {}, el("span", { class: `badge ${r.status}` }, r.status)),
      el("td", { class: "mono" }, new Date(r.at).toLocaleString("en-GB")),
      el("td", {}, origin),
      el("td", { class: "num" }, `+${r.added} −${r.removed}`),
      el("td", { class: "num tokens" }, r.tokens),
      el("td", { class: "gate" }, gateText(r)),
      el("td", { class: "evals" }, evalsText(r)),
      el("td", { class: "detail" }, r.summary || ""),
      actions);
  });
  $("versions").tBodies[0].replaceChildren(...body);
}

function diffBlock(patch) {
  const lines = (patch || "").split("\n").map((line) => {
    const kind = line.startsWith("+++") || line.startsWith("---") || line.startsWith("diff ") ? "head"
      : line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "ctx";
    return el("div", { class: `line ${kind}` }, line || " ");
  });
  return el("div", { class: "diff" }, ...lines);
}

async function openVersion(tuning, r) {
  const detail = $("version-detail");
  const base = r.parent ? r.parent : r.id;
  detail.replaceChildren(el("p", { class: "muted" }, "loading…"));
  let diff, why;
  try {
    [diff, why] = await Promise.all([
      getJSON(`api/tunings/${enc(tuning)}/diff/${enc(base)}/${enc(r.id)}`),
      getJSON(`api/tunings/${enc(tuning)}/versions/${enc(r.id)}/why`),
    ]);
  } catch (err) {
    detail.replaceChildren(el("p", { class: "bad" }, err.message));
    return;
  }
  const parts = [el("h3", {}, `${short(r.id)} (${r.status}) · +${diff.added} −${diff.removed}`)];
  parts.push(diffBlock(diff.patch));
  if (why.feedback) {
    parts.push(el("h4", {}, `feedback: ${why.feedback.verdict}`), el("p", {}, why.feedback.summary || ""),
      el("ul", { class: "items" }, ...why.feedback.improvements.map((i) => el("li", {}, `[${i.target}] ${i.change}`))));
  }
  if (why.analysis) parts.push(el("h4", {}, "analysis"), el("pre", { class: "analysis" }, why.analysis));
  if (r.gate) parts.push(el("h4", {}, `${r.gate.by}: ${r.gate.verdict}`), el("p", { class: "why" }, r.gate.why));
  if (why.gate && why.gate.items.length) {
    parts.push(el("ul", { class: "items gate-items" }, ...why.gate.items.map((i) =>
      el("li", { "data-case": i.case }, `${i.case} #${i.repeat}: ${i.baseline || "?"} → ${i.verdict || "ungraded"}`))));
  }
  detail.replaceChildren(el("section", { class: "card", "data-version": r.id }, ...parts));
}

// A person's decision on a waiting candidate: a write, so it needs the fleet's write token (asked for
// once and kept for the tab's life in sessionStorage, never in a cookie).
async function decide(tuning, r, action) {
  let token = sessionStorage.getItem("tunefleet-write-token");
  if (!token) {
    token = window.prompt(`The fleet's write token, to ${action} candidate ${short(r.id)}:`);
    if (!token) return;
  }
  const response = await fetch(`api/tunings/${enc(tuning)}/candidates/${enc(r.id)}/${action}`, {
    method: "POST",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json", Accept: "application/json" },
    body: "{}",
  });
  const error = $("versions-error");
  if (!response.ok) {
    let message = response.statusText;
    try { message = (await response.json()).error || message; } catch (_) { /* not JSON */ }
    if (response.status === 401) sessionStorage.removeItem("tunefleet-write-token");
    error.textContent = `${action}: ${response.status} ${message}`;
    error.hidden = false;
    return;
  }
  sessionStorage.setItem("tunefleet-write-token", token);
  error.hidden = true;
  const row = document.querySelector(`#versions tr[data-version="${r.id}"] td.actions`);
  if (row) row.append(el("span", { class: `decided badge ${action === "approve" ? "published" : "rejected"}` },
    action === "approve" ? "approved" : "rejected"));
  feed.reset();
}
