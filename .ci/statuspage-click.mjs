// Clicks a sort header of the status page in a real (headless) Chromium and
// prints what the table did, as JSON: the pid column before, after one click
// on "pid" (ascending) and after a second (descending), and the header's
// aria-sort each time. Driven over the DevTools protocol, so the click goes
// through the page's own event handler, as a user's does.
// Usage: node --experimental-websocket .ci/statuspage-click.mjs CHROMIUM URL
// Node >= 20.10 (WebSocket); no packages.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [chromium, url] = process.argv.slice(2);
const dir = mkdtempSync(join(tmpdir(), "gpumemd-click-"));
const proc = spawn(chromium, ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
  "--remote-debugging-port=0", `--user-data-dir=${dir}`, "--window-size=1280,1000", "about:blank"],
  { stdio: "ignore" });
const deadline = Date.now() + 60000;
const sleep = ms => new Promise(r => setTimeout(r, ms));
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
  // The page marks <body data-rendered="N"> after each render.
  while (!(await evaluate("+(document.body && document.body.dataset.rendered || 0) > 0 && !!document.querySelector('table.procs th[data-key=pid]')"))) {
    if (Date.now() > deadline) throw new Error("the page did not render a process table");
    await sleep(200);
  }
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
  console.log(JSON.stringify({ before, once, twice }));
  status = 0;
} catch (e) {
  console.error(`statuspage-click: ${e.message}`);
} finally {
  proc.kill();
  await sleep(300);
  rmSync(dir, { recursive: true, force: true });
  process.exit(status);
}
