"""WanCorePromptRewrite called directly (no ComfyUI): the LLM folder combo from models/LLM, the declaration, the
STRING output feeding WanCoreTextEncode, the loaded-LLM cache, interrupt through the host adapter, and the
validation message for a missing folder. The LLM is tests/text/tiny_llm's tiny random Qwen2."""
from __future__ import annotations

import importlib.util
import shutil
import types
from importlib import import_module
from pathlib import Path

import pytest

_TINY = Path(__file__).resolve().parents[1] / "text" / "tiny_llm.py"
FAST = dict(seed=0, max_new_tokens=6, device="cpu", temperature=0.0)


def _tiny_llm():
    spec = importlib.util.spec_from_file_location("wancore_tests_tiny_llm", _TINY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def llm_source(tmp_path_factory):
    return _tiny_llm().build_tiny_llm(tmp_path_factory.mktemp("llm_src") / "tiny-instruct")


@pytest.fixture
def mods(pack):
    return types.SimpleNamespace(host=import_module(pack.__name__ + ".nodes.host"),
                                 node=import_module(pack.__name__ + ".nodes.prompt_rewrite"))


@pytest.fixture
def llm_models(models_dir, llm_source, mods):
    """models/LLM with the tiny LLM (linked, and copied one level down) next to things that are not model
    folders."""
    llm = models_dir / "LLM"
    (llm / "org").mkdir(parents=True)
    (llm / "tiny-instruct").symlink_to(llm_source, target_is_directory=True)
    shutil.copytree(llm_source, llm / "org" / "tiny-2")
    (llm / "empty").mkdir()
    (llm / "stray.safetensors").write_bytes(b"")
    mods.node._LOADED.clear()
    yield models_dir
    mods.node._LOADED.clear()


def test_folder_combo_lists_model_folders_only(llm_models, mods, pack):
    assert mods.host.list_model_folders("LLM") == ["org/tiny-2", "tiny-instruct"]
    choices = pack.NODE_CLASS_MAPPINGS["WanCorePromptRewrite"].INPUT_TYPES()["required"]["llm_folder"][0]
    assert choices == ["org/tiny-2", "tiny-instruct"]


def test_declaration_matches_the_function_and_feeds_text_encode(pack):
    specs = {s.node_id: s for s in pack.nodes.NODE_SPECS}
    spec = specs["WanCorePromptRewrite"]
    assert spec.signature_mismatches() == []
    assert spec.category == "WanCore/conditioning"
    assert [o.type for o in spec.outputs] == ["STRING"]
    positive = next(i for i in specs["WanCoreTextEncode"].inputs if i.name == "positive")
    assert positive.type == spec.outputs[0].type  # a link from our output to the positive widget type-checks
    seed = next(i for i in spec.inputs if i.name == "seed")
    assert seed.control_after_generate and next(i for i in spec.inputs if i.name == "prompt").multiline


def test_node_returns_the_rewrite_and_keeps_the_llm_loaded(llm_models, mods, monkeypatch):
    loads = []
    real = mods.node.load_prompt_rewriter
    monkeypatch.setattr(mods.node, "load_prompt_rewriter", lambda *a, **k: loads.append(a) or real(*a, **k))
    out = mods.node.prompt_rewrite("tiny-instruct", "a cat on the moon", **FAST)
    assert isinstance(out, tuple) and len(out) == 1 and isinstance(out[0], str) and out[0].strip()
    again = mods.node.prompt_rewrite("tiny-instruct", "a fox in the snow", **{**FAST, "temperature": 0.9})
    assert isinstance(again[0], str) and len(loads) == 1
    (rewriter,) = mods.node._LOADED.values()
    assert rewriter.device.type == "cpu"  # rests on the offload device between runs
    calls = []
    monkeypatch.setattr(rewriter.model, "generate", lambda *a, **k: calls.append(1))
    assert mods.node.prompt_rewrite("tiny-instruct", "a cat on the moon", **FAST) == out  # cached: no generation
    assert calls == []
    mods.node.prompt_rewrite("org/tiny-2", "a cat on the moon", **FAST)  # another folder replaces the first
    assert len(loads) == 2 and len(mods.node._LOADED) == 1


def test_interrupt_stops_generation(llm_models, mods, monkeypatch):
    host = mods.host

    class InterruptingProgress(host.Progress):
        def update(self, value, preview=None, total=None):
            super().update(value, preview, total)
            if value == 2:  # the user presses cancel while the second token is out
                host.request_interrupt()

    monkeypatch.setattr(host, "Progress", InterruptingProgress)
    rewriter = mods.node._rewriter("tiny-instruct", "cpu")
    forwards = []
    handle = rewriter.model.register_forward_hook(lambda *a: forwards.append(1))
    try:
        with pytest.raises(host.Interrupted):
            mods.node.prompt_rewrite("tiny-instruct", "a cat on the moon", **{**FAST, "max_new_tokens": 50})
    finally:
        handle.remove()
        host.clear_interrupt()
    assert len(forwards) == 2  # prefill + one decode step of the 50 allowed
    assert rewriter.cached("a cat on the moon", **{k: v for k, v in FAST.items() if k != "device"}) is None


def test_bad_inputs_name_the_input(llm_models, mods):
    msg = mods.node.validate_llm_folder("Qwen2.5-3B-Instruct")
    assert msg.startswith("llm_folder: ") and "Qwen2.5-3B-Instruct" in msg and "tiny-instruct" in msg
    assert mods.node.validate_llm_folder("tiny-instruct") is True
    assert mods.node.validate_llm_folder("../LLM/tiny-instruct") is not True  # no climbing out of models/LLM
    with pytest.raises(ValueError, match="prompt"):
        mods.node.prompt_rewrite("tiny-instruct", "  ", **FAST)
    msg = mods.node.validate_llm_folder("empty")  # a folder without config.json is no model: not listed
    assert msg.startswith("llm_folder: ") and "not one of the available model folders" in msg
    assert "tiny-instruct" in msg
    with pytest.raises(ValueError, match="'empty' is not one of the available model folders in models/LLM"):
        mods.node.prompt_rewrite("empty", "a cat", **FAST)


def test_llm_folder_is_registered_with_comfyui(mods, monkeypatch, tmp_path):
    host = mods.host
    added = {}
    fake = types.SimpleNamespace(
        models_dir=str(tmp_path), folder_names_and_paths={"vae": ([str(tmp_path / "vae")], set())},
        add_model_folder_path=lambda name, path: added.setdefault(name, [path]),
        get_folder_paths=lambda name: added[name] if name in added else [str(tmp_path / name)])
    monkeypatch.setattr(host, "IN_COMFYUI", True)
    monkeypatch.setattr(host, "_folder_paths", fake)
    assert host.model_folder_roots("LLM") == [tmp_path / "LLM"]
    assert added == {"LLM": [str(tmp_path / "LLM")]}
    assert host.list_model_folders("LLM") == []
