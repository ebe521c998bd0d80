"""The canvas estimate on every kind of Wan graph (issue 50): our latent nodes, ComfyUI's native latent nodes and
KSampler / KSamplerAdvanced over a Wan DiT from UNETLoader, the native patch nodes (attention, cache) and both
context-window nodes; run in Node.js against a stub of ComfyUI's ``app`` and ``api`` (the model file's header
summary served as the ``/wancore/dit_info`` route would), each drawn number checked against ``wan_core``."""
from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from wan_core import estimate as E
from wan_core.cache import expected_evaluations

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "web"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="Node.js is not installed (CI has it)")

STUBS = {
    "scripts/app.js": "export const app = { extensions: [], registerExtension(e) { this.extensions.push(e); },"
                      " graph: null };\n",
    # the header route's answers come from the test (globalThis.DIT_INFO: name -> summary)
    "scripts/api.js": "export const api = { asked: [], async fetchApi(url) {\n"
                      "  this.asked.push(url);\n"
                      "  const name = decodeURIComponent(url.split('name=')[1]);\n"
                      "  const summary = globalThis.DIT_INFO[name] ?? null;\n"
                      "  return { ok: true, json: async () => ({ name, summary }) };\n"
                      "} };\n",
}

HARNESS = """
import { app } from "./scripts/app.js";
import { api } from "./scripts/api.js";
const spec = JSON.parse(process.argv[2]);
globalThis.DIT_INFO = spec.dit_info ?? {};
await import("./extensions/wancore/wancore.js");
const ext = app.extensions.find((e) => e.name === "WanCore.estimate");
const types = {};
for (const n of spec.nodes) {
  if (types[n.type]) continue;
  const proto = { setSize(s) { this.size = s; }, computeSize() { return [300, 180]; } };
  types[n.type] = { prototype: proto };
  await ext.beforeRegisterNodeDef(types[n.type], { name: n.type }, app);
}
const nodes = new Map(), links = new Map();
const graph = { links, getNodeById: (id) => nodes.get(id), setDirtyCanvas() {} };
app.graph = graph;
for (const s of spec.nodes) {
  const n = Object.create(types[s.type].prototype);
  Object.assign(n, { id: s.id, type: s.type, graph, size: [300, 180], flags: {},
    widgets: Object.entries(s.widgets ?? {}).map(([name, value]) => ({ name, value })),
    inputs: (s.inputs ?? []).map((name) => ({ name, link: null })),
    outputs: (s.outputs ?? []).map((type) => ({ type, links: [] })) });
  n.onNodeCreated?.();
  nodes.set(s.id, n);
}
spec.links.forEach(([from, slot, to, input], i) => {
  links.set(i + 1, { id: i + 1, origin_id: from, origin_slot: slot, target_id: to });
  nodes.get(from).outputs[slot].links.push(i + 1);
  nodes.get(to).inputs.find((x) => x.name === input).link = i + 1;
});
function draw(node) {
  const texts = [];
  const ctx = { save() {}, restore() {}, fillText(t) { texts.push({ t, color: this.fillStyle }); } };
  node.onDrawForeground?.(ctx);
  return texts;
}
for (const n of nodes.values()) draw(n); // first draw asks the server for the model files' headers
await new Promise((r) => setTimeout(r, 20));
const out = { asked: api.asked, drawn: {} };
for (const [id, n] of nodes) out.drawn[id] = draw(n);
console.log(JSON.stringify(out));
"""


@pytest.fixture
def run_graph(tmp_path):
    ext = tmp_path / "extensions" / "wancore"
    ext.mkdir(parents=True)
    for p in WEB.iterdir():
        shutil.copy(p, ext / p.name)
    for rel, text in STUBS.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "package.json").write_text('{"type": "module"}')
    harness = tmp_path / "harness.js"
    harness.write_text(HARNESS)

    def run(spec: dict) -> dict:
        res = subprocess.run([NODE, str(harness), json.dumps(spec)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        out["text"] = {int(k): "\n".join(t["t"] for t in v) for k, v in out["drawn"].items()}
        return out

    return run


def node(id_, type_, widgets=None, inputs=(), outputs=()):
    return {"id": id_, "type": type_, "widgets": widgets or {}, "inputs": list(inputs), "outputs": list(outputs)}


def estimate_lines(e: dict, steps: int) -> list[str]:
    """The numbers the four grey lines must carry for the Python estimate ``e``."""
    return [f"latent [{', '.join(map(str, e['latent_shape']))}] · {e['tokens']:,} tokens",
            E.format_flops(e["attention_flops_dense"]) + "/step dense",
            "weights " + E.format_bytes(e["weight_bytes"]) + " + activations " + E.format_bytes(e["activation_bytes"]),
            E.format_bytes(e["peak_bytes"]) + " peak · " + E.format_flops(e["flops_total"]) + f" for {steps} steps"]


def native_graph(latent_type="EmptyHunyuanLatentVideo", latent_widgets=None, unet="wan2.1_t2v_1.3B_fp16.safetensors",
                 sampler="KSampler", sampler_widgets=None):
    latent_out = ["CONDITIONING", "CONDITIONING", "LATENT"] if latent_type.startswith("WanImage") else ["LATENT"]
    return {
        "nodes": [
            node(1, "UNETLoader", {"unet_name": unet, "weight_dtype": "default"}, outputs=["MODEL"]),
            node(2, "WanCoreNativeAttention", {"backend": "auto", "skiparse": "osp13", "k": 4}, ["model"], ["MODEL"]),
            node(3, "WanCoreNativeCache", {"method": "easycache", "threshold": -1, "start": -1, "end": -1},
                 ["model"], ["MODEL"]),
            node(4, "WanContextWindowsManual", {"context_length": 81, "context_overlap": 30,
                                                "context_schedule": "standard_static"}, ["model"], ["MODEL"]),
            node(5, "ModelSamplingSD3", {"shift": 8.0}, ["model"], ["MODEL"]),
            node(6, latent_type, latent_widgets or {"width": 832, "height": 480, "length": 161, "batch_size": 1},
                 [], latent_out),
            node(7, sampler, sampler_widgets or {"seed": 0, "steps": 20, "cfg": 6.0},
                 ["model", "positive", "negative", "latent_image"], ["LATENT"]),
            node(8, "Reroute", {}, [""], ["*"]),
        ],
        "links": [[1, 0, 2, "model"], [2, 0, 3, "model"], [3, 0, 4, "model"], [4, 0, 5, "model"],
                  [5, 0, 7, "model"], [6, len(latent_out) - 1, 8, ""], [8, 0, 7, "latent_image"]],
        "dit_info": {"wan2.1_t2v_1.3B_fp16.safetensors": {"size": "1.3B", "dtype": "fp16", "layers": 30, "dim": 1536},
                     "mystery.safetensors": {"size": "14B", "dtype": "fp8", "layers": 40, "dim": 5120}},
    }


def test_native_ksampler_over_a_wan_unet_draws_the_python_estimate(run_graph):
    out = run_graph(native_graph())
    assert out["asked"] == ["/wancore/dit_info?name=wan2.1_t2v_1.3B_fp16.safetensors"]  # asked once, by name
    e = E.estimate(width=832, height=480, frames=161, model="1.3B", dtype="fp16", skiparse="osp13", skiparse_k=4,
                   steps=20, guidance=6.0)
    for nid in (6, 7):  # the latent node and the sampler show the same numbers
        for line in estimate_lines(e, 20):
            assert line in out["text"][nid], (nid, line, out["text"][nid])
        assert "1.3B fp16: weights" in out["text"][nid]
        sparse = E.format_flops(e["attention_flops"]) + f" osp13 ({round(e['attention_ratio'] * 100)}%)"
        assert sparse in out["text"][nid]
    c = expected_evaluations("easycache", steps=20, guidance=6.0, model="1.3B", tokens=e["tokens"])
    assert (f"cache easycache: ≈ {c['expected']}/{c['total']} DiT evaluations (published speed-up; ≥ {c['minimum']}) "
            f"· ≈ {round(c['work'] * 100)}% DiT work") in out["text"][7]
    assert "cache" not in out["text"][6]  # the cache line is the sampler's
    split = E.context_split(161, 81, 30, "standard_static", anchor=False)
    w = E.estimate(width=832, height=480, frames=(split["length"] - 1) * 4 + 1, model="1.3B", dtype="fp16",
                   skiparse="osp13", steps=20, guidance=6.0)
    want = (f"context windows: {split['windows']} × {split['length']} latent frames · "
            f"{E.format_flops(w['flops_total'] * split['windows'])} for 20 steps\n"
            f"per window: {w['tokens']:,} tokens · ≈ {E.format_bytes(w['peak_bytes'])} peak")
    assert want in out["text"][7] and want in out["text"][6]
    for nid in (1, 2, 3, 4, 5):
        assert out["text"][nid] == ""  # loaders and patches draw nothing


def test_the_file_header_decides_the_size_over_the_name(run_graph):
    out = run_graph(native_graph(unet="mystery.safetensors"))
    e = E.estimate(width=832, height=480, frames=161, model="14B", dtype="fp8", skiparse="osp13", steps=20,
                   guidance=6.0)
    assert "14B fp8: weights " + E.format_bytes(e["weight_bytes"]) in out["text"][7]


def test_a_unet_that_is_not_wan_draws_nothing(run_graph):
    out = run_graph(native_graph(unet="flux1-dev.safetensors"))
    assert out["text"][7] == "" and out["text"][6] == ""


def test_native_wan_latent_nodes_and_ksampler_advanced(run_graph):
    spec = native_graph("WanImageToVideo", {"width": 480, "height": 832, "length": 80, "batch_size": 1},
                        sampler="KSamplerAdvanced",
                        sampler_widgets={"steps": 20, "cfg": 3.5, "start_at_step": 0, "end_at_step": 10})
    out = run_graph(spec)
    e = E.estimate(width=480, height=832, frames=80, model="1.3B", dtype="fp16", skiparse="osp13", steps=10,
                   guidance=3.5)
    for nid in (6, 7):
        drawn = [t for t in out["drawn"][str(nid)]]
        assert [t["t"] for t in drawn if "⚠" in t["t"]] == ["⚠ " + p for p in e["problems"]]  # frames 80
        assert all(t["color"] == "#ff6b6b" for t in drawn if "⚠" in t["t"])
        for line in estimate_lines(e, 10):  # KSamplerAdvanced runs steps 0..10 of 20
            assert line in out["text"][nid]


def our(id_, type_, widgets, inputs, outputs):
    return node(id_, type_, widgets, inputs, outputs)


def test_our_image_to_video_wan22_and_extension_nodes(run_graph):
    loader = {"model_name": "wan2.1_i2v_480p_14B_fp8_e4m3fn.safetensors", "weight_dtype": "auto", "skiparse": "none"}
    spec = {"nodes": [
        our(1, "WanCoreModelLoader", loader, [], ["WANCORE_MODEL"]),
        our(2, "WanCoreImageToVideo", {"width": 832, "height": 480, "frames": 81, "batch_size": 1},
            ["vae", "start_image"], ["WANCORE_IMAGE_COND", "LATENT"]),
        our(3, "WanCoreSampler", {"steps": 40, "guidance": 5.0}, ["model", "embeds", "latent", "cache", "context"],
            ["LATENT"]),
        our(4, "WanCoreDecode", {}, ["vae", "samples"], ["IMAGE"]),
        our(5, "WanCoreExtendVideo", {"frames": 49, "overlap": 5}, ["model", "vae", "images"],
            ["WANCORE_EXTENSION", "LATENT"]),
        our(6, "WanCoreSampler", {"steps": 30, "guidance": 5.0}, ["model", "embeds", "latent"], ["LATENT"]),
        our(7, "WanCoreImageToVideoLatent22", {"width": 1280, "height": 700, "frames": 121, "batch_size": 1},
            ["vae", "start_image"], ["LATENT"]),
        our(8, "WanCoreContextWindows", {"context_frames": 33, "context_overlap": 8, "context_schedule": "static",
                                         "anchor_first_frame": True}, [], ["WANCORE_CONTEXT"]),
        our(9, "WanCoreCache", {"method": "wan", "start": -1, "end": -1}, [], ["WANCORE_CACHE"]),
    ], "links": [[1, 0, 3, "model"], [2, 1, 3, "latent"], [3, 0, 4, "samples"], [4, 0, 5, "images"],
                 [1, 0, 6, "model"], [5, 1, 6, "latent"], [8, 0, 3, "context"], [9, 0, 3, "cache"]], "dit_info": {}}
    out = run_graph(spec)
    e = E.estimate(width=832, height=480, frames=81, model="14B", dtype="fp8", steps=40)  # auto keeps fp8 files fp8
    for nid in (2, 3):
        for line in estimate_lines(e, 40):
            assert line in out["text"][nid]
    c = expected_evaluations("wan", steps=40, guidance=5.0, model="14B", tokens=e["tokens"])
    assert f"cache wan: {c['expected']}/{c['total']} DiT evaluations · ≈ {round(c['work'] * 100)}% DiT work" \
        in out["text"][3]
    split = E.context_split(81, 33, 8, "static", anchor=True)
    assert f"context windows: {split['windows']} × {split['length']} latent frames" in out["text"][3]
    ext = E.estimate(width=832, height=480, frames=49, model="14B", dtype="fp8", steps=30)  # size from upstream
    for nid in (5, 6):
        for line in estimate_lines(ext, 30):
            assert line in out["text"][nid]
    t22 = E.estimate(width=1280, height=700, frames=121, model="5B")  # no sampler: the node's own model, 5B
    assert [t["t"] for t in out["drawn"]["7"] if "⚠" in t["t"]] == ["⚠ " + p for p in t22["problems"]]
    assert "5B bf16 (no loader connected)" in out["text"][7]
    assert out["text"][4] == "" and out["text"][1] == ""


def test_chained_vace_nodes_draw_the_video_they_make(run_graph):
    """WanCore VACE (width, height, length) as the sampler's latent, the last of two chained VACE nodes; the first
    one feeds no sampler and checks its own length."""
    loader = {"model_name": "wan2.1_vace_1.3B_fp16.safetensors", "weight_dtype": "auto", "skiparse": "none"}
    vace = {"width": 832, "height": 480, "length": 81, "batch_size": 1, "strength": 1.0}
    spec = {"nodes": [
        our(1, "WanCoreModelLoader", loader, [], ["WANCORE_MODEL"]),
        our(2, "WanCoreVace", {**vace, "length": 80}, ["embeds", "vae", "control_video"],
            ["WANCORE_EMBEDS", "LATENT", "INT"]),
        our(3, "WanCoreVace", vace, ["embeds", "vae", "reference_image"], ["WANCORE_EMBEDS", "LATENT", "INT"]),
        our(4, "WanCoreSampler", {"steps": 50, "guidance": 5.0}, ["model", "embeds", "latent"], ["LATENT"]),
    ], "links": [[1, 0, 4, "model"], [2, 0, 3, "embeds"], [3, 1, 4, "latent"]], "dit_info": {}}
    out = run_graph(spec)
    e = E.estimate(width=832, height=480, frames=81, model="1.3B", dtype="fp16", steps=50)
    for nid in (3, 4):
        for line in estimate_lines(e, 50):
            assert line in out["text"][nid]
    bad = E.estimate(width=832, height=480, frames=80)
    assert [t["t"] for t in out["drawn"]["2"] if "⚠" in t["t"]] == ["⚠ " + p for p in bad["problems"]]


# ---------------------------------------------------------------- the numbers behind the lines

@pytest.mark.parametrize("frames", [1, 5, 33, 81, 121, 161, 201, 321])
@pytest.mark.parametrize("window,overlap", [(17, 4), (33, 8), (33, 16), (81, 30), (9, 0), (5, 4)])
def test_context_split_counts_the_core_windows(frames, window, overlap):
    from wan_core.sampling.context_windows import ContextWindows

    split = E.context_split(frames, window, overlap, "static", anchor=True)
    cw = ContextWindows.from_frames(window, overlap, schedule="static", anchor=True)
    assert split["windows"] == len(cw.windows(split["latent_frames"]))
    assert (split["length"], split["overlap"], split["covers"]) == (cw.length, cw.overlap,
                                                                    cw.covers(split["latent_frames"]))


def _comfy_standard_static(n: int, length: int, overlap: int) -> int:
    """ComfyUI 0.3.64's create_windows_standard_static, restated: how many windows it makes."""
    if n <= length:
        return 1
    count, start = 0, 0
    while True:
        count += 1
        if start + length >= n:
            return count
        start += length - overlap


@pytest.mark.parametrize("frames,window,overlap", [(161, 81, 30), (321, 81, 16), (201, 33, 8), (81, 81, 0),
                                                   (121, 17, 4)])
def test_context_split_counts_comfyui_windows(frames, window, overlap):
    split = E.context_split(frames, window, overlap, "standard_static", anchor=False)
    n, length = (frames - 1) // 4 + 1, (window - 1) // 4 + 1
    assert split["windows"] == _comfy_standard_static(n, length, max((overlap - 1) // 4 + 1, 0))


def test_js_context_split_equals_python(run_graph, tmp_path):
    cases = [[f, w, o, s, a] for f in (33, 81, 161, 321) for w, o in ((17, 4), (33, 8), (81, 30))
             for s in ("static", "standard_static", "batched", "standard_uniform") for a in (True, False)]
    script = tmp_path / "split.mjs"
    script.write_text(f"import {{ contextSplit }} from {json.dumps((WEB / 'wancore_estimate.js').as_uri())};\n"
                      "console.log(JSON.stringify(JSON.parse(process.argv[2]).map((c) => contextSplit(...c))));\n")
    res = subprocess.run([NODE, str(script), json.dumps(cases)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [E.context_split(*c) for c in cases]


def _header(dim, ffn, layers, dtype="BF16", prefix=""):
    t = {f"{prefix}blocks.{i}.ffn.0.weight": (dtype, (ffn, dim)) for i in range(layers)}
    t[f"{prefix}head.modulation"] = ("F32", (1, 2, dim))
    return t


def test_dit_summary_reads_size_and_dtype_from_shapes():
    assert E.dit_summary(_header(1536, 8960, 30, "F16")) == {"size": "1.3B", "dtype": "fp16", "layers": 30, "dim": 1536}
    assert E.dit_summary(_header(5120, 13824, 40, "F8_E4M3", "model.diffusion_model."))["size"] == "14B"
    assert E.dit_summary(_header(5120, 13824, 40, "F8_E4M3"))["dtype"] == "fp8"
    assert E.dit_summary(_header(3072, 14336, 30))["size"] == "5B"
    assert E.dit_summary(_header(64, 128, 2)) is None  # a test-size model: no released size
    assert E.dit_summary({"model.layers.0.weight": ("BF16", (4, 4))}) is None  # not a Wan DiT


# ---------------------------------------------------------------- the server route's answer (nodes/host.py)

def _write_header(path: Path, tensors: dict) -> None:
    """A safetensors file with ``tensors`` (name -> (dtype, shape)) whose data is a sparse hole."""
    nbytes = {"F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1}
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        size = nbytes[dtype] * math.prod(shape)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(len(blob).to_bytes(8, "little") + blob)
        f.truncate(8 + len(blob) + offset)


def test_dit_info_route_reads_listed_files_only(models_dir):
    from nodes import host

    folder = models_dir / "diffusion_models"
    folder.mkdir(exist_ok=True)
    _write_header(folder / "anything.safetensors", _header(5120, 13824, 40, "F8_E4M3", "model.diffusion_model."))
    assert host.dit_file_summary("anything.safetensors") == {"size": "14B", "dtype": "fp8", "layers": 40,
                                                               "dim": 5120}
    _write_header(folder / "tiny.safetensors", _header(64, 128, 2))
    assert host.dit_file_summary("tiny.safetensors") is None
    for name in (str(folder / "anything.safetensors"), "../diffusion_models/anything.safetensors", "missing.sft"):
        with pytest.raises(host.NotInList):  # never a path: the same refusal whether or not it exists
            host.dit_file_summary(name)
    assert host.register_routes() is False  # outside ComfyUI there is no server to add it to
