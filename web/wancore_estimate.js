// WanCore cost estimate in the browser: the same arithmetic as wan_core/estimate.py (tests keep the two
// equal). Latent shape, video tokens, self-attention FLOPs (dense and skiparse), DiT weight and activation
// memory, and frame/size validity for one Wan 2.1 text-to-video setting. Plain ES module, no build step;
// ComfyUI also imports it as an extension module, which is harmless (it registers nothing).

export const MODELS = {
  "1.3B": { dim: 1536, ffn_dim: 8960, num_heads: 12, num_layers: 30 },
  "14B": { dim: 5120, ffn_dim: 13824, num_heads: 40, num_layers: 40 },
  // Wan 2.2 TI2V-5B: 48 latent channels at 16x (docs/wan22.md section 1)
  "5B": { dim: 3072, ffn_dim: 14336, num_heads: 24, num_layers: 30, in_dim: 48, out_dim: 48, latent_channels: 48,
    vae_space: 16 },
};
const FIXED = {
  in_dim: 16, out_dim: 16, text_dim: 4096, freq_dim: 256, text_len: 512,
  patch: [1, 2, 2], latent_channels: 16, vae_time: 4, vae_space: 8,
};
export const DTYPES = { fp32: 4, fp16: 2, bf16: 2, fp8: 1 };
export const SKIPARSE = ["none", "osp13", "suv", "custom"];
const SUV_PROFILE = [1, 2, 4, 8, 4, 2, 1];

const mod = (a, m) => ((a % m) + m) % m; // Python's % for negative a
const floorDiv = (a, b) => Math.floor(a / b);

// Python's round(): half to even.
function roundHalfEven(x) {
  const f = Math.floor(x);
  const diff = x - f;
  if (diff > 0.5) return f + 1;
  if (diff < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

// ---------------------------------------------------------------- validity

export function nearestValid(value, multiple, offset = 0) {
  const below = Math.max(offset === 0 ? offset + multiple : offset, value - mod(value - offset, multiple));
  const above = mod(value - offset, multiple) === 0 ? below : below + multiple;
  return [below, above];
}

const spec = (model, key) => MODELS[model][key] ?? FIXED[key];

export function sizeProblems(width, height, frames, multiple = 16) {
  const problems = [];
  for (const [name, value] of [["width", width], ["height", height]]) {
    if (value < multiple || mod(value, multiple) !== 0) {
      const [lo, hi] = nearestValid(Math.max(value, 1), multiple);
      problems.push(`${name}=${value}: must be a multiple of ${multiple}; nearest valid: ${lo} or ${hi}`);
    }
  }
  if (frames < 1 || mod(frames - 1, 4) !== 0) {
    const [lo, hi] = nearestValid(Math.max(frames, 1), 4, 1);
    problems.push(`frames=${frames}: must be 4n+1; nearest valid: ${lo} or ${hi}`);
  }
  return problems;
}

// ---------------------------------------------------------------- skiparse schedules

export function suvStageBlocks(numLayers, numStages = 7) {
  const weights = [];
  for (let i = 0; i < numStages; i++) weights.push(2 * (Math.min(i, numStages - 1 - i) + 1));
  const unit = numLayers >= 2 * numStages ? 2 : 1;
  const total = weights.reduce((a, b) => a + b, 0);
  const sizes = weights.map((w) => Math.max(unit, unit * roundHalfEven(w / total * numLayers / unit)));
  const mid = floorDiv(numStages, 2);
  sizes[mid] += numLayers - sizes.reduce((a, b) => a + b, 0);
  if (sizes[mid] < 1) throw new Error(`cannot split ${numLayers} blocks into ${numStages} SUV stages`);
  return sizes;
}

export function skiparseKs(schedule, numLayers, k = 4, ks = null) {
  if (schedule === "none") return new Array(numLayers).fill(1);
  if (schedule === "osp13") {
    const out = [];
    for (let i = 0; i < numLayers; i++) out.push(i >= 2 && i < numLayers - 2 ? k : 1);
    return out;
  }
  if (schedule === "suv") {
    const out = [];
    suvStageBlocks(numLayers, SUV_PROFILE.length).forEach((size, s) => {
      for (let j = 0; j < size; j++) out.push(SUV_PROFILE[s]);
    });
    return out;
  }
  if (schedule === "custom") {
    if (!ks || ks.length !== numLayers) throw new Error(`skiparse 'custom' needs one ratio per block (${numLayers})`);
    return ks.map((v) => Math.trunc(Number(v)));
  }
  throw new Error(`unknown skiparse schedule '${schedule}'; choose one of ${SKIPARSE.join(", ")}`);
}

// ---------------------------------------------------------------- parameters and memory

export function ditParamCounts(model) {
  const c = MODELS[model];
  const d = c.dim, f = c.ffn_dim, n = c.num_layers;
  const [pt, ph, pw] = FIXED.patch;
  const patch = d * spec(model, "in_dim") * pt * ph * pw + d;
  const text = FIXED.text_dim * d + d + d * d + d;
  const time = FIXED.freq_dim * d + d + d * d + d + d * 6 * d + 6 * d;
  const block = 6 * d + 4 * (d * d + d) + 2 * d + 2 * d + 4 * (d * d + d) + 2 * d + d * f + f + f * d + d;
  const outDim = spec(model, "out_dim");
  const head = 2 * d + d * outDim * pt * ph * pw + outDim * pt * ph * pw;
  return {
    total: patch + text + time + n * block + head,
    block_linear: n * (8 * d * d + 2 * d * f),
    block_linear_layers: n * 10,
  };
}

export function weightBytes(model, dtype) {
  if (!(dtype in DTYPES)) throw new Error(`dtype must be one of ${Object.keys(DTYPES).join(", ")}, got '${dtype}'`);
  const p = ditParamCounts(model);
  if (dtype !== "fp8") return p.total * DTYPES[dtype];
  return p.block_linear + (p.total - p.block_linear) * 2 + p.block_linear_layers * 4;
}

export const computeBytes = (dtype) => (dtype === "fp32" ? 4 : 2);

// ---------------------------------------------------------------- the estimate

export function estimate({
  width = 832, height = 480, frames = 81, batch_size = 1, model = "1.3B", dtype = "bf16",
  skiparse = "none", skiparse_k = 4, skiparse_custom = null, steps = 30, guidance = 5.0,
} = {}) {
  if (!(model in MODELS)) throw new Error(`model must be one of ${Object.keys(MODELS).join(", ")}, got '${model}'`);
  const c = MODELS[model];
  const d = c.dim, f = c.ffn_dim, n = c.num_layers;
  const space = spec(model, "vae_space");
  const problems = sizeProblems(width, height, frames, 2 * space);
  const tLat = floorDiv(Math.max(frames - 1, 0), FIXED.vae_time) + 1;
  const hLat = floorDiv(height, space), wLat = floorDiv(width, space);
  const [pt, ph, pw] = FIXED.patch;
  const tokens = floorDiv(tLat, pt) * floorDiv(hLat, ph) * floorDiv(wLat, pw);
  const text = FIXED.text_len;
  const b = batch_size;
  const forwards = guidance === 1 ? 1 : 2;

  const ks = skiparseKs(skiparse, n, skiparse_k, skiparse_custom);
  const denseBlock = 4.0 * b * tokens * tokens * d;
  let sparse = 0.0;
  for (const k of ks) {
    if (k === 1) {
      sparse += denseBlock;
    } else {
      const padded = tokens + mod(k * k - mod(tokens, k * k), k * k);
      sparse += 4.0 * b * padded * padded * d / k;
    }
  }
  const attnDense = forwards * n * denseBlock;
  const attn = forwards * sparse;
  const cross = forwards * n * 4.0 * b * tokens * text * d;
  const perBlockLinear = 2.0 * b * (tokens * (6 * d * d + 2 * d * f) + text * 2 * d * d);
  const embed = 2.0 * b * tokens * d * (spec(model, "in_dim") * pt * ph * pw + spec(model, "out_dim") * pt * ph * pw);
  const linear = forwards * (n * perBlockLinear + embed);
  const perStep = attn + cross + linear;

  const act = computeBytes(dtype);
  const perToken = 8 * d + act * Math.max(5 * d, 2 * f + d);
  const activation = b * (tokens * perToken + text * d * act);
  const weights = weightBytes(model, dtype);
  return {
    valid: problems.length === 0,
    problems,
    latent_shape: [b, spec(model, "latent_channels"), tLat, hLat, wLat],
    tokens,
    text_tokens: text,
    forwards_per_step: forwards,
    sparse_blocks: ks.filter((k) => k > 1).length,
    attention_flops_dense: attnDense,
    attention_flops: attn,
    attention_ratio: attnDense ? attn / attnDense : 1.0,
    cross_attention_flops: cross,
    linear_flops: linear,
    flops_per_step: perStep,
    flops_total: perStep * steps,
    params: ditParamCounts(model).total,
    weight_bytes: weights,
    activation_bytes: activation,
    peak_bytes: weights + activation,
  };
}

export const modelSizeFromName = (fileName) => {
  const name = String(fileName).toLowerCase();
  return name.includes("14b") ? "14B" : name.includes("5b") ? "5B" : "1.3B";
};

function sig3(x) {
  if (x >= 100) return String(Math.floor(x + 0.5));
  if (x >= 10) return (Math.floor(x * 10 + 0.5) / 10).toFixed(1);
  return (Math.floor(x * 100 + 0.5) / 100).toFixed(2);
}

export function formatFlops(flops) {
  for (const [unit, scale] of [["PFLOP", 1e15], ["TFLOP", 1e12], ["GFLOP", 1e9], ["MFLOP", 1e6]]) {
    if (flops >= scale) return `${sig3(flops / scale)} ${unit}`;
  }
  return `${sig3(flops)} FLOP`;
}

export function formatBytes(n) {
  for (const [unit, scale] of [["GiB", 1024 ** 3], ["MiB", 1024 ** 2], ["KiB", 1024]]) {
    if (n >= scale) return `${sig3(n / scale)} ${unit}`;
  }
  return `${Math.trunc(n)} B`;
}

// ---------------------------------------------------------------- diffusion cache (wan_core/cache/expected.py)

export const CACHE_METHODS = ["off", "exact", "wan", "teacache", "magcache", "easycache", "calibrate"];
const WAN_CACHE = { start: 0.2, end: 1.0, attentionInterval: 2 };
const TEACACHE_E = { retention: 1, forceLast: true }; // published "e" mode
const EASYCACHE = { retention: 0.2 };
const MAGCACHE = { "1.3B": { retention: 0.2, maxSkips: 4 }, "14B": { retention: 0.2, maxSkips: 6 } };
const PUBLISHED_SPEEDUP = { teacache: 2.0, magcache: 2.8, easycache: 2.4, wan: 1.62 };

const stepIndex = (fraction, steps) => Math.min(steps, Math.max(0, Math.ceil(fraction * steps - 1e-9)));
const wanCfgInterval = (steps) => Math.max(2, roundHalfEven(steps / 10));

function windowOf(start, end, steps, interval) {
  const first = stepIndex(start, steps), stop = stepIndex(end, steps);
  const anchor = (i) => i - mod(i - first, interval);
  return { anchor, reuses: (i) => i >= first && i < stop && anchor(i) !== i };
}

export function attentionShare(dim, ffnDim, tokens, textTokens = 512) {
  const L = tokens, d = dim;
  const selfAttn = 4 * L * L * d + 8 * L * d * d;
  const cross = 4 * L * d * d + 4 * L * textTokens * d;
  const ffn = 4 * L * d * ffnDim;
  return selfAttn / (selfAttn + cross + ffn);
}

// Passes of one branch (0 cond, 1 uncond) that a huge threshold still computes (simulated).
function forcedPasses(method, steps, model, start, end, branch) {
  let k = Infinity, first, stop;
  if (method === "magcache") {
    const d = MAGCACHE[model] ?? MAGCACHE["1.3B"];
    const calls = Math.trunc(2 * steps * (start ?? d.retention));
    first = Math.min(steps, Math.max(0, Math.ceil((calls - branch) / 2)));
    stop = end !== null && end !== undefined ? stepIndex(end, steps) : steps;
    k = d.maxSkips;
  } else if (method === "teacache") {
    first = start !== null && start !== undefined ? stepIndex(start, steps) : Math.min(steps, TEACACHE_E.retention);
    stop = end !== null && end !== undefined ? stepIndex(end, steps) : steps - (TEACACHE_E.forceLast ? 1 : 0);
  } else {
    first = stepIndex(start ?? EASYCACHE.retention, steps);
    stop = end !== null && end !== undefined ? stepIndex(end, steps) : steps - 1;
  }
  const need = method === "easycache" ? 2 : 1;
  let computed = 0, skipped = 0;
  for (let i = 0; i < steps; i++) {
    if (i >= first && i < stop && computed >= need && skipped < k) skipped += 1;
    else { computed += 1; skipped = 0; }
  }
  return computed;
}

// Expected DiT evaluations of a cache setting (same keys and numbers as wan_core.cache.expected_evaluations).
export function expectedEvaluations({
  method = "exact", steps = 30, guidance = 5.0, model = "1.3B", tokens = 0, start = null, end = null,
} = {}) {
  if (!CACHE_METHODS.includes(method)) throw new Error(`cache: unknown method '${method}'; valid: ${CACHE_METHODS.join(", ")}`);
  const branches = guidance === 0 || guidance === 1 ? 1 : 2;
  const total = steps * branches;
  let expected = total, minimum = total, exact = true, reused = 0;
  if (method === "wan") {
    const first = start ?? WAN_CACHE.start, last = end ?? WAN_CACHE.end;
    const cfg = windowOf(first, last, steps, wanCfgInterval(steps));
    const attn = windowOf(first, last, steps, WAN_CACHE.attentionInterval);
    const uncond = [];
    for (let i = 0; i < steps; i++) uncond.push(branches === 2 && !cfg.reuses(i));
    expected = minimum = steps + uncond.filter(Boolean).length;
    for (let i = 0; i < steps; i++) {
      if (attn.reuses(i)) reused += 1;
      if (branches === 2 && attn.reuses(i) && uncond[i] && uncond[attn.anchor(i)]) reused += 1;
    }
  } else if (["teacache", "magcache", "easycache"].includes(method)) {
    exact = false;
    minimum = 0;
    for (let b = 0; b < branches; b++) minimum += forcedPasses(method, steps, model, start, end, b);
    minimum = Math.min(total, minimum);
    expected = Math.max(minimum, roundHalfEven(total / PUBLISHED_SPEEDUP[method]));
  }
  const dims = MODELS[model] ?? MODELS["1.3B"];
  const share = tokens ? attentionShare(dims.dim, dims.ffn_dim, tokens) : 0.0;
  const work = total ? (expected - reused * share) / total : 1.0;
  return { total, expected, minimum, exact, attention_reused: reused, work };
}

// ---------------------------------------------------------------- context windows (wan_core/estimate.py context_split)

// How windows of `window` real frames overlapping by `overlap` real frames split `frames` real frames, in latent
// frames; anchor = latent frame 0 heads every window (WanCoreContextWindows), false = ComfyUI's own node.
export function contextSplit(frames, window, overlap, schedule = "static", anchor = true) {
  const latent = floorDiv(Math.max(frames - 1, 0), FIXED.vae_time) + 1;
  const length = Math.max(floorDiv(window - 1, FIXED.vae_time) + 1, 1);
  const body = anchor ? length - 1 : length;
  const latOverlap = Math.min(Math.max(floorDiv(overlap - 1, FIXED.vae_time) + 1, 0), Math.max(body - 1, 0));
  const out = { latent_frames: latent, length, overlap: latOverlap, covers: latent <= length, windows: 1 };
  if (out.covers) return out;
  const n = latent - (anchor ? 1 : 0);
  if (schedule === "static" || schedule === "standard_static") {
    let count = 0;
    for (let start = 0; start < n; start += body - latOverlap) {
      count += 1;
      if (Math.min(start, n - body) + body >= n) break;
    }
    out.windows = count;
  } else if (schedule === "batched") {
    out.windows = Math.ceil(n / body);
  } else {
    out.windows = 0;
  }
  return out;
}

// A share as a whole percent, rounded as Python's round() (half to even), so the canvas and the CLI agree.
export const percent = (share) => roundHalfEven(share * 100);
