"""The server opens only what its folder lists offer (issue 10, "Security").

A client of a shared ComfyUI server sends any string for a loader input. Every loader input (DiT, VAE, text
encoder, its tokenizer folder, the LLM folder) must accept only the names its folder lists (plus the pack's
built-in entries), answer everything else with one "not one of the available ..." message that is the same
whether or not the path exists, refuse it again at execution (validation can be skipped by API clients),
and never show the server's absolute paths in messages.
"""
from __future__ import annotations

import shutil
import types
from importlib import import_module
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from wan_core.demo import tiny_tokenizer_bytes

DIT = "wan2.1_t2v_tiny.safetensors"


@pytest.fixture(scope="module")
def dit_file(tmp_path_factory) -> Path:
    from wan_core.config import DIT_PRESETS
    from wan_core.dit.model import WanDiT

    path = tmp_path_factory.mktemp("dit") / DIT
    sd = WanDiT(DIT_PRESETS["tiny"]).state_dict()
    save_file({k: v.to(torch.float16).contiguous() for k, v in sd.items()}, str(path))
    return path


@pytest.fixture
def mods(pack):
    """The pack's modules, with the built-in entries (the demo model) set aside: these tests count list entries."""
    host = import_module(pack.__name__ + ".nodes.host")
    saved = {folder: dict(entries) for folder, entries in host._BUILTINS.items()}
    host._BUILTINS.clear()
    yield _modules(pack)
    host._BUILTINS.clear()
    host._BUILTINS.update(saved)


def _modules(pack):
    return types.SimpleNamespace(host=import_module(pack.__name__ + ".nodes.host"),
                                 models=import_module(pack.__name__ + ".nodes.models"),
                                 rewrite=import_module(pack.__name__ + ".nodes.prompt_rewrite"),
                                 specs={s.node_id: s for s in pack.nodes.NODE_SPECS})


@pytest.fixture
def server(models_dir, dit_file, tmp_path_factory):
    """A models folder with one DiT, and files outside it that a client might name."""
    shutil.copy(dit_file, models_dir / "diffusion_models" / DIT)
    outside = tmp_path_factory.mktemp("outside")
    shutil.copy(dit_file, outside / "secret.safetensors")  # a loadable model outside the models folder
    (outside / "passwd").write_text("root:x:0:0")
    (outside / "tok").mkdir()
    (outside / "tok" / "spiece.model").write_bytes(tiny_tokenizer_bytes())
    return types.SimpleNamespace(models=models_dir, outside=outside)


def _same_answer(validate, existing: str, missing: str) -> str:
    """The validation messages for an existing and a missing path, which must not differ but for the name."""
    a, b = validate(existing), validate(missing)
    assert isinstance(a, str) and isinstance(b, str), (a, b)
    assert a.replace(repr(existing), "<name>") == b.replace(repr(missing), "<name>"), (a, b)
    return a


def _bad_names(server) -> list[tuple[str, str]]:
    """(existing, missing) pairs of names that are not list entries: absolute paths and ``../`` climbs."""
    o = server.outside
    up = "../" * (len(server.models.parts) + 1)  # from models/<folder> up to / (extra ../ stop at the root)
    pairs = [(str(o / "secret.safetensors"), str(o / "nothing.safetensors")),
             (str(o / "passwd"), str(o / "no_passwd")),
             (f"{up}{o.relative_to('/').as_posix()}/secret.safetensors",
              f"{up}{o.relative_to('/').as_posix()}/nothing.safetensors")]
    for existing, _ in pairs:  # each would have been found by joining it to the folder
        assert (server.models / "vae" / existing).exists(), existing
    return pairs


@pytest.mark.parametrize("input_name", ["model_name", "vae_name", "text_encoder_name"])
def test_loader_inputs_accept_only_listed_names(server, mods, input_name):
    node, folder = {"model_name": ("WanCoreModelLoader", "diffusion_models"),
                    "vae_name": ("WanCoreVAELoader", "vae"),
                    "text_encoder_name": ("WanCoreTextEncoderLoader", "text_encoders")}[input_name]
    spec = mods.specs[node]
    for existing, missing in _bad_names(server):
        message = _same_answer(lambda n: spec.validate(**{input_name: n}), existing, missing)
        assert message.startswith(f"{input_name}: ") and f"not one of the available files in models/{folder}" \
            in message, message
        assert str(server.models) not in message
        if folder == "diffusion_models":
            assert message.endswith(DIT), message  # the choices, as the combo shows them
        for name in (existing, missing):  # execution refuses them too, before opening anything
            with pytest.raises(mods.host.NotInList) as info:
                spec.run(**{input_name: name})
            assert f"not one of the available files in models/{folder}" in str(info.value)
    assert mods.specs["WanCoreModelLoader"].validate(model_name=DIT) is True


def test_the_fallback_models_dir_does_not_follow_dot_dot(server, mods):
    """Outside ComfyUI the old resolver joined the name to WANCORE_MODELS_DIR/<folder> and took any hit."""
    (server.models / "vae" / "sub").mkdir()
    name = "sub/../../diffusion_models/" + DIT  # exists on disk, but is not how the list names it
    assert (server.models / "vae" / name).exists()
    with pytest.raises(mods.host.NotInList):
        mods.host.model_path("vae", name)
    with pytest.raises(mods.host.NotInList):
        mods.host.model_path("diffusion_models", "./" + DIT)
    assert mods.host.model_path("diffusion_models", DIT) == server.models / "diffusion_models" / DIT


def test_non_string_values_are_refused_too(server, mods):
    for value in (None, 3, ["x"], {"a": 1}):
        assert "not one of the available files" in mods.models.validate_model(value)
        with pytest.raises(mods.host.NotInList):
            mods.host.model_path("diffusion_models", value)


def test_inside_comfyui_only_the_folder_list_counts(server, mods, monkeypatch):
    """ComfyUI mode (fake ``folder_paths``): an existing absolute path was accepted by a fallback."""
    host = mods.host
    root = server.models / "diffusion_models"
    fake = types.SimpleNamespace(
        models_dir=str(server.models), folder_names_and_paths={"diffusion_models": ([str(root)], set())},
        get_filename_list=lambda folder: [DIT] if folder == "diffusion_models" else [],
        get_full_path=lambda folder, name: str(root / name) if (root / name).is_file() else None,
        get_folder_paths=lambda folder: [str(server.models / folder)],
        add_model_folder_path=lambda name, path: None)
    monkeypatch.setattr(host, "IN_COMFYUI", True)
    monkeypatch.setattr(host, "_folder_paths", fake)
    assert host.model_path("diffusion_models", DIT) == root / DIT
    secret = str(server.outside / "secret.safetensors")
    message = _same_answer(mods.models.validate_model, secret, str(server.outside / "nothing.safetensors"))
    assert f"not one of the available files in models/diffusion_models: {DIT}" in message
    with pytest.raises(host.NotInList):
        host.model_path("diffusion_models", secret)


def test_builtin_entries_are_listed_first_and_resolve(server, mods, dit_file):
    host = mods.host
    name = "wancore-demo (built-in)"
    host.register_builtin("diffusion_models", name, dit_file)
    try:
        assert host.list_models("diffusion_models") == [name, DIT]
        assert host.model_path("diffusion_models", name) == dit_file
        assert mods.models.validate_model(name) is True
        choices = mods.specs["WanCoreModelLoader"].inputs[0].choices()
        assert choices[0] == name
        assert name not in host.list_models("vae")  # registered for its folder only
    finally:
        host.unregister_builtin("diffusion_models", name)
    assert host.list_models("diffusion_models") == [DIT]


def _tokenizer_folder(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "spiece.model").write_bytes(tiny_tokenizer_bytes())
    return root


def test_tokenizer_input_takes_only_listed_tokenizer_folders(server, mods):
    models = mods.models
    _tokenizer_folder(server.models / "text_encoders" / "google" / "umt5-xxl")
    (server.models / "text_encoders" / "umt5.safetensors").write_bytes(b"")
    assert mods.host.list_model_folders("text_encoders", markers=("tokenizer.json", "spiece.model")) == [
        "google/umt5-xxl"]
    ok = dict(text_encoder_name="umt5.safetensors")
    assert models.validate_text_encoder(**ok) is True  # empty: the file's own tokenizer
    assert models.validate_text_encoder(**ok, tokenizer="google/umt5-xxl") is True
    message = _same_answer(lambda t: models.validate_text_encoder(**ok, tokenizer=t),
                           str(server.outside / "tok"), str(server.outside / "no_tok"))
    assert message.startswith("tokenizer: ") and \
        "not one of the available tokenizer folders in models/text_encoders: google/umt5-xxl" in message
    for bad in (str(server.outside / "tok"), "../text_encoders/google/umt5-xxl", "google"):
        assert models.validate_text_encoder(**ok, tokenizer=bad) is not True
        with pytest.raises(mods.host.NotInList):
            models.load_text_encoder("umt5.safetensors", tokenizer=bad)


def test_llm_folder_takes_only_listed_model_folders(server, mods):
    tiny = Path(__file__).resolve().parents[1] / "text" / "tiny_llm.py"
    spec = __import__("importlib.util").util.spec_from_file_location("wancore_tests_tiny_llm_sec", tiny)
    module = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(module)
    llm = module.build_tiny_llm(server.outside / "Qwen-tiny")  # a loadable LLM outside models/LLM
    (server.models / "LLM" / "listed").mkdir(parents=True)
    (server.models / "LLM" / "listed" / "config.json").write_text("{}")
    message = _same_answer(mods.rewrite.validate_llm_folder, str(llm), str(server.outside / "missing"))
    assert message.startswith("llm_folder: ") and "not one of the available model folders in models/LLM: listed" \
        in message
    with pytest.raises(mods.host.NotInList):
        mods.rewrite.prompt_rewrite(str(llm), "a cat", device="cpu", max_new_tokens=2)
    assert mods.rewrite._LOADED == {}


# ---------------------------------------------------------------- messages name <folder>/<file>


def test_validation_and_load_errors_name_files_relative_to_the_models_folder(server, mods):
    bad = server.models / "diffusion_models" / "broken.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    message = mods.models.validate_model("broken.safetensors")
    assert isinstance(message, str) and "diffusion_models/broken.safetensors" in message, message
    assert str(server.models) not in message and str(server.models.resolve()) not in message, message
    with pytest.raises(Exception) as info:  # as ComfyUI runs a node (V1 and V3 both call NodeSpec.run)
        mods.specs["WanCoreModelLoader"].run(model_name="broken.safetensors", device="cpu")
    assert "diffusion_models/broken.safetensors" in str(info.value)
    assert str(server.models) not in str(info.value)
    assert str(server.models) in str(info.value.__cause__)  # the server log keeps the full path


def test_llm_folder_errors_are_relative_too(server, mods):
    import json

    evil = server.models / "LLM" / "evil"
    evil.mkdir(parents=True)
    (evil / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (evil / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "../../outside/x.safetensors"}}))
    with pytest.raises(ValueError) as info:
        mods.specs["WanCorePromptRewrite"].run(llm_folder="evil", prompt="a cat", device="cpu", max_new_tokens=2)
    message = str(info.value)
    assert "LLM/evil/model.safetensors.index.json" in message and "../../outside/x.safetensors" in message
    assert str(server.models) not in message, message


def test_client_message_maps_only_whole_folder_names(server, mods):
    host = mods.host
    root = server.models / "vae"
    text = f"{root}/a.safetensors and {root}2/b and {root}: done"
    assert host.client_message(text) == f"vae/a.safetensors and {root}2/b and vae: done"


def test_every_node_run_rewrites_paths_in_its_errors(server, mods, pack):
    """NodeSpec.run (V1 and V3 execute) applies the rewrite to any node's error, keeping its type and
    attributes; errors without a server path pass through untouched."""
    from importlib import import_module

    declare = import_module(pack.__name__ + ".nodes.declare")

    class StepError(ValueError):
        pass

    def fail(where: str):
        err = StepError(f"{where}: latent channels differ at step 3")
        err.step = 3
        raise err

    spec = declare.NodeSpec(node_id="WanCoreTestFail", display_name="x", category="x", description="x",
                            inputs=(declare.Input("where", "STRING"),), outputs=(), fn=fail)
    vae = server.models / "vae" / "wan_2.1_vae.safetensors"
    with pytest.raises(StepError) as info:
        spec.run(where=str(vae))
    assert str(info.value) == "vae/wan_2.1_vae.safetensors: latent channels differ at step 3"
    assert info.value.step == 3
    with pytest.raises(StepError) as info:
        spec.run(where="the sampler")
    assert str(info.value) == "the sampler: latent channels differ at step 3" and info.value.__cause__ is None
