// The canvas in the real ComfyUI frontend (issues 44 and 50), in headless Chromium: loads every shipped UI workflow
// (workflows/*.json) into a running ComfyUI with this pack, reads what web/wancore.js draws under each latent and
// sampler node (its describe(), the function the draw hook calls), screenshots each graph, sets a wrong frame count
// (warning expected), and queues a bad frame count through the UI with and without web/wancore_errors.js (only
// `frames` may be marked red after). Optional: skips (exit 0) without playwright-core or Chromium; CI has neither.
//
//   node bench/canvas_check.mjs [OUT_DIR] [workflow-prefix]
//   env: COMFY_URL (http://127.0.0.1:8230), CHROMIUM (/usr/bin/chromium), PLAYWRIGHT_CORE (module path or name)
// Exit 1 when a workflow draws no estimate, the wrong frame count draws no warning, or the marks are wrong.
import fs from "node:fs";
import path from "node:path";
import os from "node:os";
import { fileURLToPath } from "node:url";

const BASE = process.env.COMFY_URL ?? "http://127.0.0.1:8230";
const WF = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "workflows");
const SHOTS = path.resolve(process.argv[2] ?? "canvas_shots");
const only = process.argv[3];
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
let chromium;
try {
  ({ chromium } = await import(process.env.PLAYWRIGHT_CORE ?? "playwright-core"));
} catch {
  console.log("skipped: playwright-core is not installed (npm install playwright-core, or set PLAYWRIGHT_CORE)");
  process.exit(0);
}
if (!fs.existsSync(CHROMIUM)) {
  console.log(`skipped: no Chromium at ${CHROMIUM} (set CHROMIUM)`);
  process.exit(0);
}
fs.mkdirSync(SHOTS, { recursive: true });

async function open(browser, { blockErrors = false } = {}) {
  const page = await browser.newPage();
  if (blockErrors) await page.route("**/wancore_errors.js", (r) => r.fulfill({ contentType: "text/javascript", body: "" }));
  page.on("pageerror", (e) => console.log("pageerror:", e.message, (e.stack ?? "").split("\n").slice(1, 4).join(" <")));
  await page.goto(BASE, { waitUntil: "networkidle" });
  await page.waitForFunction(() => window.app?.graph && window.app?.canvas, null, { timeout: 60000 });
  await page.waitForTimeout(1500);
  await page.evaluate(async () => { // no "missing models" dialog over the canvas (the test server has no VAE file)
    await window.app.extensionManager?.setting?.set?.("Comfy.Workflow.ShowMissingModelsWarning", false);
  }).catch(() => {});
  return page;
}

async function load(page, data) {
  await page.evaluate(async (d) => { await window.app.loadGraphData(d); }, data);
  await page.waitForTimeout(800);
  await page.evaluate(() => { window.app.canvas.setDirty(true, true); window.app.canvas.draw(true, true); });
  await page.waitForTimeout(700);
}

// Scale 1 with the estimate nodes (latent and sampler kinds) in view, left to right.
async function zoomOnEstimates(page) {
  await page.evaluate(async () => {
    const m = await import("/extensions/ComfyUI-WanCore/wancore.js");
    const nodes = window.app.graph.nodes.filter((n) => m.LATENT_NODES[n.type] || m.SAMPLERS[n.type]);
    const x = Math.min(...nodes.map((n) => n.pos[0])), y = Math.min(...nodes.map((n) => n.pos[1]));
    const ds = window.app.canvas.ds;
    ds.scale = 1;
    ds.offset = [-x + 40, -y + 60];
    window.app.canvas.setDirty(true, true);
    window.app.canvas.draw(true, true);
  });
  await page.waitForTimeout(400);
}

async function describeAll(page) {
  return page.evaluate(async () => {
    const m = await import("/extensions/ComfyUI-WanCore/wancore.js");
    const out = [];
    for (const n of window.app.graph.nodes) {
      if (!m.LATENT_NODES[n.type] && !m.SAMPLERS[n.type]) continue;
      const d = m.describe(n);
      out.push({ id: n.id, type: n.type, size: n.size.map(Math.round),
                 rows: d ? [...d.problems.map((p) => "⚠ " + p), ...d.lines, ...d.notes] : null });
    }
    return out;
  });
}

const browser = await chromium.launchPersistentContext(fs.mkdtempSync(path.join(os.tmpdir(), "pwprof-")), {
  executablePath: CHROMIUM, headless: true, viewport: { width: 1800, height: 1100 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const report = {};
try {
  const page = await open(browser);
  const files = fs.readdirSync(WF).filter((f) => f.endsWith(".json") && (!only || f.startsWith(only))).sort();
  for (const f of files) {
    const data = JSON.parse(fs.readFileSync(path.join(WF, f), "utf8"));
    await load(page, data);
    await page.waitForTimeout(500); // the header route's answer redraws
    await page.evaluate(() => window.app.canvas.draw(true, true));
    report[f] = await describeAll(page);
    await page.screenshot({ path: path.join(SHOTS, f.replace(".json", ".png")) });
    await zoomOnEstimates(page);
    await page.screenshot({ path: path.join(SHOTS, f.replace(".json", "_zoom.png")) });
  }
  // a wrong frame count on the first latent node of t2v_basic and native_t2v_fast
  for (const f of ["t2v_basic.json", "native_t2v_fast.json", "i2v_wan21.json"]) {
    await load(page, JSON.parse(fs.readFileSync(path.join(WF, f), "utf8")));
    await page.evaluate(async () => {
      const m = await import("/extensions/ComfyUI-WanCore/wancore.js");
      const n = window.app.graph.nodes.find((x) => m.LATENT_NODES[x.type]);
      n.widgets.find((w) => w.name === "frames" || w.name === "length").value = 80;
      window.app.canvas.setDirty(true, true); window.app.canvas.draw(true, true);
    });
    await page.waitForTimeout(500);
    await page.evaluate(() => window.app.canvas.draw(true, true));
    report["bad_frames_" + f] = await describeAll(page);
    await zoomOnEstimates(page);
    await page.screenshot({ path: path.join(SHOTS, "bad_frames_" + f.replace(".json", ".png")) });
  }
  // validator errors through the UI queue, with and without the hook
  for (const [label, blockErrors] of [["before", true], ["after", false]]) {
    const p = blockErrors ? await open(browser, { blockErrors }) : page;
    await load(p, JSON.parse(fs.readFileSync(path.join(WF, "t2v_basic.json"), "utf8")));
    const marks = await p.evaluate(async () => {
      const n = window.app.graph.nodes.find((x) => x.type === "WanCoreEmptyLatent");
      n.widgets.find((w) => w.name === "frames").value = 80;
      await window.app.queuePrompt(0, 1);
      await new Promise((r) => setTimeout(r, 1000));
      const errs = window.app.lastNodeErrors?.[n.id]?.errors ?? [];
      return { errors: errs.map((e) => [e.extra_info?.input_name, e.details]),
               hasErrors: n.inputs.filter((i) => i.hasErrors).map((i) => i.name) };
    });
    report["queue_" + label] = marks;
    await p.screenshot({ path: path.join(SHOTS, `errors_${label}_dialog.png`) }); // the frontend's error dialog
    await p.keyboard.press("Escape");
    await p.waitForTimeout(300);
    await p.evaluate(() => window.app.canvas.draw(true, true));
    await p.evaluate(() => document.querySelectorAll(".p-dialog-mask").forEach((d) => d.remove()));
    await zoomOnEstimates(p);
    await p.screenshot({ path: path.join(SHOTS, `errors_${label}.png`) });
    if (blockErrors) await p.close();
  }
} finally {
  fs.writeFileSync(path.join(SHOTS, "report.json"), JSON.stringify(report, null, 1));
  await browser.close();
}
const failures = [];
for (const [name, nodes] of Object.entries(report)) {
  if (name.startsWith("queue_")) continue;
  if (!nodes.some((n) => (n.rows?.length ?? 0) >= 4)) failures.push(`${name}: no estimate lines`);
  if (name.startsWith("bad_frames_") && !nodes.some((n) => n.rows?.some((r) => r.startsWith("⚠ frames=80")))) {
    failures.push(`${name}: no frame-count warning`);
  }
}
if (JSON.stringify(report.queue_after?.hasErrors) !== JSON.stringify(["frames"])) {
  failures.push(`queued frames=80 marks ${JSON.stringify(report.queue_after?.hasErrors)}, not just frames`);
}
for (const [name, nodes] of Object.entries(report)) {
  if (name.startsWith("queue_")) console.log(name, JSON.stringify(nodes.hasErrors));
  else for (const n of nodes) console.log(`${name} #${n.id} ${n.type}: ${(n.rows ?? ["(nothing)"]).join(" | ")}`);
}
console.log(failures.length ? `FAILED:\n${failures.join("\n")}` : `ok: screenshots in ${SHOTS}`);
process.exit(failures.length ? 1 : 0);
