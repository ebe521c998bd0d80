"""The web extension (``web/``): valid JavaScript (``node --check``), an estimate that gives the same numbers as
``wan_core/estimate.py``, and the canvas hooks drawing those numbers (and the invalid-size flags) on the
WanCore empty-latent and sampler nodes, run in Node.js against a stub of ComfyUI's ``app``."""
from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from wan_core import estimate as E

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "web"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="Node.js is not installed (CI has it)")

SETTINGS = [
    {},  # defaults: 832x480x81, 1.3B bf16, guidance 5, 30 steps
    {"width": 1280, "height": 720, "frames": 81, "model": "14B", "dtype": "fp8", "skiparse": "osp13",
     "skiparse_k": 4, "steps": 40, "guidance": 5.0},
    {"width": 830, "height": 480, "frames": 80, "batch_size": 2, "model": "1.3B", "dtype": "fp32",
     "skiparse": "suv", "steps": 20, "guidance": 1.0},
    {"width": 832, "height": 480, "frames": 161, "model": "1.3B", "dtype": "fp16", "skiparse": "custom",
     "skiparse_custom": [1, 2, 4, 8, 4, 2] * 5},
    {"width": 480, "height": 832, "frames": 121, "model": "14B", "dtype": "bf16", "skiparse": "suv"},
    {"width": 1280, "height": 704, "frames": 121, "model": "5B", "dtype": "bf16", "steps": 50},  # Wan 2.2 TI2V
    {"width": 1264, "height": 700, "frames": 121, "model": "5B", "dtype": "fp8"},  # not multiples of 32
]


def run_node(script: Path, *args: str) -> str:
    res = subprocess.run([NODE, str(script), *args], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.mark.parametrize("path", sorted(WEB.glob("*.js")), ids=lambda p: p.name)
def test_node_check(path):
    res = subprocess.run([NODE, "--check", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


def test_web_files_are_es_modules():
    assert json.loads((WEB / "package.json").read_text())["type"] == "module"  # node and browsers agree
    assert {"wancore.js", "wancore_estimate.js"} <= {p.name for p in WEB.glob("*.js")}


def _same(a, b, path="") -> list[str]:
    if isinstance(a, float) or isinstance(b, float):
        return [] if math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0) else [f"{path}: {a} != {b}"]
    if isinstance(a, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        return [p for k in a for p in _same(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path}: lengths {len(a)} != {len(b)}"]
        return [p for i, (x, y) in enumerate(zip(a, b)) for p in _same(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def test_js_estimate_equals_python(tmp_path):
    script = tmp_path / "estimate_harness.mjs"
    script.write_text(
        f"import * as E from {json.dumps((WEB / 'wancore_estimate.js').as_uri())};\n"
        "const settings = JSON.parse(process.argv[2]);\n"
        "const out = settings.map((s) => {\n"
        "  const e = E.estimate(s);\n"
        "  return { e, flops: E.formatFlops(e.attention_flops_dense), bytes: E.formatBytes(e.peak_bytes) };\n"
        "});\n"
        "console.log(JSON.stringify(out));\n")
    results = json.loads(run_node(script, json.dumps(SETTINGS)))
    assert len(results) == len(SETTINGS)
    for setting, got in zip(SETTINGS, results):
        want = E.estimate(**setting)
        problems = _same(want, got["e"])
        assert not problems, (setting, problems)
        assert got["flops"] == E.format_flops(want["attention_flops_dense"])
        assert got["bytes"] == E.format_bytes(want["peak_bytes"])
    assert results[2]["e"]["valid"] is False and len(results[2]["e"]["problems"]) == 2


# ---------------------------------------------------------------- the canvas hooks, against a stub app

APP_STUB = """
export const app = {
  extensions: [],
  registerExtension(ext) { this.extensions.push(ext); },
  graph: null,
};
"""

# no server: the model file's header is unknown, the estimate goes by the file name
API_STUB = "export const api = { async fetchApi() { return { ok: false }; } };\n"

CANVAS_HARNESS = """
import { app } from "./scripts/app.js";
await import("./extensions/wancore/wancore.js");
const ext = app.extensions.find((e) => e.name === "WanCore.estimate");
const types = {};
for (const name of ["WanCoreEmptyLatent", "WanCoreSampler", "WanCoreModelLoader", "VAEDecode"]) {
  const proto = {
    setSize(s) { this.size = s; },
    computeSize() { return [300, 180]; },
  };
  const nodeType = { prototype: proto };
  await ext.beforeRegisterNodeDef(nodeType, { name }, app);
  types[name] = nodeType;
}
const links = new Map();
const nodes = new Map();
const graph = { links, getNodeById: (id) => nodes.get(id) };
app.graph = graph;
function make(id, type, widgets, inputs = [], outputs = []) {
  const n = Object.create(types[type].prototype);
  Object.assign(n, { id, type, graph, size: [300, 180], flags: {},
    widgets: Object.entries(widgets).map(([name, value]) => ({ name, value })),
    inputs: inputs.map((name) => ({ name, link: null })), outputs: outputs.map(() => ({ links: [] })) });
  n.onNodeCreated?.();
  nodes.set(id, n);
  return n;
}
function connect(id, from, slot, to, inputName) {
  links.set(id, { id, origin_id: from.id, origin_slot: slot, target_id: to.id });
  from.outputs[slot].links.push(id);
  to.inputs.find((i) => i.name === inputName).link = id;
}
function draw(node) {
  const texts = [];
  const ctx = { save() {}, restore() {}, fillText(t, x, y) { texts.push({ t, y, color: this.fillStyle }); } };
  node.onDrawForeground(ctx);
  return texts;
}
const cfg = JSON.parse(process.argv[2]);
const loader = make(1, "WanCoreModelLoader", cfg.loader, [], ["model"]);
const latent = make(2, "WanCoreEmptyLatent", cfg.latent, [], ["latent"]);
const sampler = make(3, "WanCoreSampler", cfg.sampler, ["model", "embeds", "latent"], ["latent"]);
const lone = make(4, "WanCoreEmptyLatent", { width: 830, height: 480, frames: 80, batch_size: 1 }, [], ["latent"]);
connect(1, loader, 0, sampler, "model");
connect(2, latent, 0, sampler, "latent");
const out = { latent: draw(latent), sampler: draw(sampler), lone: draw(lone),
              loaderPatched: typeof loader.onDrawForeground, sizes: [latent.size, sampler.size, lone.size] };
console.log(JSON.stringify(out));
"""


@pytest.fixture
def canvas(web_stage):
    harness = web_stage(APP_STUB, API_STUB) / "canvas_harness.js"
    harness.write_text(CANVAS_HARNESS)
    return harness


def test_canvas_shows_the_python_estimate(canvas):
    cfg = {
        "loader": {"model_name": "wan2.1_t2v_14B_fp8_scaled.safetensors", "weight_dtype": "fp8_e4m3fn",
                   "attention": "sdpa", "skiparse": "osp13", "skiparse_k": 4},
        "latent": {"width": 832, "height": 480, "frames": 81, "batch_size": 1},
        "sampler": {"seed": 1, "steps": 40, "guidance": 6.0},
    }
    out = json.loads(run_node(canvas, json.dumps(cfg)))
    want = E.estimate(width=832, height=480, frames=81, model="14B", dtype="fp8", skiparse="osp13",
                      skiparse_k=4, steps=40, guidance=6.0)
    assert out["loaderPatched"] == "undefined"  # only the latent and sampler nodes get the overlay
    for key in ("latent", "sampler"):  # both ends of the link show the same numbers
        text = "\n".join(t["t"] for t in out[key])
        assert "latent [1, 16, 21, 60, 104] · 32,760 tokens" in text
        assert E.format_flops(want["attention_flops_dense"]) + "/step dense" in text
        assert E.format_flops(want["attention_flops"]) + " osp13" in text
        assert "14B fp8: weights " + E.format_bytes(want["weight_bytes"]) in text
        assert E.format_bytes(want["peak_bytes"]) + " peak" in text
        assert E.format_flops(want["flops_total"]) + " for 40 steps" in text
        assert not any("⚠" in t["t"] for t in out[key])


def test_canvas_flags_invalid_sizes_before_queueing(canvas):
    cfg = {"loader": {"model_name": "wan2.1_t2v_1.3B_fp16.safetensors", "weight_dtype": "auto"},
           "latent": {"width": 832, "height": 480, "frames": 81, "batch_size": 1},
           "sampler": {"steps": 30, "guidance": 5.0}}
    out = json.loads(run_node(canvas, json.dumps(cfg)))
    flags = [t for t in out["lone"] if "⚠" in t["t"]]
    assert [t["t"] for t in flags] == ["⚠ " + p for p in E.size_problems(830, 480, 80)]
    assert all(t["color"] == "#ff6b6b" for t in flags)
    assert "(no loader connected)" in "\n".join(t["t"] for t in out["lone"])
    assert all(t["y"] <= out["sizes"][2][1] for t in out["lone"])  # the node grew to hold the warnings
    assert out["sizes"][2][1] > out["sizes"][0][1]
