// Drives the status page in a real (headless) Chromium over the DevTools
// protocol and prints what it saw, as JSON.
//  - sort (default): clicks a sort header, so the click goes through the
//    page's own event handler as a user's does: the pid column before,
//    after one click on "pid" (descending) and after a second (ascending),
//    and the header's aria-sort each time.
//  - layout: in a 1440 x 1000 window, the width the page's main column and
//    its GPU grid take, the grid's columns, and each card header's height
//    in lines and whether any of its text is clipped.
// Usage: node --experimental-websocket .ci/statuspage-click.mjs CHROMIUM URL [sort|layout]
// Node >= 20.10 (WebSocket); no packages.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [chromium, url, mode = "sort"] = process.argv.slice(2);
const windowSize = mode === "layout" ? "1440,1000" : "1280,1000";
const dir = mkdtempSync(join(tmpdir(), "gpumemd-click-"));
const proc = spawn(chromium, ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
  "--remote-debugging-port=0", `--user-data-dir=${dir}`, `--window-size=${windowSize}`, "about:blank"],
  { stdio: "ignore" });
const deadline = Date.now() + 60000;
const sleep = ms => new Promise(r => setTimeout(r, ms));

// The pid column and both headers' aria-sort, before and after two clicks.
async function sortClicks(evaluate) {
  await waitFor(evaluate, "document.querySelector('table.procs th[data-key=pid]')", "a process table");
  const state = `(() => { const t = document.querySelector("table.procs");
    return { pids: [...t.querySelectorAll("tr td:first-child")].map(td => +td.textContent),
             pidSort: t.querySelector("th[data-key=pid]").getAttribute("aria-sort"),
             usedSort: t.querySelector("th[data-key=used]").getAttribute("aria-sort") }; })()`;
  const click = `document.querySelector("table.procs th[data-key=pid]").click()`;
  const before = await evaluate(state);
  await evaluate(click);
  const once = await evaluate(state);
  await evaluate(click);
  const twice = await evaluate(state);
  return { before, once, twice };
}

// Widths in CSS px; a header's lines are its height over its line height.
async function layout(evaluate) {
  await waitFor(evaluate, "document.querySelector('#grid .card .t')", "a grid of cards");
  return evaluate(`(() => {
    const w = el => Math.round(el.getBoundingClientRect().width);
    const grid = document.getElementById("grid");
    const headers = [...grid.querySelectorAll(".card .t")].map(t => {
      const cs = getComputedStyle(t);
      const lh = parseFloat(cs.lineHeight) || 1.4 * parseFloat(cs.fontSize);
      const clipped = [t, ...t.querySelectorAll("span, small")].some(s => s.scrollWidth > s.clientWidth + 1);
      return { text: t.textContent, lines: Math.round(t.getBoundingClientRect().height / lh), clipped };
    });
    return { viewport: document.documentElement.clientWidth, main: w(document.querySelector("main")), grid: w(grid),
             columns: getComputedStyle(grid).gridTemplateColumns.split(" ").length, headers };
  })()`);
}

// The page marks <body data-rendered="N"> after each render.
async function waitFor(evaluate, what, name) {
  while (!(await evaluate(`+(document.body && document.body.dataset.rendered || 0) > 0 && !!(${what})`))) {
    if (Date.now() > deadline) throw new Error(`the page did not render ${name}`);
    await sleep(200);
  }
}

let status = 1;
try {
  let port;
  while (!port) {
    if (Date.now() > deadline) throw new Error("Chromium wrote no DevToolsActivePort");
    try { port = readFileSync(join(dir, "DevToolsActivePort"), "utf8").split("\n")[0]; } catch { await sleep(100); }
  }
  const pages = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
  const ws = new WebSocket(pages.find(p => p.type === "page").webSocketDebuggerUrl);
  await new Promise((ok, bad) => { ws.onopen = ok; ws.onerror = bad; });
  let id = 0;
  const waiting = new Map();
  ws.onmessage = m => { const r = JSON.parse(m.data); if (waiting.has(r.id)) { waiting.get(r.id)(r); waiting.delete(r.id); } };
  const send = (method, params) => new Promise(ok => { const n = ++id; waiting.set(n, ok); ws.send(JSON.stringify({ id: n, method, params })); });
  const evaluate = async expr => {
    const r = await send("Runtime.evaluate", { expression: expr, awaitPromise: true, returnByValue: true });
    if (r.result.exceptionDetails) throw new Error(JSON.stringify(r.result.exceptionDetails));
    return r.result.result.value;
  };
  await send("Page.navigate", { url });
  console.log(JSON.stringify(mode === "layout" ? await layout(evaluate) : await sortClicks(evaluate)));
  status = 0;
} catch (e) {
  console.error(`statuspage-click: ${e.message}`);
} finally {
  proc.kill();
  await sleep(300);
  rmSync(dir, { recursive: true, force: true });
  process.exit(status);
}
