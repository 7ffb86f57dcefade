// Small DOM and fetch helpers shared by the dashboard's views.
// Every value from the API is put into the page as text (never as HTML).

const SVG_NS = "http://www.w3.org/2000/svg";

export const $ = (id) => document.getElementById(id);

export function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (key === "class") node.className = value;
    else if (key === "href") node.setAttribute("href", value);
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export function svg(tag, attrs) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  return node;
}

export async function getJSON(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  if (!response.ok) {
    let message = response.statusText;
    try { message = (await response.json()).error || message; } catch (_) { /* not JSON */ }
    throw new Error(`${response.status} ${message}`);
  }
  return response.json();
}

/** A detail page fed from the API: `changed(path)` gives the JSON at `path` when it differs from what
 * the page shows, else null (unchanged: the page, open details included, stays as it is; unreadable:
 * the error is shown in the page's `errorId` element). */
/** A list the fleet view shows (`api/goals`, `api/evals`), read now; null while the fleet view is hidden
 * or when the read fails (the next round tries again). */
export async function fleetList(path) {
  if ($("fleet-view").hidden) return null;
  try {
    return await getJSON(path);
  } catch (_) {
    return null;
  }
}

export class DetailFeed {
  constructor(errorId) {
    this.errorId = errorId;
    this.shown = "";
  }

  /** Forget what is on the page, so that the next load draws it afresh. */
  reset() {
    this.shown = "";
  }

  async changed(path) {
    let detail;
    try {
      detail = await getJSON(path);
      $(this.errorId).hidden = true;
    } catch (err) {
      $(this.errorId).textContent = err.message;
      $(this.errorId).hidden = false;
      return null;
    }
    const seen = JSON.stringify(detail);
    if (seen === this.shown) return null;
    this.shown = seen;
    return detail;
  }
}

export const fmtInt = (n) => Number(n || 0).toLocaleString("en-US");
export const fmtUsd = (n) => Number(n || 0).toFixed(4);
export const short = (v) => (v ? String(v).slice(0, 10) : "–");
export const caseHref = (tuning, id) => `#/case/${encodeURIComponent(tuning)}/${encodeURIComponent(id)}`;

export function fillBody(table, rows) {
  const body = table.tBodies[0];
  body.replaceChildren(...rows);
}
