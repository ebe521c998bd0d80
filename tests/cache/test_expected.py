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
