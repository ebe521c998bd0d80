"""A model folder's JSON never makes the loader read a file outside that folder: shard indexes naming
``../`` or absolute paths, a sub-folder linked elsewhere, and the ``*_file`` entries of a tokenizer config."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from wan_core.checkpoint import CheckpointError, check_folder_references, open_checkpoint


def _sharded_folder(root: Path, shard_names: list[str]) -> Path:
    """A transformers-style folder whose index maps one tensor to each of ``shard_names``."""
    folder = root / "model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    weight_map = {f"w{i}": name for i, name in enumerate(shard_names)}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder


@pytest.fixture
def outside(tmp_path) -> Path:
    """A real safetensors file outside the model folder, as an attacker would point at."""
    (tmp_path / "outside").mkdir()
    path = tmp_path / "outside" / "x.safetensors"
    save_file({"secret": torch.ones(2)}, str(path))
    return path


def test_inside_shards_load(tmp_path):
    folder = _sharded_folder(tmp_path, ["a.safetensors", "sub/b.safetensors"])
    (folder / "sub").mkdir()
    save_file({"w0": torch.zeros(1)}, str(folder / "a.safetensors"))
    save_file({"w1": torch.ones(1)}, str(folder / "sub" / "b.safetensors"))
    sd = open_checkpoint(folder)
    assert sorted(sd) == ["w0", "w1"] and torch.equal(sd["w1"], torch.ones(1))


@pytest.mark.parametrize("entry", ["../outside/x.safetensors", "../../outside/x.safetensors",
                                   "sub/../../outside/x.safetensors", "absolute"])
def test_shard_index_cannot_leave_its_folder(tmp_path, outside, entry):
    if entry == "absolute":
        entry = str(outside)
    folder = _sharded_folder(tmp_path, ["a.safetensors", entry])
    (folder / "sub").mkdir()
    save_file({"w0": torch.zeros(1)}, str(folder / "a.safetensors"))
    with pytest.raises(CheckpointError) as info:
        open_checkpoint(folder)
    message = str(info.value)
    assert "model.safetensors.index.json" in message and repr(entry) in message, message
    assert "inside" in message


def test_shard_in_a_linked_subfolder_outside_is_refused(tmp_path, outside):
    folder = _sharded_folder(tmp_path, ["escape/x.safetensors"])
    (folder / "escape").symlink_to(outside.parent, target_is_directory=True)
    with pytest.raises(CheckpointError, match="escape/x.safetensors.*outside"):
        open_checkpoint(folder)


def test_linked_shard_files_and_linked_model_folder_still_load(tmp_path):
    """The Hugging Face cache layout: every file of a snapshot is a link into a blob store, and users link
    whole model folders into ComfyUI's models folder."""
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    save_file({"w0": torch.zeros(1)}, str(blobs / "blob0"))
    real = _sharded_folder(tmp_path / "snapshot", ["a.safetensors"])
    (real / "a.safetensors").symlink_to(blobs / "blob0")
    linked = tmp_path / "models" / "linked"
    linked.parent.mkdir()
    linked.symlink_to(real, target_is_directory=True)
    assert list(open_checkpoint(linked)) == ["w0"]


@pytest.mark.parametrize("entry", [["a.safetensors"], 3, "", "."])
def test_malformed_shard_entries_are_refused(tmp_path, entry):
    folder = _sharded_folder(tmp_path, [])
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": entry}}))
    with pytest.raises(CheckpointError, match="model.safetensors.index.json"):
        open_checkpoint(folder)


def test_tokenizer_config_file_entries_stay_inside(tmp_path, outside):
    folder = tmp_path / "llm"
    folder.mkdir()
    config = {"tokenizer_class": "X", "special_tokens_map_file": "/home/someone/.cache/special_tokens_map.json",
              "tokenizer_file": None, "vocab_file": "vocab.json"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    check_folder_references(folder)  # stale never-opened entries and in-folder names are fine
    config["vocab_file"] = str(outside)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="tokenizer_config.json.*vocab_file|tokenizer_config.json.*absolute"):
        check_folder_references(folder)
    config["vocab_file"] = "vocab.json"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "../../etc/x"}}))
    with pytest.raises(CheckpointError, match="index.json.*climbs out"):
        check_folder_references(folder)


def test_llm_folder_with_escaping_index_is_refused_before_transformers(tmp_path, outside):
    pytest.importorskip("transformers")
    from wan_core.text.rewrite import RewriterError, load_prompt_rewriter

    folder = _sharded_folder(tmp_path, [str(outside)])
    with pytest.raises(RewriterError, match="LLM folder.*model.safetensors.index.json.*absolute"):
        load_prompt_rewriter(folder)
