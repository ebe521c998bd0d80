"""Registration on every ComfyUI API generation: V3 where its ``io`` accepts the nodes, V1 otherwise.

The same node ids, inputs and defaults must come out of the old V3 API (no ``advanced`` / ``search_aliases``,
ComfyUI 0.3.64), the current one, and the V1 fallback taken when the V3 API refuses the nodes; validators
must work when ComfyUI calls them through the V3 path. Fake APIs: ``fake_comfy_api.py``; the real ComfyUI
is used when ``comfy_api.latest`` is importable (or ``WANCORE_COMFYUI_DIR`` names a ComfyUI checkout).
"""
from __future__ import annotations

import asyncio
import importlib.util
import inspect
import logging
import os
import sys
import types
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GENERATIONS = ("old", "current", "refusing")
COSMETIC = {"tooltip", "advanced", "multiline", "control_after_generate", "display_name"}


def _load(name: str, path: Path, package_dir: Path | None = None):
    spec = importlib.util.spec_from_file_location(
        name, path, submodule_search_locations=[str(package_dir)] if package_dir else None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


fake = sys.modules.get("wancore_fake_comfy_api") or _load("wancore_fake_comfy_api", HERE / "fake_comfy_api.py")


@pytest.fixture(scope="module")
def nodes(pack):
    return sys.modules[pack.__name__ + ".nodes"]


def _entry(nodes, generation):
    return nodes.entry_points(fake.make_api(generation))


def _node_classes(entry: dict) -> dict[str, type]:
    """node id -> class, from whichever entry point the pack chose (V3 through ComfyUI's call order)."""
    if "comfy_entrypoint" in entry:
        assert "NODE_CLASS_MAPPINGS" not in entry  # else ComfyUI would take V1 and ignore the entry point
        extension = asyncio.run(entry["comfy_entrypoint"]())
        classes = asyncio.run(extension.get_node_list())
        return {cls.GET_SCHEMA().node_id: cls for cls in classes}
    return dict(entry["NODE_CLASS_MAPPINGS"])


def _normalized_v3(cls: type) -> dict:
    schema = cls.GET_SCHEMA()
    inputs = {}
    for i in schema.inputs:
        keys = ("default", "min", "max", "step", "options")
        inputs[i.id] = (i.io_type, "optional" if i.optional else "required",
                        {k: getattr(i, k) for k in keys if getattr(i, k, None) is not None})
    outputs = tuple((o.io_type, o.display_name) for o in schema.outputs)
    return {"display_name": schema.display_name, "category": schema.category, "inputs": inputs,
            "outputs": outputs, "output_node": bool(schema.is_output_node)}


def _normalized_v1_inputs(input_types: dict) -> dict:
    inputs = {}
    for section in ("required", "optional"):
        for name, (io_type, opts) in input_types.get(section, {}).items():
            opts = {k: v for k, v in opts.items() if k not in COSMETIC}
            if isinstance(io_type, list):  # V1 combo: the choices are the type
                io_type, opts = "COMBO", {**opts, "options": io_type}
            elif io_type == "COMBO":  # V3 combo seen through INPUT_TYPES
                opts = {k: v for k, v in opts.items() if k != "multiselect"}
            inputs[name] = (io_type, section, opts)
    return inputs


def _normalized_v1(cls: type, display_names: dict, node_id: str) -> dict:
    return {"display_name": display_names[node_id], "category": cls.CATEGORY,
            "inputs": _normalized_v1_inputs(cls.INPUT_TYPES()),
            "outputs": tuple(zip(cls.RETURN_TYPES, cls.RETURN_NAMES)), "output_node": bool(cls.OUTPUT_NODE)}


def _normalized(entry: dict) -> dict[str, dict]:
    classes = _node_classes(entry)
    if "comfy_entrypoint" in entry:
        return {nid: _normalized_v3(cls) for nid, cls in classes.items()}
    return {nid: _normalized_v1(cls, entry["NODE_DISPLAY_NAME_MAPPINGS"], nid) for nid, cls in classes.items()}


def _declared(nodes) -> dict[str, dict]:
    """What the declarations say, independent of any API."""
    out = {}
    for s in nodes.NODE_SPECS:
        inputs = {}
        for i in s.inputs:
            opts = {k: getattr(i, k) for k in ("default", "min", "max", "step") if getattr(i, k) is not None}
            if i.type == "COMBO":
                opts["options"] = i.choices()
            inputs[i.name] = (i.type, "optional" if i.optional else "required", opts)
        out[s.node_id] = {"display_name": s.display_name, "category": s.category, "inputs": inputs,
                          "outputs": tuple((o.type, o.name) for o in s.outputs), "output_node": s.output_node}
    return out


# ---------------------------------------------------------------- which path, and what comes out of it


@pytest.mark.parametrize("generation,path", [("old", "V3"), ("current", "V3"), ("refusing", "V1")])
def test_each_api_generation_registers_every_node_with_its_inputs_and_defaults(
        nodes, models_dir, generation, path):
    entry = _entry(nodes, generation)
    assert ("comfy_entrypoint" in entry) == (path == "V3")
    assert _normalized(entry) == _declared(nodes)


def test_old_api_leaves_out_only_the_keywords_it_lacks_and_says_so(nodes, models_dir, caplog):
    with caplog.at_level(logging.INFO, logger="WanCore"):
        old = _node_classes(_entry(nodes, "old"))
    current = _node_classes(_entry(nodes, "current"))
    lines = [r.getMessage() for r in caplog.records if r.name == "WanCore"]
    assert len(lines) == 1 and "advanced" in lines[0] and "search_aliases" in lines[0]

    decode_old = {i.id: i for i in old["WanCoreDecode"].GET_SCHEMA().inputs}
    decode_new = {i.id: i for i in current["WanCoreDecode"].GET_SCHEMA().inputs}
    assert decode_new["tile_size"].advanced is True and decode_new["tiling"].advanced is None
    assert not hasattr(decode_old["tile_size"], "advanced")
    assert decode_old["tile_size"].tooltip == decode_new["tile_size"].tooltip != ""  # other cosmetics stay
    rewrite_new = current["WanCorePromptRewrite"].GET_SCHEMA()
    assert "prompt enhance" in rewrite_new.search_aliases
    assert not hasattr(old["WanCorePromptRewrite"].GET_SCHEMA(), "search_aliases")


def test_current_api_logs_nothing(nodes, models_dir, caplog):
    with caplog.at_level(logging.INFO, logger="WanCore"):
        _node_classes(_entry(nodes, "current"))
    assert not [r for r in caplog.records if r.name == "WanCore"]


def test_refusing_api_falls_back_to_v1_with_one_line_saying_why(nodes, models_dir, caplog):
    with caplog.at_level(logging.INFO, logger="WanCore"):
        entry = _entry(nodes, "refusing")
    assert set(entry) == {"NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"}
    lines = [r for r in caplog.records if r.name == "WanCore"]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert "V1" in lines[0].getMessage() and "refuses every schema" in lines[0].getMessage()


def test_no_v3_api_registers_v1_silently(nodes, models_dir, caplog):
    with caplog.at_level(logging.INFO, logger="WanCore"):
        entry = nodes.entry_points(None)
    assert set(entry) == {"NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"}
    assert not [r for r in caplog.records if r.name == "WanCore"]


# ---------------------------------------------------------------- the pack's entry module, as ComfyUI imports it


@pytest.mark.parametrize("generation,attribute", [("current", "comfy_entrypoint"), ("old", "comfy_entrypoint"),
                                                  ("refusing", "NODE_CLASS_MAPPINGS")])
def test_entry_module_defines_exactly_one_registration(generation, attribute, models_dir, monkeypatch):
    api = fake.make_api(generation)
    comfy_api = types.ModuleType("comfy_api")
    latest = types.ModuleType("comfy_api.latest")
    latest.io, latest.ComfyExtension = api.io, api.ComfyExtension
    comfy_api.latest = latest
    monkeypatch.setitem(sys.modules, "comfy_api", comfy_api)
    monkeypatch.setitem(sys.modules, "comfy_api.latest", latest)
    name = f"custom_nodes_x_wancore_{generation}"
    try:
        module = _load(name, ROOT / "__init__.py", ROOT)
        other = "NODE_CLASS_MAPPINGS" if attribute == "comfy_entrypoint" else "comfy_entrypoint"
        assert hasattr(module, attribute) and not hasattr(module, other)
        assert attribute in module.__all__ and module.WEB_DIRECTORY == "./web"
        if attribute == "comfy_entrypoint":
            assert inspect.iscoroutinefunction(module.comfy_entrypoint)
            extension = asyncio.run(module.comfy_entrypoint())
            assert len(asyncio.run(extension.get_node_list())) == len(module._nodes.NODE_SPECS)
    finally:
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]


# ---------------------------------------------------------------- validators through the V3 path


def test_v3_validators_get_their_inputs_by_name_as_comfyui_passes_them(nodes, models_dir):
    classes = _node_classes(_entry(nodes, "current"))
    checked = 0
    for spec in nodes.NODE_SPECS:
        cls = classes[spec.node_id]
        fn = fake._real_override(cls, "validate_inputs")
        if spec.validate is None:
            assert fn is None
            continue
        params = list(inspect.signature(spec.validate).parameters)
        assert inspect.getfullargspec(fn).args == ["cls", *params], spec.node_id  # what ComfyUI reads
        checked += 1
    assert checked >= 4


def test_v3_validator_answers_as_the_declared_function(nodes, models_dir):
    latent = _node_classes(_entry(nodes, "current"))["WanCoreEmptyLatent"]
    good = {"width": 832, "height": 480, "frames": 81, "batch_size": 1}
    assert fake.comfyui_validate(latent, good) == []
    errors = fake.comfyui_validate(latent, {**good, "frames": 80})
    assert errors and all("nearest valid: 77 or 81" in e for e in errors)
    errors = fake.comfyui_validate(latent, {**good, "width": 830})
    assert errors and all("816 or 832" in e for e in errors)


def test_v3_validator_keeps_defaults_for_inputs_comfyui_does_not_send(nodes, models_dir):
    encode = _node_classes(_entry(nodes, "current"))["WanCoreTextEncode"]
    spec = encode.SPEC
    sent = {"positive": "a fox in the snow"}  # no negative: an optional input left unset
    expected = spec.validate(**sent)
    assert fake.comfyui_validate(encode, sent) == ([] if expected is True else [f"positive - {expected}"])
    assert fake.comfyui_validate(encode, {"positive": ""})  # an empty prompt is refused, through V3


def test_v3_validator_refuses_parameters_comfyui_cannot_pass(nodes):
    declare = sys.modules[nodes.__name__ + ".declare"]

    def keyword_only(*, width: int) -> bool:
        return True

    def named_cls(cls: int) -> bool:
        return True

    for fn in (keyword_only, named_cls):
        with pytest.raises(ValueError, match="cannot forward"):
            declare.v3_validator(fn)


def test_v3_execute_returns_the_node_outputs(nodes, models_dir):
    latent = _node_classes(_entry(nodes, "old"))["WanCoreEmptyLatent"]
    (out,) = fake.comfyui_execute(latent, {"width": 64, "height": 48, "frames": 5, "batch_size": 1})
    assert tuple(out["samples"].shape) == (1, 16, 2, 6, 8)


# ---------------------------------------------------------------- the real ComfyUI, when importable


def _real_api():
    comfy_dir = os.environ.get("WANCORE_COMFYUI_DIR")
    if comfy_dir and comfy_dir not in sys.path:
        sys.path.insert(0, comfy_dir)
    try:
        from comfy_api import latest
    except Exception as e:  # noqa: BLE001 - anything missing means no usable ComfyUI here
        pytest.skip(f"ComfyUI's comfy_api.latest is not importable ({type(e).__name__}: {e})")
    return latest


def test_real_comfyui_registers_v3_with_the_declared_inputs(nodes, models_dir):
    api = _real_api()
    entry = nodes.entry_points(api)
    assert "comfy_entrypoint" in entry
    classes = _node_classes(entry)
    v1_classes, _ = nodes.v1_mappings()
    assert set(classes) == set(v1_classes)
    for nid, cls in classes.items():
        assert _normalized_v1_inputs(cls.INPUT_TYPES()) == _normalized_v1_inputs(v1_classes[nid].INPUT_TYPES())
        assert tuple(cls.RETURN_TYPES) == v1_classes[nid].RETURN_TYPES


def test_real_comfyui_calls_validators_through_v3(nodes, models_dir):
    api = _real_api()
    from comfy_api.internal import first_real_override

    latent = _node_classes(nodes.entry_points(api))["WanCoreEmptyLatent"]
    fn = first_real_override(latent, "validate_inputs")
    args = inspect.getfullargspec(fn).args
    assert {"width", "height", "frames"} <= set(args)
    bad = {k: v for k, v in {"width": 832, "height": 480, "frames": 80, "batch_size": 1}.items() if k in args}
    assert "77 or 81" in fn(**bad)
    assert fn(**{**bad, "frames": 81}) is True


def test_node_names_and_categories_are_consistent(nodes):
    """Display names: "WanCore " then words with small connectives ("Image to Video", "Embeds to Conditioning");
    loaders only for nodes that read files: the Context Parallel and MoE nodes change a model (WanCore/model)."""
    import re

    for spec in nodes.NODE_SPECS:
        assert spec.display_name.startswith("WanCore "), spec.display_name
        assert not re.search(r" (To|Of|And|For) ", spec.display_name), spec.display_name
        reads_files = spec.node_id.endswith("Loader") or spec.node_id == "WanCoreLoRA"
        assert (spec.category == "WanCore/loaders") == reads_files, (spec.node_id, spec.category)
    categories = {s.node_id: s.category for s in nodes.NODE_SPECS}
    assert categories["WanCoreContextParallel"] == categories["WanCoreMoE"] == "WanCore/model"
