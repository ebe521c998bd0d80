"""The load path never maps a whole file (issue 49): a safetensors file larger than the address space the process
may still take opens and its small tensors read; reading a tensor that does not fit is a LoadMemoryError with the
sizes and what to do, not "corrupt"; and the model loaders (DiT from a file and from a diffusers-sharded folder,
VAE, text encoder, LoRA) run with every mapping entry point patched to fail."""
from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import wan_core
from wan_core.checkpoint import LoadMemoryError, open_checkpoint
from wan_core.demo import builtin_paths, load_demo_models
from wan_core.dit.keys import official_to_diffusers
from wan_core.lora.formats import read_lora

ROOT = Path(__file__).resolve().parents[2]
BIG = 6 * 2**30  # the sparse tensor: far more than the address space the probe leaves itself

PROBE = textwrap.dedent("""
    import json, resource, sys
    import torch
    import wan_core
    from wan_core.checkpoint import LoadMemoryError, open_checkpoint
    from wan_core.demo import builtin_paths

    def vm_size():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))

    path = sys.argv[1]
    wan_core.load_dit(builtin_paths()["dit"])  # imports and allocator arenas in place before the limit
    limit = vm_size() + 2**30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    out = {"limit_over_vm": 2**30}
    try:  # control: mapping the file is what the limit refuses
        from safetensors import safe_open
        with safe_open(path, framework="pt") as f:
            out["safe_open"] = "opened"
    except Exception as e:
        out["safe_open"] = f"refused: {e}"
    sd = open_checkpoint(path)
    out["small"] = sd["small"].tolist()
    out["big_shape"] = list(sd.shape("big"))
    try:
        sd["big"]
        out["big"] = "read"
    except LoadMemoryError as e:
        out["big"] = str(e)
    dit = wan_core.load_dit(builtin_paths()["dit"])  # the whole DiT load path under the limit
    out["dit_blocks"] = len(dit.blocks)
    print(json.dumps(out))
""")


def _sparse_file(path: Path) -> Path:
    """A valid safetensors file of 6 GiB + a few bytes: a 4-value tensor, then a 6 GiB uint8 tensor of zeros
    that takes no disk space (a hole)."""
    header = {"__metadata__": {"format": "pt"},
              "small": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
              "big": {"dtype": "U8", "shape": [BIG], "data_offsets": [16, 16 + BIG]}}
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(len(blob).to_bytes(8, "little") + blob + torch.tensor([1.5, -2.0, 3.25, 0.0]).numpy().tobytes())
        f.truncate(8 + len(blob) + 16 + BIG)
    return path


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux")
def test_file_larger_than_the_address_space_opens(tmp_path):
    path = _sparse_file(tmp_path / "bigger_than_allowed.safetensors")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, env=env,
                         timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["safe_open"].startswith("refused"), out  # the limit is tight enough to refuse a mapping
    assert out["small"] == [1.5, -2.0, 3.25, 0.0]
    assert out["big_shape"] == [BIG]
    message = out["big"]
    assert message.startswith(f"{path}: out of memory while reading tensor 'big' (6.00 GiB)"), message
    assert "GiB on disk" in message and "--weights fp8_e4m3fn" in message and "block swap" in message
    assert "smaller file" in message and "corrupt" not in message and "\n" not in message
    assert out["dit_blocks"] > 0


@pytest.fixture
def no_mapping(monkeypatch):
    """Every way to map a file from Python fails loudly for the duration of the test."""
    import safetensors
    import safetensors.torch

    def refuse(*args, **kwargs):
        raise AssertionError(f"the load path mapped a file: {args[:1]}")

    monkeypatch.setattr(mmap, "mmap", refuse)
    monkeypatch.setattr(safetensors, "safe_open", refuse)
    monkeypatch.setattr(safetensors.torch, "safe_open", refuse)
    monkeypatch.setattr(safetensors.torch, "load_file", refuse)
    monkeypatch.setattr(torch.UntypedStorage, "from_file", refuse)
    rust = sys.modules.get("safetensors._safetensors_rust")
    if rust is not None:
        monkeypatch.setattr(rust, "safe_open", refuse)


def _diffusers_folder(folder: Path, sd: dict[str, torch.Tensor]) -> Path:
    """``sd`` (official names) as a diffusers transformer folder in two shards with an index."""
    named = {official_to_diffusers(k) or k: v.contiguous() for k, v in sd.items()}
    keys = sorted(named)
    shards = {"diffusion_pytorch_model-00001-of-00002.safetensors": keys[: len(keys) // 2],
              "diffusion_pytorch_model-00002-of-00002.safetensors": keys[len(keys) // 2:]}
    folder.mkdir()
    for name, part in shards.items():
        save_file({k: named[k] for k in part}, str(folder / name))
    index = {"weight_map": {k: name for name, part in shards.items() for k in part}}
    (folder / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def test_loaders_never_map(no_mapping, tmp_path):
    dit, vae, te = load_demo_models()
    assert len(dit.blocks) > 0 and vae is not None and te is not None
    reference = {k: open_checkpoint(builtin_paths()["dit"])[k] for k in open_checkpoint(builtin_paths()["dit"])}
    folder = _diffusers_folder(tmp_path / "transformer", reference)
    sharded = wan_core.load_dit(folder, dtype=torch.float32)
    plain = wan_core.load_dit(builtin_paths()["dit"], dtype=torch.float32)
    for (k, a), (_, b) in zip(sorted(sharded.state_dict().items()), sorted(plain.state_dict().items())):
        assert torch.equal(a, b), k
    fp8 = wan_core.load_dit(folder, dtype=torch.bfloat16, weights="fp8_e4m3fn")
    assert fp8.blocks[0].ffn[0].weight.dtype == torch.float8_e4m3fn
    w = plain.blocks[0].self_attn.q.weight
    lora_file = tmp_path / "lora.safetensors"
    save_file({"diffusion_model.blocks.0.self_attn.q.lora_A.weight": torch.randn(2, w.shape[1]),
               "diffusion_model.blocks.0.self_attn.q.lora_B.weight": torch.randn(w.shape[0], 2)}, str(lora_file))
    assert len(read_lora(lora_file).layers) == 1


def test_out_of_memory_in_the_loader_is_explained(monkeypatch):
    """An allocation failure while converting (not reading) is a LoadMemoryError naming the model's size."""
    import wan_core.dit.loader as loader

    def fail(*args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 123456789 bytes. "
                           "Error code 12 (Cannot allocate memory)")

    monkeypatch.setattr(loader, "quantize_weight", fail)
    with pytest.raises(LoadMemoryError) as err:
        wan_core.load_dit(builtin_paths()["dit"], dtype=torch.bfloat16, weights="fp8_e4m3fn")
    text = str(err.value)
    assert text.startswith(f"{builtin_paths()['dit']}: out of memory while loading it"), text
    assert "the model needs about" in text and "--weights fp8_e4m3fn" in text and "corrupt" not in text
    from wan_core.cli.errors import describe_error

    line, code = describe_error(err.value)
    assert code == 2 and line == f"error: {text}"
