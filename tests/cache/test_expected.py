"""The expected DiT evaluations the canvas shows: ``wan``'s equal what a run computes, the threshold methods'
floor equals what a huge threshold still computes, and the browser's copy (web/wancore_estimate.js) gives the
same numbers as wan_core.cache.expected_evaluations."""
from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from wan_core.cache import CacheConfig, attention_share, expected_evaluations

from .helpers import run, tiny_dit

WEB = Path(__file__).resolve().parents[2] / "web"
NODE = shutil.which("node")

SETTINGS = [
    {"method": m, "steps": s, "guidance": g, "model": model, "tokens": tok, "start": start, "end": end}
    for m in ("off", "exact", "wan", "teacache", "magcache", "easycache", "calibrate")
    for s, g, model, tok in ((30, 5.0, "1.3B", 32760), (50, 6.0, "14B", 75600), (25, 1.0, "1.3B", 0),
                             (7, 0.0, "14B", 1560))
    for start, end in ((None, None), (0.3, 0.9))
]


@pytest.mark.parametrize("steps,guidance,start,end", [(20, 5.0, None, None), (13, 5.0, 0.3, 0.9),
                                                      (12, 1.0, None, None)])
def test_wan_expectation_is_what_a_run_computes(steps, guidance, start, end):
    _, report = run(tiny_dit(), CacheConfig.preset("wan", start=start, end=end), steps=steps, guidance=guidance,
                    size=32, frames=5)
    want = expected_evaluations("wan", steps, guidance, start=start, end=end, tokens=32760)
    assert want["exact"] and (want["expected"], want["total"]) == (report.computed, report.total)
    assert want["attention_reused"] * 2 == report.attention_reused  # per pass; the tiny model has 2 blocks
    assert want["work"] == pytest.approx(report.work(attention_share(1536, 8960, 32760)))


def test_threshold_methods_expect_the_published_speed_up_above_their_floor():
    e = expected_evaluations("magcache", 50, 5.0, model="14B")
    assert not e["exact"] and e["expected"] == round(100 / 2.8) and e["minimum"] <= e["expected"]
    assert expected_evaluations("teacache", 50, 5.0)["minimum"] == 4
    assert expected_evaluations("easycache", 50, 5.0)["minimum"] == 2 * 11
    assert expected_evaluations("exact", 50, 1.0) == {"total": 50, "expected": 50, "minimum": 50, "exact": True,
                                                      "attention_reused": 0, "work": 1.0}


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed (CI has it)")
def test_js_expectation_equals_python(tmp_path):
    script = tmp_path / "expected_harness.mjs"
    script.write_text(
        f"import * as E from {json.dumps((WEB / 'wancore_estimate.js').as_uri())};\n"
        "const settings = JSON.parse(process.argv[2]);\n"
        "console.log(JSON.stringify(settings.map((s) => E.expectedEvaluations(s))));\n")
    res = subprocess.run([NODE, str(script), json.dumps(SETTINGS)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    for setting, got in zip(SETTINGS, json.loads(res.stdout), strict=True):
        want = expected_evaluations(**setting)
        assert set(got) == set(want), setting
        for k, v in want.items():
            ok = math.isclose(v, got[k], rel_tol=1e-12, abs_tol=1e-15) if isinstance(v, float) else v == got[k]
            assert ok, (setting, k, v, got[k])


CANVAS = """
import { app } from "./scripts/app.js";
await import("./extensions/wancore/wancore.js");
const ext = app.extensions.find((e) => e.name === "WanCore.estimate");
const types = {};
for (const name of ["WanCoreEmptyLatent", "WanCoreSampler", "WanCoreCache"]) {
  const proto = { setSize(s) { this.size = s; }, computeSize() { return [300, 180]; } };
  const nodeType = { prototype: proto };
  await ext.beforeRegisterNodeDef(nodeType, { name }, app);
  types[name] = nodeType;
}
const links = new Map(), nodes = new Map();
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
  const ctx = { save() {}, restore() {}, fillText(t) { texts.push(t); } };
  node.onDrawForeground(ctx);
  return texts;
}
const cfg = JSON.parse(process.argv[2]);
const latent = make(1, "WanCoreEmptyLatent", { width: 832, height: 480, frames: 81, batch_size: 1 }, [], ["latent"]);
const sampler = make(2, "WanCoreSampler", cfg.sampler, ["model", "embeds", "latent", "cache"], ["latent"]);
const plain = make(3, "WanCoreSampler", cfg.sampler, ["model", "embeds", "latent", "cache"], ["latent"]);
const cache = make(4, "WanCoreCache", cfg.cache, [], ["cache"]);
connect(1, latent, 0, sampler, "latent");
connect(2, latent, 0, plain, "latent");
connect(3, cache, 0, sampler, "cache");
console.log(JSON.stringify({ cached: draw(sampler), plain: draw(plain), latent: draw(latent),
                             heights: [sampler.size[1], plain.size[1]] }));
"""


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed (CI has it)")
@pytest.mark.parametrize("cache,line", [
    ({"method": "wan", "threshold": -1, "start": -1, "end": -1},
     "cache wan: 44/60 DiT evaluations · ≈ 58% DiT work"),
    ({"method": "magcache", "threshold": 0.3, "start": -1, "end": -1},
     "cache magcache: ≈ 21/60 DiT evaluations (published speed-up; ≥ 20) · ≈ 35% DiT work"),
])
def test_canvas_shows_the_connected_caches_expected_evaluations(web_stage, tmp_path, cache, line):
    web_stage()
    (tmp_path / "harness.js").write_text(CANVAS)
    settings = {"sampler": {"steps": 30, "guidance": 6.0}, "cache": cache}
    res = subprocess.run([NODE, str(tmp_path / "harness.js"), json.dumps(settings)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert line in out["cached"]
    e = expected_evaluations(cache["method"], 30, 6.0, tokens=32760)
    assert f"{e['expected']}/{e['total']} DiT evaluations" in line and f"{round(100 * e['work'])}% DiT work" in line
    assert not any("cache" in t for t in out["plain"] + out["latent"])  # only a sampler with a cache node
    assert out["heights"][0] == out["heights"][1] + 15  # the node grew by the one extra line
