// WanCore canvas extension: live cost estimate wherever a Wan video is made on the canvas.
//
// Under every latent-making node (ours, and ComfyUI's EmptyHunyuanLatentVideo / Wan*ToVideo / Wan 2.2 latents)
// and every sampler (WanCoreSampler; ComfyUI's KSampler / KSamplerAdvanced when the model upstream is a Wan DiT
// from UNETLoader or our loader) it draws the latent shape, the video token count, the self-attention cost per
// step (dense, and with the skiparse schedule of our loader or WanCoreNativeAttention), the DiT weight +
// activation memory, and one green line each for a cache (WanCoreCache / WanCoreNativeCache: expected DiT
// evaluations) and context windows (WanCoreContextWindows / WanContextWindowsManual: windows, per-window tokens
// and peak). The model's size and stored dtype come from the file's safetensors header (server route
// /wancore/dit_info, by file name from ComfyUI's list), else from the file name. Invalid frame counts and sizes
// are flagged in red before the prompt is queued. Numbers come from wancore_estimate.js (= wan_core/estimate.py).
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";
import { contextSplit, estimate, expectedEvaluations, formatBytes, formatFlops, modelSizeFromName, percent }
  from "./wancore_estimate.js";

// Latent-making nodes: model = the size their latent implies when no loader says otherwise; wan = a Wan node
// by itself (EmptyHunyuanLatentVideo is Hunyuan's too: drawn only when it feeds a Wan sampler).
export const LATENT_NODES = {
  WanCoreEmptyLatent: { wan: true }, WanCoreImageToVideo: { wan: true }, WanCoreExtendVideo: { wan: true },
  // WanCore VACE: the video's length; a reference image adds one latent frame more than is counted
  WanCoreVace: { wan: true },
  WanCoreEmptyLatent22: { wan: true, model: "5B" }, WanCoreImageToVideoLatent22: { wan: true, model: "5B" },
  EmptyHunyuanLatentVideo: { wan: false },
  WanImageToVideo: { wan: true }, WanFirstLastFrameToVideo: { wan: true }, WanVaceToVideo: { wan: true },
  WanFunControlToVideo: { wan: true }, WanFunInpaintToVideo: { wan: true }, WanCameraImageToVideo: { wan: true },
  WanPhantomSubjectToVideo: { wan: true }, WanTrackToVideo: { wan: true }, WanSoundImageToVideo: { wan: true },
  WanHuMoImageToVideo: { wan: true }, Wan22FunControlToVideo: { wan: true },
  Wan22ImageToVideoLatent: { wan: true, model: "5B" },
};
// Samplers: the input their latent comes by, their guidance widget.
export const SAMPLERS = {
  WanCoreSampler: { latent: "latent", guidance: "guidance" },
  KSampler: { latent: "latent_image", guidance: "cfg" },
  KSamplerAdvanced: { latent: "latent_image", guidance: "cfg" },
};
const LOADERS = ["WanCoreModelLoader", "UNETLoader"];
const MOE = "WanCoreMoE"; // Wan 2.2 A14B: the estimate is that of one expert (the high-noise one's loader)
const NATIVE_ATTENTION = "WanCoreNativeAttention";
const CACHES = ["WanCoreCache", "WanCoreNativeCache"];
const CONTEXTS = ["WanCoreContextWindows", "WanContextWindowsManual"];
export const DIT_INFO_ROUTE = "/wancore/dit_info";
const LINE_HEIGHT = 15;
const LINES = 4; // estimate lines (warning and note lines come on top)
const PASS_THROUGH = ["Reroute", "PrimitiveNode"];
// Where a latent's width and height come from when the node has none (an extension continues a decoded video).
const SIZE_INPUTS = ["latent", "images", "samples", "latent_image", "image"];

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

const hasInput = (node, name) => Boolean(node?.inputs?.some((i) => i.name === name));

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

// Nodes fed by the LATENT outputs of `node` (through reroutes).
function downstream(node, depth = 0) {
  const graph = node.graph ?? app.graph;
  const out = [];
  (node.outputs ?? []).forEach((output, slot) => {
    if (output.type && output.type !== "LATENT" && output.type !== "*") return;
    for (const id of output.links ?? []) {
      const link = getLink(graph, id);
      const target = link && graph.getNodeById(link.target_id);
      if (!target) continue;
      if (PASS_THROUGH.includes(target.type) && depth < 16) out.push(...downstream(target, depth + 1));
      else out.push(target);
    }
  });
  return out;
}

// ---------------------------------------------------------------- the model file (header via the server)

const DIT_INFO = new Map(); // file name -> summary | null (answered) ; absent/undefined = not asked or pending

// The file's size and stored dtype from its safetensors header (the server's route; undefined until it answers).
function ditInfo(name) {
  if (!name) return null;
  if (!DIT_INFO.has(name)) {
    DIT_INFO.set(name, undefined);
    Promise.resolve()
      .then(() => api.fetchApi(`${DIT_INFO_ROUTE}?name=${encodeURIComponent(name)}`))
      .then((r) => (r.ok ? r.json() : null))
      .then((j) => DIT_INFO.set(name, j?.summary ?? null), () => DIT_INFO.set(name, null))
      .then(() => app.graph?.setDirtyCanvas?.(true, true));
  }
  return DIT_INFO.get(name);
}

const nameDtype = (name) => {
  const n = String(name).toLowerCase();
  return n.includes("fp8") ? "fp8" : n.includes("fp16") ? "fp16" : n.includes("fp32") ? "fp32" : "bf16";
};

// Size, dtype and skiparse of the loader: null when it is not a Wan DiT (a UNETLoader of another model).
function loaderSettings(loader) {
  const name = String(widgetValue(loader, ["model_name", "unet_name"], ""));
  const info = ditInfo(name);
  const choice = String(widgetValue(loader, ["weights", "weight_dtype"], "auto")).toLowerCase();
  if (loader.type === "UNETLoader" && !info && !/wan/i.test(name)) return null;
  let dtype;
  if (choice.includes("fp8")) dtype = "fp8";
  else if (["fp32", "fp16", "bf16"].includes(choice)) dtype = choice;
  else if (loader.type === "UNETLoader") dtype = info?.dtype ?? nameDtype(name); // "default": as stored
  else dtype = (info?.dtype ?? nameDtype(name)) === "fp8" ? "fp8" : "bf16"; // our auto: fp8 files stay fp8, else bf16
  const skiparse = String(widgetValue(loader, ["skiparse"], "none"));
  const named = /1\.3b|14b|5b/i.test(name); // else the size is a guess (the built-in demo model is far smaller)
  return { model: info?.size ?? modelSizeFromName(name), assumed: !info && !named, dtype,
           skiparse: ["none", "osp13", "suv"].includes(skiparse) ? skiparse : "none",
           skiparse_k: Number(widgetValue(loader, ["skiparse_k"], 4)) || 4, skiparse_custom: null,
           known: true, header: Boolean(info) };
}

// The native attention node's skiparse choice.
function attentionSettings(node) {
  const skiparse = String(widgetValue(node, ["skiparse"], "none"));
  const custom = String(widgetValue(node, ["custom_ks"], "")).split(/[\s,]+/).filter(Boolean).map(Number);
  return { skiparse, skiparse_k: Number(widgetValue(node, ["k"], 4)) || 4,
           skiparse_custom: skiparse === "custom" ? custom : null };
}

// Walk the sampler's model input up to its loader, collecting our native patches and ComfyUI's context windows
// on the way (the patch nearest the sampler wins, as it is applied last). null = not a Wan model.
function modelChain(sampler) {
  const found = { loader: null, attention: null, cache: null, context: null };
  let node = upstream(sampler, "model");
  for (let hop = 0; hop < 32 && node; hop++) {
    if (LOADERS.includes(node.type)) { found.loader = node; break; }
    if (node.type === NATIVE_ATTENTION) found.attention ??= node;
    else if (CACHES.includes(node.type)) found.cache ??= node;
    else if (CONTEXTS.includes(node.type)) found.context ??= node;
    if (node.type === MOE) node = upstream(node, "high_noise_model");
    else if (hasInput(node, "model")) node = upstream(node, "model");
    else break;
  }
  return found;
}

// ---------------------------------------------------------------- what the nodes around say

function sizeSource(node) {
  let current = node;
  for (let hop = 0; hop < 16 && current; hop++) {
    const next = SIZE_INPUTS.map((n) => (hasInput(current, n) ? upstream(current, n) : null)).find(Boolean);
    if (!next) return null;
    if (LATENT_NODES[next.type] && widgetValue(next, ["width"], null) !== null) {
      return { width: Number(widgetValue(next, ["width"], 832)), height: Number(widgetValue(next, ["height"], 480)) };
    }
    current = next;
  }
  return null;
}

function latentSettings(node) {
  const kind = LATENT_NODES[node?.type];
  if (!kind) return null;
  const own = widgetValue(node, ["width"], null) !== null;
  const size = own ? null : sizeSource(node);
  return {
    width: own ? Number(widgetValue(node, ["width"], 832)) : size?.width ?? 832,
    height: own ? Number(widgetValue(node, ["height"], 480)) : size?.height ?? 480,
    frames: Number(widgetValue(node, ["frames", "length"], 81)),
    batch_size: Number(widgetValue(node, ["batch_size"], 1)),
    modelHint: kind.model ?? null,
  };
}

// Steps this sampler runs (KSamplerAdvanced: from start_at_step to end_at_step) and its guidance.
function samplerSettings(sampler) {
  if (!sampler) return { steps: 30, guidance: 5.0 };
  let steps = Number(widgetValue(sampler, ["steps"], 30));
  if (sampler.type === "KSamplerAdvanced") {
    const start = Number(widgetValue(sampler, ["start_at_step"], 0));
    steps = Math.max(0, Math.min(Number(widgetValue(sampler, ["end_at_step"], steps)), steps) - start);
  }
  return { steps, guidance: Number(widgetValue(sampler, [SAMPLERS[sampler.type].guidance], 5.0)) };
}

// The context windows node's choice, in real frames as on its widgets (ComfyUI's own node: no anchor frame).
function contextSettings(node) {
  const ours = node.type === "WanCoreContextWindows";
  return { frames: Number(widgetValue(node, ["context_frames", "context_length"], 81)),
           overlap: Number(widgetValue(node, ["context_overlap"], 30)),
           schedule: String(widgetValue(node, ["context_schedule"], ours ? "static" : "standard_static")),
           anchor: ours ? Boolean(widgetValue(node, ["anchor_first_frame"], true)) : false };
}

// The cache node's choice (-1 = the method's default).
function cacheSettings(node) {
  const value = (name) => {
    const v = Number(widgetValue(node, [name], -1));
    return v === -1 || Number.isNaN(v) ? null : v;
  };
  return { method: String(widgetValue(node, ["method"], "wan")), start: value("start"), end: value("end") };
}

// Everything the estimate needs, gathered around `node` in the graph; null when no Wan video is made here.
function gather(node) {
  let latentNode = null, sampler = null;
  if (SAMPLERS[node.type]) {
    sampler = node;
    const fed = upstream(node, SAMPLERS[node.type].latent);
    latentNode = LATENT_NODES[fed?.type] ? fed : null;
  } else {
    latentNode = node;
    sampler = downstream(node).find((n) => SAMPLERS[n.type]) ?? null;
  }
  const chain = sampler ? modelChain(sampler) : {};
  const loaded = chain.loader ? loaderSettings(chain.loader) : undefined; // null: a loader of another model
  const wan = loaded ? true : loaded === null ? false
    : sampler?.type === "WanCoreSampler" || Boolean(LATENT_NODES[latentNode?.type]?.wan);
  if (!wan) return null;
  const latent = latentSettings(latentNode);
  const model = loaded ?? { model: latent?.modelHint ?? "1.3B", dtype: "bf16", skiparse: "none", skiparse_k: 4,
                            skiparse_custom: null, known: false };
  if (chain.attention) Object.assign(model, attentionSettings(chain.attention));
  const cacheNode = sampler?.type === "WanCoreSampler" ? upstream(sampler, "cache") : chain.cache;
  const contextNode = sampler?.type === "WanCoreSampler" ? upstream(sampler, "context") : chain.context;
  return { latent, model, sampler: samplerSettings(sampler),
           cache: node === sampler && CACHES.includes(cacheNode?.type) ? cacheSettings(cacheNode) : null,
           context: CONTEXTS.includes(contextNode?.type) ? contextSettings(contextNode) : null };
}

// Two lines: how the connected context windows split the video, then one window's tokens and peak (activations
// are sized by the window, not the video).
function contextLines(context, latent, model, sampler) {
  const s = contextSplit(latent.frames, context.frames, context.overlap, context.schedule, context.anchor);
  if (s.covers) {
    return [`context window ${s.length} latent frames ≥ the video's ${s.latent_frames}: one window, the plain sampler`];
  }
  const w = estimate({ ...latent, ...model, ...sampler, frames: (s.length - 1) * 4 + 1 });
  const per = `per window: ${w.tokens.toLocaleString("en-US")} tokens · ≈ ${formatBytes(w.peak_bytes)} peak`;
  if (!s.windows) return [`context windows of ${s.length} latent frames (${context.schedule}: a new set each step)`, per];
  return [`context windows: ${s.windows} × ${s.length} latent frames · ` +
          `${formatFlops(w.flops_total * s.windows)} for ${sampler.steps} steps`, per];
}

// One line: the DiT evaluations the connected cache is expected to compute (exact for off/exact/wan).
function cacheLine(cache, sampler, model, tokens) {
  const c = expectedEvaluations({ ...cache, ...sampler, model: model.model, tokens });
  const work = `≈ ${percent(c.work)}% DiT work`;
  if (c.exact) return `cache ${cache.method}: ${c.expected}/${c.total} DiT evaluations · ${work}`;
  return `cache ${cache.method}: ≈ ${c.expected}/${c.total} DiT evaluations (published speed-up; ≥ ${c.minimum}) · ${work}`;
}

// The lines drawn under `node`: { lines, problems, notes }, or null when no Wan video is made there.
export function describe(node) {
  const g = gather(node);
  if (!g) return null;
  const { latent, model, sampler, cache, context } = g;
  if (!latent) return { lines: ["connect a Wan latent node (WanCore Empty Video Latent, …) to see the cost estimate"],
                        problems: [], notes: [] };
  const e = estimate({ ...latent, ...model, ...sampler });
  const sparse = model.skiparse !== "none"
    ? ` · ${formatFlops(e.attention_flops)} ${model.skiparse} (${percent(e.attention_ratio)}%)` : "";
  const who = !model.known ? `${model.model} bf16 (no loader connected)`
    : `${model.model}${model.assumed ? " (assumed)" : ""} ${model.dtype}`;
  const lines = [
    `latent [${e.latent_shape.join(", ")}] · ${e.tokens.toLocaleString("en-US")} tokens`,
    `attention ${formatFlops(e.attention_flops_dense)}/step dense${sparse}`,
    `${who}: weights ${formatBytes(e.weight_bytes)} + activations ${formatBytes(e.activation_bytes)}`,
    `≈ ${formatBytes(e.peak_bytes)} peak · ${formatFlops(e.flops_total)} for ${sampler.steps} steps`,
  ];
  const notes = cache ? [cacheLine(cache, sampler, model, e.tokens)] : [];
  if (context) notes.push(...contextLines(context, latent, model, sampler));
  return { lines, problems: e.problems, notes };
}

function drawEstimate(node, ctx) {
  if (node.flags?.collapsed) return;
  let info;
  try {
    info = describe(node);
  } catch (err) {
    info = { lines: [`estimate unavailable: ${err.message}`], problems: [], notes: [] };
  }
  const wanted = info ? extraHeight(info.problems.length + info.notes.length) : 0;
  // The widgets' own height: a size saved in a workflow file may not include our lines, so measure it.
  const base = typeof node.computeSize === "function" ? node.computeSize()[1]
    : node.size[1] - (node._wancoreExtra ?? 0);
  if (node._wancoreExtra !== wanted || node.size[1] < base + wanted) { // lines changed, or a loaded size
    node._wancoreExtra = wanted;
    node.setSize([info ? Math.max(node.size[0], 340) : node.size[0], base + wanted]);
  }
  if (!info) return;
  const rows = [...info.problems.map((p) => ["#ff6b6b", `⚠ ${p}`]), ...info.lines.map((l) => ["#9aa", l]),
    ...info.notes.map((l) => ["#9c9", l])];
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

const extraHeight = (rows) => (LINES + rows) * LINE_HEIGHT + 8;

// The pack's web folder can be served twice (module WEB_DIRECTORY and pyproject [tool.comfy] web), which
// imports this file under two URLs; register the hooks once.
const REGISTERED = Symbol.for("WanCore.estimate.registered");
if (!globalThis[REGISTERED]) {
  globalThis[REGISTERED] = true;
  app.registerExtension({
    name: "WanCore.estimate",
    async beforeRegisterNodeDef(nodeType, nodeData) {
      if (!LATENT_NODES[nodeData.name] && !SAMPLERS[nodeData.name]) return;
      const onNodeCreated = nodeType.prototype.onNodeCreated;
      nodeType.prototype.onNodeCreated = function () {
        const r = onNodeCreated?.apply(this, arguments);
        if (nodeData.name.startsWith("WanCore")) { // ours always draw; ComfyUI's grow once they know it is Wan
          this._wancoreExtra = extraHeight(0);
          this.setSize([Math.max(this.size[0], 340), this.computeSize()[1] + this._wancoreExtra]);
        }
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
