"""web/wancore_errors.js (issue 44): a WanCore validator's message marks only the inputs it names. ComfyUI gives
each input the validator takes one error with the same message; the hook on ``api.queuePrompt`` keeps the errors
whose input the message names. Run in Node.js against a stub of ComfyUI's ``api``, on node_errors built the way
ComfyUI 0.3.64's execution.py builds them from our real validators' messages."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from nodes import latent, models, wan22

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "web"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="Node.js is not installed (CI has it)")

API_STUB = """
export class PromptExecutionError extends Error { constructor(response) { super("failed"); this.response = response; } }
export const api = {
  answer: null,
  async queuePrompt(number, data) {
    const res = structuredClone(this.answer);
    if (res.error) throw new PromptExecutionError(res);
    return res;
  },
};
"""

HARNESS = """
import { api } from "./scripts/api.js";
const { focusNodeErrors, namedInputs } = await import("./extensions/wancore/wancore_errors.js");
await import("./extensions/wancore/wancore_errors.js?again");  // served twice: wrapped once
const answers = JSON.parse(process.argv[2]);
const out = { named: namedInputs(answers.message) };
api.answer = answers.refused;
try { await api.queuePrompt(0, {}); } catch (err) { out.refused = err.response.node_errors; }
api.answer = answers.accepted;
out.accepted = (await api.queuePrompt(0, {})).node_errors;
out.direct = focusNodeErrors(structuredClone(answers.refused.node_errors));
console.log(JSON.stringify(out));
"""


def comfy_node_errors(class_type: str, inputs: dict, message: str) -> dict:
    """ComfyUI 0.3.64 execution.py validate_inputs: one custom_validation_failed error per validator input."""
    errors = [{"type": "custom_validation_failed", "message": "Custom validation failed for node",
               "details": f"{name} - {message}", "extra_info": {"input_name": name}} for name in inputs]
    return {"errors": errors, "dependent_outputs": ["9"], "class_type": class_type}


@pytest.fixture
def run(tmp_path):
    ext = tmp_path / "extensions" / "wancore"
    ext.mkdir(parents=True)
    for p in WEB.iterdir():
        shutil.copy(p, ext / p.name)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "api.js").write_text(API_STUB)
    (tmp_path / "package.json").write_text('{"type": "module"}')
    harness = tmp_path / "harness.js"
    harness.write_text(HARNESS)

    def go(answers: dict) -> dict:
        res = subprocess.run([NODE, str(harness), json.dumps(answers)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    return go


def marked(node_errors: dict, node_id: str) -> list[str]:
    return [e["extra_info"]["input_name"] for e in node_errors[node_id]["errors"]]


def test_a_frames_message_marks_frames_only(run):
    size = {"width": 832, "height": 480, "frames": 80, "batch_size": 1}
    message = latent.validate_size(**size)
    assert isinstance(message, str) and message.startswith("frames=80:")
    two = wan22.validate_size(width=1264, height=704, frames=80, batch_size=1)  # width and frames wrong
    other = {"errors": [{"type": "value_not_in_list", "message": "Value not in list",
                         "details": "unet_name: 'x' not in []", "extra_info": {"input_name": "unet_name"}}],
             "dependent_outputs": [], "class_type": "UNETLoader"}
    foreign = comfy_node_errors("SomeOtherNode", {"a": 1, "b": 2}, "a=1: bad")  # not ours: untouched
    node_errors = {"5": comfy_node_errors("WanCoreEmptyLatent", size, message),
                   "6": comfy_node_errors("WanCoreEmptyLatent22", size, two), "1": other, "7": foreign}
    out = run({"message": two,
               "refused": {"error": {"type": "prompt_outputs_failed_validation"}, "node_errors": node_errors},
               "accepted": {"prompt_id": "x", "number": 1, "node_errors": node_errors}})
    assert out["named"] == ["width", "frames"]
    for result in (out["refused"], out["accepted"], out["direct"]):
        assert marked(result, "5") == ["frames"]
        assert marked(result, "6") == ["width", "frames"]
        assert result["5"]["errors"][0]["details"] == f"frames - {message}"  # the message itself is kept
        assert marked(result, "1") == ["unet_name"]
        assert marked(result, "7") == ["a", "b"]


def test_model_name_message_marks_model_name_only(run):
    message = models.validate_model("no_such_model.safetensors", blocks_to_swap=0, prefetch=1)
    assert isinstance(message, str) and message.startswith("model_name: ")
    named = comfy_node_errors("WanCoreModelLoader", {"model_name": 0, "blocks_to_swap": 0, "prefetch": 1}, message)
    plain = comfy_node_errors("WanCoreModelLoader", {"model_name": 0, "blocks_to_swap": 0},
                              "something went wrong: no input named")
    out = run({"message": message, "refused": {"error": "x", "node_errors": {"1": named, "2": plain}},
               "accepted": {"node_errors": {}}})
    assert out["named"] == ["model_name"]
    assert marked(out["refused"], "1") == ["model_name"]
    assert marked(out["refused"], "2") == ["model_name", "blocks_to_swap"]  # names none of its inputs: all kept
