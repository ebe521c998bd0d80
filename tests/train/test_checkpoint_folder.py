"""save_checkpoint replaces only folders it wrote itself (marked), and pruning deletes only those too."""
from __future__ import annotations

import os

import pytest
import torch

from wan_core.train.loop import (CHECKPOINT_MARKER, CheckpointFolderError, _prune, is_saved_checkpoint,
                                 latest_checkpoint, load_checkpoint, save_checkpoint)


def _model_and_optimizer(value: float = 1.0):
    model = torch.nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.fill_(value)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _user_folder(path) -> str:
    os.makedirs(path)
    with open(os.path.join(path, "thesis.txt"), "w") as f:
        f.write("years of work")
    return str(path)


def test_refuses_a_folder_it_did_not_write_and_deletes_nothing(tmp_path):
    target = _user_folder(tmp_path / "results")
    with pytest.raises(CheckpointFolderError, match=r"results: the folder exists and was not written by "
                                                    r"save_checkpoint \(no \.wancore_checkpoint"):
        save_checkpoint(target, *_model_and_optimizer(), {"step": 1})
    assert os.listdir(target) == ["thesis.txt"]
    assert sorted(os.listdir(tmp_path)) == ["results"]  # no temporary folder left behind


def test_refuses_a_file_and_a_link(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointFolderError, match="a file"):
        save_checkpoint(str(tmp_path / "file"), *_model_and_optimizer(), {})
    save_checkpoint(str(tmp_path / "real"), *_model_and_optimizer(), {})  # even a link to a checkpoint
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    with pytest.raises(CheckpointFolderError, match="a link"):
        save_checkpoint(str(tmp_path / "link"), *_model_and_optimizer(), {})
    assert (tmp_path / "file").read_text() == "x" and is_saved_checkpoint(str(tmp_path / "real"))


def test_replaces_its_own_checkpoint_and_takes_an_empty_folder(tmp_path):
    target = str(tmp_path / "step_00000001")
    os.makedirs(target)  # empty: nothing to lose
    save_checkpoint(target, *_model_and_optimizer(1.0), {"step": 1})
    assert os.path.isfile(os.path.join(target, CHECKPOINT_MARKER))
    save_checkpoint(target + "/", *_model_and_optimizer(2.0), {"step": 2})  # its own: replaced
    model, opt = _model_and_optimizer(0.0)
    assert load_checkpoint(target, model, opt) == {"step": 2}
    assert torch.equal(model.weight, torch.full((2, 2), 2.0))
    assert sorted(os.listdir(tmp_path)) == ["step_00000001"]


def test_a_pre_existing_tmp_folder_is_left_alone(tmp_path):
    """The old saver wrote into ``<dir>.tmp`` and deleted whatever was there first."""
    tmp = _user_folder(tmp_path / "ckpt.tmp")
    save_checkpoint(str(tmp_path / "ckpt"), *_model_and_optimizer(), {})
    assert os.listdir(tmp) == ["thesis.txt"]


def test_a_failed_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    target = str(tmp_path / "ckpt")
    save_checkpoint(target, *_model_and_optimizer(1.0), {"step": 1})

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(target, *_model_and_optimizer(2.0), {"step": 2})
    monkeypatch.undo()
    model, opt = _model_and_optimizer(0.0)
    assert load_checkpoint(target, model, opt) == {"step": 1}
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]


def test_prune_deletes_only_marked_checkpoints(tmp_path):
    for step in (1, 2, 3):
        save_checkpoint(str(tmp_path / f"step_{step:08d}"), *_model_and_optimizer(), {"step": step})
    stranger = _user_folder(tmp_path / "step_00000000")  # named like one, not written by the saver
    _prune(str(tmp_path), keep_last=1)
    assert sorted(os.listdir(tmp_path)) == ["step_00000000", "step_00000003"]
    assert os.listdir(stranger) == ["thesis.txt"]
    assert latest_checkpoint(str(tmp_path)).endswith("step_00000003")
