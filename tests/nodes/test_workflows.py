"""Node declarations and the shipped workflows (docs/comfyui.md sections 6 and 8), without ComfyUI installed.

* every node's declared inputs/outputs match its function, and the V1 class built from it is well formed;
* ``workflows/*.json`` (UI) and ``workflows/api/*.json`` (API) equal ``workflows/build.py``'s output, use only
  our nodes and a listed set of core ComfyUI nodes, give every widget a valid value, connect matching types,
  and agree with each other;
* every API workflow runs end to end through our node functions with tiny random models written under the
  workflow's file names (core nodes replaced by recorders / equivalents in this test only);
* bad canvas inputs (frames 80, width 830, a VAE file as DiT, a missing file) give a message naming the input
  and a valid choice, never a traceback from inside torch.
"""
from __future__ import annotations

import importlib.util
import inspect
import json
import shutil
import sys
import traceback
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "workflows"
NAMES = ("t2v_basic", "t2v_fast", "t2v_long_tiled", "t2v_native_mix", "t2v_cached", "t2v_demo", "native_t2v_fast",
         "i2v_wan21", "flf2v_wan21")
NAMES += ("t2v_distill",)  # WanCoreLoRA + the distilled 4-step schedule (docs/lora.md section 5)
NAMES += ("t2v_multi_gpu",)  # WanCoreContextParallel: runs on a 2-process CPU pool here (docs/parallel.md)
NAMES += ("t2v_wan22_a14b", "ti2v_wan22_5b")  # Wan 2.2: WanCoreMoE, TI2V-5B first-frame latent (docs/wan22.md)
NAMES += ("i2v_wan22_a14b",)  # Wan 2.2 I2V-A14B: WanCoreMoE of two 36-channel experts, WanCoreImageToVideo, no CLIP
NAMES += ("t2v_long_windows",)  # WanCoreContextWindows on the demo model (docs/long_video.md)
NAMES += ("extend_video",)  # WanCoreExtendVideo + Join Latents on the demo model (docs/long_video.md section 3)
# Graphs on ComfyUI's native MODEL (UNETLoader, KSampler): run end to end by tests/nodes/test_native_comfy.py
NAMES += ("native_long_windows",)  # ComfyUI's WanContextWindowsManual + the native patches
NAMES += ("native_t2v_multi_gpu",)  # WanCoreNativeContextParallel (docs/parallel.md section 12)
NAMES += ("vace_reference", "vace_control", "vace_inpaint")  # WanCore VACE on a VACE DiT (docs/vace.md section 3)
NAMES += ("native_vace",)  # ComfyUI's WanVaceToVideo + TrimVideoLatent + the native patches
NATIVE_MODEL = ("native_t2v_fast", "native_long_windows", "native_t2v_multi_gpu", "native_vace")
# Core ComfyUI node ids the workflows may use (read from ComfyUI 0.33's nodes.py / comfy_extras).
CORE_NODE_IDS = {"VAELoader", "VAEDecode", "EmptyHunyuanLatentVideo", "CreateVideo", "SaveVideo", "UNETLoader",
                 "LoraLoaderModelOnly", "ModelSamplingSD3", "KSampler", "LoadImage",
                 "WanContextWindowsManual",
                 "LoadVideo", "GetVideoComponents", "WanVaceToVideo", "TrimVideoLatent"}  # VACE: ComfyUI 0.3.64  # the last one: ComfyUI >= 0.3.6x (comfy_extras/nodes_context_windows.py)
UI_ONLY = {"MarkdownNote", "Note"}
OUTPUT_NODES = {"SaveVideo"}
FOLDER_OF_INPUT = {"model_name": "diffusion_models", "vae_name": "vae", "text_encoder_name": "text_encoders",
                   "unet_name": "diffusion_models", "clip_name": "clip_vision"}


def _load_build():
    name = "wancore_workflows_build"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, WORKFLOWS / "build.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="module")
def build(pack):
    return _load_build()


@pytest.fixture(scope="module")
def specs(pack):
    return {s.node_id: s for s in pack.nodes.NODE_SPECS}


@pytest.fixture(scope="module")
def catalog(build, specs):
    return build.catalog(specs.values())


def load_ui(name: str) -> dict:
    return json.loads((WORKFLOWS / f"{name}.json").read_text(encoding="utf-8"))


def load_api(name: str) -> dict:
    return json.loads((WORKFLOWS / "api" / f"{name}.json").read_text(encoding="utf-8"))


def is_link(value) -> bool:
    return isinstance(value, list) and len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], int)


# ---------------------------------------------------------------- declarations


def test_every_node_declaration_matches_its_function(specs):
    assert specs, "no nodes declared"
    for node_id, spec in specs.items():
        assert node_id.startswith("WanCore"), node_id
        assert spec.signature_mismatches() == [], node_id
        if spec.validate is not None:
            declared = {i.name for i in spec.inputs}
            assert set(inspect.signature(spec.validate).parameters) <= declared, node_id


def test_v1_classes_are_well_formed(pack, specs):
    classes = pack.NODE_CLASS_MAPPINGS
    assert set(classes) == set(specs) and set(pack.NODE_DISPLAY_NAME_MAPPINGS) == set(specs)
    for node_id, cls in classes.items():
        spec = specs[node_id]
        types = cls.INPUT_TYPES()
        assert set(types) <= {"required", "optional"} and "required" in types
        for section, entries in types.items():
            for name, entry in entries.items():
                assert isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], dict), (node_id, name)
                decl = next(i for i in spec.inputs if i.name == name)
                assert (section == "optional") == decl.optional
                if decl.type == "COMBO":
                    assert isinstance(entry[0], list)
                    if decl.default is not None:
                        assert decl.default in entry[0], (node_id, name)
                else:
                    assert entry[0] == decl.type
                if decl.type in ("INT", "FLOAT") and decl.default is not None:
                    assert decl.min <= decl.default <= decl.max, (node_id, name)
        assert [n for sec in types.values() for n in sec] == (
            [i.name for i in spec.inputs if not i.optional] + [i.name for i in spec.inputs if i.optional])
        assert cls.RETURN_TYPES == tuple(o.type for o in spec.outputs)
        assert len(cls.RETURN_NAMES) == len(cls.RETURN_TYPES)
        assert callable(getattr(cls, cls.FUNCTION)) and cls.CATEGORY.startswith("WanCore")


# ---------------------------------------------------------------- the files


def test_committed_files_equal_the_generator(build, specs):
    expected = build.build(specs.values())
    assert sorted(expected) == sorted([f"{n}.json" for n in NAMES] + [f"api/{n}.json" for n in NAMES])
    on_disk = {p.relative_to(WORKFLOWS).as_posix() for p in WORKFLOWS.rglob("*.json")}
    assert on_disk == set(expected), "stray or missing workflow files"
    stale = [rel for rel, text in expected.items() if (WORKFLOWS / rel).read_text(encoding="utf-8") != text]
    assert not stale, f"run `python workflows/build.py`: {stale} differ from the node declarations"


def value_problems(node_type: str, inp, value, build) -> list[str]:
    """Why ``value`` is not valid for widget input ``inp`` (empty when it is)."""
    where = f"{node_type}.{inp.name}={value!r}"
    if inp.type == "INT":
        if isinstance(value, bool) or not isinstance(value, int):
            return [f"{where}: not an int"]
    elif inp.type == "FLOAT":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return [f"{where}: not a number"]
    elif inp.type == "STRING":
        return [] if isinstance(value, str) else [f"{where}: not a string"]
    elif inp.type == "BOOLEAN":
        return [] if isinstance(value, bool) else [f"{where}: not a boolean"]
    elif inp.type == "COMBO":
        if build.MODEL_FILE_INPUTS.get(node_type) == inp.name:  # model files: the documented repackaged names
            folder = FOLDER_OF_INPUT[inp.name]
            ok = build.REPACKAGED_FILES.get(value) == folder or (value == build.DEMO and node_type != "VAELoader")
            return [] if ok else [f"{where}: not a repackaged Wan 2.1 file for models/{folder}"]
        if (node_type, inp.name) == ("WanCoreLoRA", "lora_name"):  # the user's LoRA file in models/loras
            return [] if value == build.LORA_DISTILL else [f"{where}: not the LoRA file the workflows name"]
        return [] if value in inp.choices() else [f"{where}: not one of {inp.choices()}"]
    if inp.min is not None and value < inp.min or inp.max is not None and value > inp.max:
        return [f"{where}: outside [{inp.min}, {inp.max}]"]
    return []


@pytest.mark.parametrize("name", NAMES)
def test_api_workflow_is_valid(name, catalog, build):
    api = load_api(name)
    assert set(api) and all(k.isdigit() for k in api)
    problems = []
    for nid, node in api.items():
        ct = node["class_type"]
        assert ct in catalog, f"{name}: node {nid} {ct} is neither ours nor a listed core node"
        assert ct.startswith("WanCore") or ct in CORE_NODE_IDS
        decl = catalog[ct]
        declared = {i.name: i for i in decl.inputs}
        extra = {e for e, _ in getattr(decl, "api_extra", ())}
        assert set(node["inputs"]) <= set(declared) | extra, (nid, ct, set(node["inputs"]) - set(declared))
        for i in decl.inputs:
            if i.name not in node["inputs"]:
                assert i.optional, f"{name}: {ct} {nid} lacks required input {i.name}"
                continue
            value = node["inputs"][i.name]
            if i.is_widget:
                assert not is_link(value), (nid, i.name)
                problems += value_problems(ct, i, value, build)
            else:
                assert is_link(value), f"{name}: {ct}.{i.name} must be a link"
                src, slot = value
                assert src in api, f"{name}: {ct}.{i.name} links to missing node {src}"
                src_decl = catalog[api[src]["class_type"]]
                assert slot < len(src_decl.outputs)
                assert src_decl.outputs[slot].type == i.type, (name, ct, i.name, src_decl.outputs[slot].type)
    assert not problems, problems
    assert {n["class_type"] for n in api.values()} & OUTPUT_NODES, "a prompt needs an output node"


@pytest.mark.parametrize("name", NAMES)
def test_ui_workflow_is_valid(name, catalog, build):
    ui = load_ui(name)
    assert ui["version"] == 0.4
    for key in ("id", "revision", "last_node_id", "last_link_id", "nodes", "links", "groups", "config", "extra"):
        assert key in ui
    nodes = {n["id"]: n for n in ui["nodes"]}
    assert len(nodes) == len(ui["nodes"]) and ui["last_node_id"] == max(nodes)
    assert ui["last_link_id"] == max((link[0] for link in ui["links"]), default=0)
    assert sorted(n["order"] for n in ui["nodes"]) == list(range(len(nodes)))
    for link in ui["links"]:  # [id, from node, from slot, to node, to slot, type] (frontend's schema)
        assert len(link) == 6 and all(isinstance(v, int) for v in link[:5]) and isinstance(link[5], str)
    problems = []
    for n in ui["nodes"]:
        for key in ("id", "type", "pos", "size", "flags", "order", "mode", "inputs", "outputs", "properties",
                    "widgets_values"):
            assert key in n, (n["id"], key)
        for key in ("pos", "size"):
            assert len(n[key]) == 2 and all(isinstance(v, (int, float)) for v in n[key])
        if n["type"] in UI_ONLY:
            continue
        assert n["type"] in catalog and (n["type"].startswith("WanCore") or n["type"] in CORE_NODE_IDS)
        assert n["mode"] == 0 and n["properties"]["Node name for S&R"] == n["type"]
        decl = catalog[n["type"]]
        widgets = build.widget_inputs(decl)
        expected_len = len(widgets) + sum(1 for i in widgets if i.control_after_generate)
        assert len(n["widgets_values"]) == expected_len, (n["type"], n["widgets_values"])
        values = list(n["widgets_values"])
        for i in widgets:
            problems += value_problems(n["type"], i, values.pop(0), build)
            if i.control_after_generate:
                assert values.pop(0) in ("randomize", "fixed", "increment", "decrement")
        sockets = [i for i in decl.inputs if not i.is_widget]
        assert [(s["name"], s["type"]) for s in n["inputs"]] == [(i.name, i.type) for i in sockets]
        assert [(o["name"], o["type"]) for o in n["outputs"]] == [(o.name, o.type) for o in decl.outputs]
        file_input = build.MODEL_FILE_INPUTS.get(n["type"])
        if file_input:  # loaders carry the download hint for the file they name (none for the built-in demo)
            file_name = n["widgets_values"][[i.name for i in widgets].index(file_input)]
            if file_name == build.DEMO:
                assert "models" not in n["properties"]
                continue
            (hint,) = n["properties"]["models"]
            folder = build.REPACKAGED_FILES[file_name]
            repo = "Wan_2.2_ComfyUI_Repackaged" if file_name.startswith("wan2.2_") else "Wan_2.1_ComfyUI_repackaged"
            assert hint == {"name": file_name, "directory": folder, "url":
                            f"https://huggingface.co/Comfy-Org/{repo}/resolve/main/split_files/"
                            f"{folder}/{file_name}?download=true"}
    assert not problems, problems
    for link_id, src, src_slot, dst, dst_slot, link_type in ui["links"]:
        out, inp = nodes[src]["outputs"][src_slot], nodes[dst]["inputs"][dst_slot]
        assert out["type"] == inp["type"] == link_type, (link_id, out["type"], inp["type"], link_type)
        assert link_id in out["links"] and inp["link"] == link_id
    linked = {link[0] for link in ui["links"]}
    for n in ui["nodes"]:
        assert all(i["link"] in linked for i in n["inputs"] if i["link"] is not None)
        assert all(lid in linked for o in n["outputs"] for lid in o["links"])


@pytest.mark.parametrize("name", NAMES)
def test_ui_and_api_files_agree(name, catalog, build):
    ui, api = load_ui(name), load_api(name)
    runnable = [n for n in ui["nodes"] if n["type"] not in UI_ONLY and n["mode"] == 0]
    assert sorted((str(n["id"]) for n in runnable), key=int) == sorted(api, key=int)
    links = {link[0]: link for link in ui["links"]}
    for n in runnable:
        entry = api[str(n["id"])]
        assert entry["class_type"] == n["type"]
        decl = catalog[n["type"]]
        values = list(n["widgets_values"])
        widget_values = {}
        for i in build.widget_inputs(decl):
            widget_values[i.name] = values.pop(0)
            if i.control_after_generate:
                values.pop(0)  # stored in the UI only (docs/comfyui.md section 8)
        api_widgets = {k: v for k, v in entry["inputs"].items() if not is_link(v)}
        for extra, source in getattr(decl, "api_extra", ()):
            assert api_widgets.pop(extra) == widget_values[source]
        assert api_widgets == widget_values
        api_links = {k: v for k, v in entry["inputs"].items() if is_link(v)}
        ui_links = {}
        for s in n["inputs"]:
            if s["link"] is not None:
                _, src, slot, *_ = links[s["link"]]
                ui_links[s["name"]] = [str(src), slot]
        assert api_links == ui_links


def test_fast_workflow_uses_declared_loader_options(build, specs):
    loader = {i.name: i for i in specs["WanCoreModelLoader"].inputs}
    assert set(build.FAST_MODEL_VALUES) <= set(loader)
    for key, value in build.FAST_MODEL_VALUES.items():
        assert value in loader[key].choices(), (key, value)


# ---------------------------------------------------------------- end to end with tiny models


def _write_tiny_models(root: Path, names: dict[str, set[str]]) -> None:
    """Tiny random DiT / VAE / umT5 (with its tokenizer embedded as ``spiece_model``) under ``names``."""
    from safetensors.torch import save_file

    from wan_core.config import DIT_PRESETS, TEXT_ENCODER_PRESETS
    from wan_core.demo import randomize_, tiny_tokenizer_bytes
    from wan_core.dit.model import WanDiT
    from wan_core.text.encoder import build_umt5
    from wan_core.vae.config import PRESETS as VAE_PRESETS
    from wan_core.vae.model import WanVAEModel

    te_cfg = TEXT_ENCODER_PRESETS["tiny"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        # 6 blocks, so schedules that keep the first and last two dense (skiparse osp13) still sparsify two
        dit = WanDiT(DIT_PRESETS["tiny"].replace(text_dim=te_cfg.d_model, num_layers=6))
        vae = WanVAEModel(VAE_PRESETS["tiny"])
        randomize_(vae)
        umt5 = build_umt5(te_cfg, device="cpu")
        with torch.no_grad():
            for p in umt5.parameters():
                p.normal_(0, 0.5)
    dit_sd = {k: v.to(torch.float16).contiguous() for k, v in dit.state_dict().items()}  # as the fp16 files
    vae_sd = {k: v.contiguous() for k, v in vae.state_dict().items()}
    te_sd = {k: v.contiguous() for k, v in umt5.state_dict().items() if k != "encoder.embed_tokens.weight"}
    te_sd["spiece_model"] = torch.frombuffer(bytearray(tiny_tokenizer_bytes()), dtype=torch.uint8)
    for folder, sd in (("diffusion_models", dit_sd), ("vae", vae_sd), ("text_encoders", te_sd)):
        (root / folder).mkdir(parents=True, exist_ok=True)
        for file_name in names.get(folder, ()):
            save_file(sd, str(root / folder / file_name))
    _write_tiny_image_models(root, names)
    _write_tiny_wan22_models(root, names)
    _write_tiny_vace_models(root, names)


def _write_tiny_vace_models(root: Path, names: dict[str, set[str]]) -> None:
    """vace_*: a tiny VACE DiT (a VACE block on every 2nd of 4 blocks, random before/after_proj) over the
    stand-ins of the VACE file names."""
    from safetensors.torch import save_file

    from wan_core.config import DIT_PRESETS, TEXT_ENCODER_PRESETS
    from wan_core.demo import randomize_
    from wan_core.dit.model import WanDiT

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(4)
        dit = WanDiT(DIT_PRESETS["tiny"].replace(text_dim=TEXT_ENCODER_PRESETS["tiny"].d_model, num_layers=4,
                                                 vace_layers=(0, 2), vace_in_dim=96))
        randomize_(dit)
    for file_name in names.get("diffusion_models", ()):
        if "vace" in file_name:
            save_file({k: v.to(torch.float16).contiguous() for k, v in dit.state_dict().items()},
                      str(root / "diffusion_models" / file_name))


def _write_tiny_wan22_models(root: Path, names: dict[str, set[str]]) -> None:
    """ti2v_wan22_5b: a tiny 48-channel DiT and a tiny Wan 2.2 VAE over the stand-ins of the same names."""
    from safetensors.torch import save_file

    from wan_core.config import DIT_PRESETS, TEXT_ENCODER_PRESETS
    from wan_core.demo import random_vae_model
    from wan_core.dit.model import WanDiT
    from wan_core.vae import TINY_VAE22

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(2)
        dit = WanDiT(DIT_PRESETS["tiny"].replace(text_dim=TEXT_ENCODER_PRESETS["tiny"].d_model, in_dim=48, out_dim=48))
        vae = random_vae_model(TINY_VAE22, 2)
    for folder, marker, module in (("diffusion_models", "ti2v", dit), ("vae", "wan2.2_vae", vae)):
        for file_name in names.get(folder, ()):
            if marker in file_name:
                save_file({k: v.contiguous() for k, v in module.state_dict().items()}, str(root / folder / file_name))


def _write_tiny_image_models(root: Path, names: dict[str, set[str]]) -> None:
    """i2v_wan21 / flf2v_wan21: tiny I2V / FLF2V DiTs (36 input channels, img_emb) over the T2V stand-ins of the
    same names (i2v_wan22_a14b's wan2.2_i2v experts without img_emb), and a tiny CLIP vision file in ComfyUI's
    layout (5 tokens of width 24 from a 28 px image)."""
    from safetensors.torch import save_file
    from transformers import CLIPVisionConfig, CLIPVisionModel

    from wan_core.config import DIT_PRESETS, TEXT_ENCODER_PRESETS
    from wan_core.dit.model import WanDiT

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        clip = CLIPVisionModel(CLIPVisionConfig(hidden_size=24, intermediate_size=48, num_hidden_layers=2,
                                                num_attention_heads=2, image_size=28, patch_size=14))
        for file_name in names.get("clip_vision", ()):
            (root / "clip_vision").mkdir(parents=True, exist_ok=True)
            sd = {(k if k.startswith("vision_model.") else f"vision_model.{k}"): v.contiguous()
                  for k, v in clip.state_dict().items() if not k.endswith("position_ids")}
            save_file(sd, str(root / "clip_vision" / file_name))
        for file_name in names.get("diffusion_models", ()):
            if "i2v" in file_name or "flf2v" in file_name:
                cfg = DIT_PRESETS["tiny"].replace(text_dim=TEXT_ENCODER_PRESETS["tiny"].d_model, in_dim=36,
                                                  image_dim=0 if file_name.startswith("wan2.2_i2v") else 24,
                                                  image_pos_len=10 if "flf2v" in file_name else 0)
                dit = WanDiT(cfg)
                save_file({k: v.to(torch.float16).contiguous() for k, v in dit.state_dict().items()},
                          str(root / "diffusion_models" / file_name))


def _write_tiny_loras(root: Path) -> None:
    """A random LoRA (kohya layout) for the tiny DiT under the name WanCoreLoRA nodes use (t2v_distill)."""
    from safetensors.torch import save_file

    from wan_core.config import DIT_PRESETS, TEXT_ENCODER_PRESETS

    from ..lora.helpers import kohya_file, random_lora

    cfg = DIT_PRESETS["tiny"].replace(text_dim=TEXT_ENCODER_PRESETS["tiny"].d_model, num_layers=6)
    (root / "loras").mkdir(parents=True, exist_ok=True)
    names = {n["inputs"]["lora_name"] for name in NAMES for n in load_api(name).values()
             if n["class_type"] == "WanCoreLoRA"}
    for file_name in names:
        save_file(kohya_file(random_lora(cfg, seed=3)), str(root / "loras" / file_name))


@pytest.fixture(scope="module")
def tiny_models_dir(tmp_path_factory, build, pack):
    names: dict[str, set[str]] = {}
    for name in NAMES:
        for node in load_api(name).values():
            for key, value in node["inputs"].items():
                if build.MODEL_FILE_INPUTS.get(node["class_type"]) == key and value != build.DEMO:
                    names.setdefault(FOLDER_OF_INPUT[key], set()).add(value)
    root = tmp_path_factory.mktemp("models")
    _write_tiny_models(root, names)
    _write_tiny_loras(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANCORE_MODELS_DIR", str(root))
        mp.setenv("WANCORE_QUIET", "1")
        mp.setenv("WANCORE_CPU_PROCESSES", "2")  # t2v_multi_gpu runs on a 2-process CPU pool (allowed for tests)
        yield root


# Canvas-size values replaced by tiny ones for the CPU run (frames stay 4n+1, sizes multiples of 16).
TINY = {
    "WanCoreEmptyLatent": {"width": 64, "height": 48, "frames": 5},
    "EmptyHunyuanLatentVideo": {"width": 64, "height": 48, "length": 5},
    "WanCoreSampler": {"steps": 2},
    "WanCoreImageToVideo": {"width": 64, "height": 48, "frames": 5},
    "WanCoreImageToVideoLatent22": {"width": 64, "height": 32, "frames": 5},  # multiples of 32 (Wan 2.2 VAE)
    "WanCoreExtendVideo": {"frames": 9},  # extend_video: 2 latent frames continued by 3 (anchor + 1 + 1 new)
    "WanCoreVace": {"width": 64, "height": 48, "length": 5},
}
TINY_LONG = {"width": 96, "height": 48, "frames": 9}  # t2v_long_tiled: wide enough for two tiles
TINY_TILE = {"tile_size": 64, "overlap": 16}  # the smallest declared tile: 2 x 1 tiles on a 96x48 frame
TINY_WINDOWS = {"frames": 33}  # t2v_long_windows: longer than its 17-frame window, so three windows run


def _stand_ins(pack, records: dict):
    """ComfyUI core nodes, replaced in this test only: recorders for CreateVideo/SaveVideo, equivalents
    (through our VAE) for VAELoader/VAEDecode, ComfyUI's zeros for EmptyHunyuanLatentVideo."""
    from importlib import import_module

    vae_nodes = import_module(pack.__name__ + ".nodes.vae")
    models = import_module(pack.__name__ + ".nodes.models")

    def create_video(images, fps, audio=None):
        records["create_video"] = {"images": images, "fps": fps}
        return ({"images": images, "fps": fps},)

    def save_video(video, filename_prefix, format="auto", codec="auto", **dynamic):
        records["save_video"] = {"video": video, "filename_prefix": filename_prefix, "format": format,
                                 "codec": codec, **dynamic}
        return ()

    def vae_loader(vae_name):
        records["native_vae"] = vae_name
        return models.load_vae(vae_name)

    def vae_decode(samples, vae):
        records["native_decode"] = tuple(samples["samples"].shape)
        return vae_nodes.decode(vae, samples)

    def empty_hunyuan(width, height, length, batch_size=1):
        records["native_latent"] = (width, height, length)
        z = torch.zeros([batch_size, 16, (length - 1) // 4 + 1, height // 8, width // 8])
        return ({"samples": z, "downscale_ratio_spacial": 8},)

    def load_image(image):  # ComfyUI's LoadImage: IMAGE [1, H, W, 3] in [0, 1] and its MASK
        records.setdefault("images", []).append(image)
        picture = torch.rand(1, 40, 56, 3, generator=torch.Generator().manual_seed(len(records["images"])))
        return (picture, (torch.rand(1, 40, 56, generator=torch.Generator().manual_seed(9)) > 0.5).float())

    def load_video(file):  # the tiny example input: 7 frames of 56x40 (fitted by WanCore VACE to 5 of 64x48)
        records["video_file"] = file
        return (torch.rand(7, 40, 56, 3, generator=torch.Generator().manual_seed(7)),)

    def get_video_components(video):
        return (video, None, 16.0)

    return {"LoadImage": load_image, "LoadVideo": load_video, "GetVideoComponents": get_video_components, "CreateVideo": create_video, "SaveVideo": save_video, "VAELoader": vae_loader,
            "VAEDecode": vae_decode, "EmptyHunyuanLatentVideo": empty_hunyuan}


def run_api_workflow(api: dict, pack, stand_ins: dict) -> dict:
    """Execute an API prompt in dependency order: our nodes through their V1 classes (as ComfyUI calls
    them, declared inputs only), core nodes through ``stand_ins``. Returns node id -> outputs."""
    order: list[str] = []

    def visit(nid: str, stack=()):
        if nid in order:
            return
        assert nid not in stack, "cycle"
        for v in api[nid]["inputs"].values():
            if is_link(v):
                visit(v[0], stack + (nid,))
        order.append(nid)

    for nid in sorted(api, key=int):
        visit(nid)
    results: dict[str, tuple] = {}
    for nid in order:
        node = api[nid]
        kwargs = {k: (results[v[0]][v[1]] if is_link(v) else v) for k, v in node["inputs"].items()}
        cls = pack.NODE_CLASS_MAPPINGS.get(node["class_type"])
        if cls is not None:
            declared = {n for sec in cls.INPUT_TYPES().values() for n in sec}
            results[nid] = getattr(cls(), cls.FUNCTION)(**{k: v for k, v in kwargs.items() if k in declared})
        else:
            results[nid] = stand_ins[node["class_type"]](**kwargs)
    return results


@pytest.mark.parametrize("name", NAMES)
def test_api_workflow_runs_end_to_end(name, pack, catalog, build, tiny_models_dir):
    if name in NATIVE_MODEL:
        pytest.skip("samples with ComfyUI's native model nodes: tests/nodes/test_native_comfy.py runs it")
    api = load_api(name)
    for node in api.values():
        node["inputs"].update(TINY.get(node["class_type"], {}))
        if node["class_type"] == "WanCoreEmptyLatent" and name == "t2v_long_tiled":
            node["inputs"].update(TINY_LONG)
        if node["class_type"] == "WanCoreEmptyLatent" and name == "t2v_long_windows":
            node["inputs"].update(TINY_WINDOWS)
        if node["class_type"] == "WanCoreDecode" and node["inputs"]["tiling"] == "on":
            node["inputs"].update(TINY_TILE)
        decl = catalog[node["class_type"]]  # the tiny values are valid canvas values too
        for i in decl.inputs:
            if i.is_widget and i.name in node["inputs"]:
                assert not value_problems(node["class_type"], i, node["inputs"][i.name], build)
    frames, height, width = {"t2v_long_tiled": (9, 48, 96), "ti2v_wan22_5b": (5, 32, 64),
                             "t2v_long_windows": (33, 48, 64), "extend_video": (9, 48, 64)}.get(name, (5, 48, 64))
    records: dict = {}
    try:
        run_api_workflow(api, pack, _stand_ins(pack, records))
    finally:
        from wan_core.parallel import shutdown_pools

        shutdown_pools()  # t2v_multi_gpu started a worker pool: its process group must not outlive the test
    saved = records["save_video"]["video"]
    assert saved["fps"] == {"t2v_demo": 8.0, "t2v_long_windows": 8.0, "extend_video": 8.0,
                            "ti2v_wan22_5b": 24.0}.get(name, 16.0)
    images = saved["images"]
    assert images.shape == (frames, height, width, 3) and images.dtype == torch.float32
    assert torch.isfinite(images).all() and 0.0 <= images.min() and images.max() <= 1.0
    if name == "t2v_native_mix":  # the native nodes got our latents and we got theirs
        assert records["native_latent"] == (64, 48, 5)
        assert records["native_decode"] == (1, 16, 2, 6, 8)


# ---------------------------------------------------------------- bad canvas inputs


def _raised_outside_torch(err: BaseException) -> bool:
    innermost = traceback.extract_tb(err.__traceback__)[-1]
    return "/torch/" not in innermost.filename.replace("\\", "/")


@pytest.mark.parametrize("values, input_name, choice", [
    ({"width": 832, "height": 480, "frames": 80}, "frames", "77 or 81"),
    ({"width": 830, "height": 480, "frames": 81}, "width", "816 or 832"),
])
def test_bad_size_is_a_validation_message(pack, specs, values, input_name, choice):
    spec = specs["WanCoreEmptyLatent"]
    message = spec.validate(**values)
    assert isinstance(message, str) and message.startswith(f"{input_name}=") and choice in message
    cls = pack.NODE_CLASS_MAPPINGS["WanCoreEmptyLatent"]  # what V1 ComfyUI calls before queueing
    assert cls.VALIDATE_INPUTS(**values) == message
    assert spec.validate(width=832, height=480, frames=81) is True


def _loader_message(spec, **inputs) -> str:
    """The message a loader gives for bad inputs: its pre-queue validation, else the error it raises."""
    if spec.validate is not None:
        wanted = inspect.signature(spec.validate).parameters
        result = spec.validate(**{k: v for k, v in inputs.items() if k in wanted})
        if result is not True:
            assert isinstance(result, str)
            return result
    with pytest.raises(Exception) as info:
        spec.run(**inputs)
    assert isinstance(info.value, (ValueError, FileNotFoundError)), type(info.value)
    assert _raised_outside_torch(info.value)
    return str(info.value)


def test_vae_file_chosen_as_dit_names_the_input_and_a_valid_choice(specs, tiny_models_dir):
    wrong = tiny_models_dir / "diffusion_models" / "wan_2.1_vae.safetensors"
    shutil.copy(tiny_models_dir / "vae" / "wan_2.1_vae.safetensors", wrong)
    try:
        message = _loader_message(specs["WanCoreModelLoader"], model_name=wrong.name)
    finally:
        wrong.unlink()
    assert "model_name" in message, message
    assert "VAE" in message and "wan2.1_t2v_1.3B_fp16.safetensors" in message, message
    assert "Traceback" not in message


def test_missing_model_file_names_the_input_and_the_files_there(specs, tiny_models_dir):
    message = _loader_message(specs["WanCoreModelLoader"], model_name="wan2.1_t2v_14B_fp16.safetensors")
    assert "model_name" in message and "wan2.1_t2v_14B_fp16.safetensors" in message, message
    assert "wan2.1_t2v_1.3B_fp16.safetensors" in message, message  # what is there to choose instead
    message = _loader_message(specs["WanCoreVAELoader"], vae_name="missing_vae.safetensors")
    assert "vae_name" in message and "wan_2.1_vae.safetensors" in message, message


def test_demo_workflow_names_the_registered_built_in(build, pack):
    """The demo graph's loader value is the name the pack registers (nodes.models.DEMO_NAME)."""
    import sys

    models = sys.modules[pack.__name__ + ".nodes.models"]
    assert build.DEMO == models.DEMO_NAME
