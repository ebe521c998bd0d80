// WanCore canvas extension: live cost estimate on the WanCore empty-latent and sampler nodes.
//
// Below the widgets of WanCoreEmptyLatent and WanCoreSampler it draws the latent shape, the video token
// count, the self-attention cost per step (dense, and with the model loader's skiparse schedule), and the
// DiT weight + activation memory for the model size and weight dtype chosen on the connected
// WanCoreModelLoader; invalid frame counts (not 4n+1) and sizes (not multiples of 16) are flagged in red
// before the prompt is queued. Numbers come from wancore_estimate.js (= wan_core/estimate.py).
import { app } from "../../scripts/app.js";
import { estimate, expectedEvaluations, formatBytes, formatFlops, modelSizeFromName } from "./wancore_estimate.js";

const LATENT_NODES = ["WanCoreEmptyLatent", "EmptyHunyuanLatentVideo", "WanCoreEmptyLatent22",
  "WanCoreImageToVideoLatent22"];
const SAMPLER = "WanCoreSampler";
const LOADER = "WanCoreModelLoader";
const CACHE = "WanCoreCache";
const CONTEXT = "WanCoreContextWindows";
const TARGETS = ["WanCoreEmptyLatent", "WanCoreEmptyLatent22", SAMPLER];
const MOE = "WanCoreMoE"; // Wan 2.2 A14B: the estimate is that of one expert (the high-noise one's loader)
const LINE_HEIGHT = 15;
const LINES = 4; // estimate lines (warning lines come on top)
const PASS_THROUGH = ["Reroute", "PrimitiveNode"];

function widgetValue(node, names, fallback) {
  if (!node?.widgets) return fallback;
  for (const name of names) {
    const w = node.widgets.find((x) => x.name === name);
    if (w !== undefined && w.value !== undefined && w.value !== null) return w.value;
  }
  return fallback;
}

function getLink(graph, id) {
  if (id === null || id === undefined || !graph?.links) return null;
  return typeof graph.links.get === "function" ? graph.links.get(id) : graph.links[id];
}

// The node feeding input `name` of `node`, looking through reroutes.
function upstream(node, name) {
  let current = node;
  let slotName = name;
  for (let hop = 0; hop < 16 && current; hop++) {
    const graph = current.graph ?? app.graph;
    const input = slotName === null ? current.inputs?.[0] : current.inputs?.find((i) => i.name === slotName);
    const link = getLink(graph, input?.link);
    if (!link) return null;
    const origin = graph.getNodeById(link.origin_id);
    if (!origin || !PASS_THROUGH.includes(origin.type)) return origin;
    current = origin;
    slotName = null;
  }
  return null;
}

// Nodes fed by output `slot` of `node` (through reroutes).
function downstream(node, slot = 0, depth = 0) {
  const graph = node.graph ?? app.graph;
  const out = [];
  for (const id of node.outputs?.[slot]?.links ?? []) {
    const link = getLink(graph, id);
    const target = link && graph.getNodeById(link.target_id);
    if (!target) continue;
    if (PASS_THROUGH.includes(target.type) && depth < 16) out.push(...downstream(target, 0, depth + 1));
    else out.push(target);
  }
  return out;
}

// Weight dtype of the estimate from the loader's widgets (fp8 formats -> fp8; auto -> bf16 on a GPU).
function weightDtype(loader) {
  const choice = String(widgetValue(loader, ["weights", "weight_dtype"], "auto")).toLowerCase();
  if (choice.includes("fp8")) return "fp8";
  if (choice === "fp32" || choice === "fp16" || choice === "bf16") return choice;
  return "bf16";
}

function modelSettings(loader) {
  if (!loader || loader.type !== LOADER) return { model: "1.3B", dtype: "bf16", skiparse: "none", skiparse_k: 4, known: false };
  const skiparse = String(widgetValue(loader, ["skiparse"], "none"));
  return {
    model: modelSizeFromName(widgetValue(loader, ["model_name"], "")),
    dtype: weightDtype(loader),
    skiparse: ["none", "osp13", "suv"].includes(skiparse) ? skiparse : "none",
    skiparse_k: Number(widgetValue(loader, ["skiparse_k"], 4)) || 4,
    known: true,
  };
}

function latentSettings(node) {
  if (!node || !LATENT_NODES.includes(node.type)) return null;
  return {
    width: Number(widgetValue(node, ["width"], 832)),
    height: Number(widgetValue(node, ["height"], 480)),
    frames: Number(widgetValue(node, ["frames", "length"], 81)),
    batch_size: Number(widgetValue(node, ["batch_size"], 1)),
  };
}

function samplerSettings(sampler) {
  return {
    steps: Number(widgetValue(sampler, ["steps"], 30)),
    guidance: Number(widgetValue(sampler, ["guidance"], 5.0)),
  };
}

// Everything the estimate needs, gathered around `node` in the graph.
function gather(node) {
  let latent, sampler;
  if (node.type === SAMPLER) {
    sampler = node;
    latent = latentSettings(upstream(node, "latent"));
  } else {
    latent = latentSettings(node);
    sampler = downstream(node, 0).find((n) => n.type === SAMPLER) ?? null;
  }
  let modelNode = sampler ? upstream(sampler, "model") : null;
  if (modelNode?.type === MOE) modelNode = upstream(modelNode, "high_noise_model");
  const model = modelSettings(modelNode);
  const cacheNode = node.type === SAMPLER ? upstream(node, "cache") : null;
  const contextNode = sampler ? upstream(sampler, "context") : null;
  return { latent, model, sampler: sampler ? samplerSettings(sampler) : { steps: 30, guidance: 5.0 },
           cache: cacheNode?.type === CACHE ? cacheSettings(cacheNode) : null,
           context: contextNode?.type === CONTEXT ? contextSettings(contextNode) : null };
}

// The WanCoreContextWindows node's choice, in real frames as on its widgets.
function contextSettings(node) {
  return { frames: Number(widgetValue(node, ["context_frames"], 81)),
           overlap: Number(widgetValue(node, ["context_overlap"], 30)),
           schedule: String(widgetValue(node, ["context_schedule"], "static")),
           anchor: Boolean(widgetValue(node, ["anchor_first_frame"], true)) };
}

// Static windows over the video (wan_core/sampling/context_windows.py: latent frame 0 heads every anchored
// window, the others step by window - overlap, the last moved back to end on the last frame).
function staticWindowCount(latentFrames, length, overlapLatent, anchor) {
  const body = anchor ? length - 1 : length;
  const n = latentFrames - (anchor ? 1 : 0);
  const overlap = Math.min(overlapLatent, Math.max(body - 1, 0));
  let count = 0;
  for (let start = 0; start < n; start += body - overlap) {
    count += 1;
    if (Math.min(start, n - body) + body >= n) break;
  }
  return count;
}

// One line: how the connected context windows split the video, with one window's peak (activations are
// sized by the window, not the video).
function contextLine(context, latent, model, sampler) {
  const latentFrames = Math.floor((latent.frames - 1) / 4) + 1;
  const length = Math.max(Math.floor((context.frames - 1) / 4) + 1, 1);
  if (length >= latentFrames) {
    return `context window ${length} latent frames ≥ the video's ${latentFrames}: one window, the plain sampler`;
  }
  const w = estimate({ ...latent, ...model, ...sampler, frames: context.frames });
  const peak = `≈ ${formatBytes(w.peak_bytes)} peak per window`;
  if (context.schedule !== "static") {
    return `context windows of ${length} latent frames (${context.schedule}: a new set each step) · ${peak}`;
  }
  const overlap = context.overlap > 0 ? Math.floor((context.overlap - 1) / 4) + 1 : 0;
  const count = staticWindowCount(latentFrames, length, overlap, context.anchor);
  return `context windows: ${count} × ${length} latent frames · ${peak} · ` +
         `${formatFlops(w.flops_total * count)} for ${sampler.steps} steps`;
}

// The WanCoreCache node's choice (-1 = the method's default).
function cacheSettings(node) {
  const value = (name) => {
    const v = Number(widgetValue(node, [name], -1));
    return v === -1 || Number.isNaN(v) ? null : v;
  };
  return { method: String(widgetValue(node, ["method"], "wan")), start: value("start"), end: value("end") };
}

// One line: the DiT evaluations the connected cache is expected to compute (exact for off/exact/wan).
function cacheLine(cache, sampler, model, tokens) {
  const c = expectedEvaluations({ ...cache, ...sampler, model: model.model, tokens });
  const work = `≈ ${Math.round(c.work * 100)}% DiT work`;
  if (c.exact) return `cache ${cache.method}: ${c.expected}/${c.total} DiT evaluations · ${work}`;
  return `cache ${cache.method}: ≈ ${c.expected}/${c.total} DiT evaluations (published speed-up; ≥ ${c.minimum}) · ${work}`;
}

export function describe(node) {
  const { latent, model, sampler, cache, context } = gather(node);
  if (!latent) return { lines: ["connect a WanCore Empty Video Latent to see the cost estimate"], problems: [] };
  const e = estimate({ ...latent, ...model, ...sampler });
  const sparse = model.skiparse !== "none"
    ? ` · ${formatFlops(e.attention_flops)} ${model.skiparse} (${Math.round(e.attention_ratio * 100)}%)` : "";
  const who = model.known ? `${model.model} ${model.dtype}` : "1.3B bf16 (no loader connected)";
  const lines = [
    `latent [${e.latent_shape.join(", ")}] · ${e.tokens.toLocaleString("en-US")} tokens`,
    `attention ${formatFlops(e.attention_flops_dense)}/step dense${sparse}`,
    `${who}: weights ${formatBytes(e.weight_bytes)} + activations ${formatBytes(e.activation_bytes)}`,
    `≈ ${formatBytes(e.peak_bytes)} peak · ${formatFlops(e.flops_total)} for ${sampler.steps} steps`,
  ];
  const notes = cache ? [cacheLine(cache, sampler, model, e.tokens)] : [];
  if (context) notes.push(contextLine(context, latent, model, sampler));
  return { lines, problems: e.problems, notes };
}

function drawEstimate(node, ctx) {
  if (node.flags?.collapsed) return;
  let info;
  try {
    info = describe(node);
  } catch (err) {
    info = { lines: [`estimate unavailable: ${err.message}`], problems: [] };
  }
  const notes = info.notes ?? [];
  const wanted = extraHeight(info.problems.length + notes.length);
  // The widgets' own height: a size saved in a workflow file may not include our lines, so measure it.
  const base = typeof node.computeSize === "function" ? node.computeSize()[1]
    : node.size[1] - (node._wancoreExtra ?? 0);
  if (node._wancoreExtra !== wanted || node.size[1] < base + wanted) { // warnings changed, or a loaded size
    node._wancoreExtra = wanted;
    node.setSize([node.size[0], base + wanted]);
  }
  const rows = [...info.problems.map((p) => ["#ff6b6b", `⚠ ${p}`]), ...info.lines.map((l) => ["#9aa", l]),
    ...notes.map((l) => ["#9c9", l])];
  const top = node.size[1] - rows.length * LINE_HEIGHT - 4;
  ctx.save();
  ctx.font = "11px sans-serif";
  ctx.textAlign = "left";
  rows.forEach(([color, text], i) => {
    ctx.fillStyle = color;
    ctx.fillText(text, 8, top + (i + 1) * LINE_HEIGHT - 3, node.size[0] - 16);
  });
  ctx.restore();
}

const extraHeight = (problems) => (LINES + problems) * LINE_HEIGHT + 8;

// The pack's web folder can be served twice (module WEB_DIRECTORY and pyproject [tool.comfy] web), which
// imports this file under two URLs; register the hooks once.
const REGISTERED = Symbol.for("WanCore.estimate.registered");
if (!globalThis[REGISTERED]) {
  globalThis[REGISTERED] = true;
  app.registerExtension({
    name: "WanCore.estimate",
    async beforeRegisterNodeDef(nodeType, nodeData) {
      if (!TARGETS.includes(nodeData.name)) return;
      const onNodeCreated = nodeType.prototype.onNodeCreated;
      nodeType.prototype.onNodeCreated = function () {
        const r = onNodeCreated?.apply(this, arguments);
        this._wancoreExtra = extraHeight(0);
        this.setSize([Math.max(this.size[0], 340), this.computeSize()[1] + this._wancoreExtra]);
        return r;
      };
      const onDrawForeground = nodeType.prototype.onDrawForeground;
      nodeType.prototype.onDrawForeground = function (ctx) {
        const r = onDrawForeground?.apply(this, arguments);
        drawEstimate(this, ctx);
        return r;
      };
    },
  });
}
