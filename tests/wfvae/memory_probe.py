"""Peak-memory probe for WF-VAE decode (run as a subprocess by test_memory.py; also usable by hand).

A random WF-VAE (the WF-VAE-L layout, 4x8x8, or the v1.5 8x8x8 one, at ``PROBE_BASE`` base channels: the
streaming and tiling do not depend on the widths, the time does) is measured with the Wan VAE probe's method
(tests/vae/memory_probe.py: every CPU allocation during the decode replayed in time order; the returned video
is subtracted, weights and input exist before the call).

Usage: PROBE_STRUCTURE=4x8x8|8x8x8 PROBE_BASE=32 python memory_probe.py CASE [CASE ...]; CASE =
[full:]frames:height:width[:tile[:overlap]] in latent units. No tile: streamed through time, untiled;
``full:``: the whole-sequence decode (memory grows with length). Prints one JSON line per case.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from wan_core.wfvae.autoencoder import WFVAE  # noqa: E402
from wan_core.wfvae.config import OSP15_WFVAE, WFVAE_L16  # noqa: E402
from wan_core.wfvae.model import build_model  # noqa: E402

_spec = importlib.util.spec_from_file_location("wan_vae_memory_probe", ROOT / "tests" / "vae" / "memory_probe.py")
_wan_probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_wan_probe)
profiled_peak_bytes = _wan_probe.profiled_peak_bytes

STRUCTURES = {"4x8x8": WFVAE_L16, "8x8x8": OSP15_WFVAE}


def random_wfvae(structure: str, base: int, seed: int = 0) -> WFVAE:
    cfg = STRUCTURES[structure]
    if base != cfg.base_channels:
        cfg = replace(cfg, base_channels=base, encoder_energy_flow=base, decoder_energy_flow=base)
    torch.manual_seed(seed)
    return WFVAE(build_model(cfg).eval().requires_grad_(False), source="<random>")


def measure(vae: WFVAE, case: str) -> dict:
    full = case.startswith("full:")
    parts = [int(p) for p in case.removeprefix("full:").split(":")]
    frames, height, width = parts[:3]
    tile = parts[3] if len(parts) > 3 else None
    overlap = parts[4] if len(parts) > 4 else 0
    z = torch.randn(1, vae.config.latent_dim, frames, height, width, generator=torch.Generator().manual_seed(1))
    if full:
        def run():
            with torch.no_grad():
                return vae.model.decode(z)
    elif tile is None:
        def run():
            return vae.decode(z, tiling="off")
    else:
        def run():
            return vae.decode(z, tiling="on", tile=tile, overlap=overlap)
    t0 = time.perf_counter()
    out, peak = profiled_peak_bytes(run)
    seconds = time.perf_counter() - t0
    out_bytes = out.numel() * out.element_size()
    return {"case": case, "frames": frames, "height": height, "width": width, "tile": tile, "overlap": overlap,
            "seconds": round(seconds, 2), "out_mib": out_bytes / 2**20, "peak_mib": (peak - out_bytes) / 2**20}


def main(argv: list[str]) -> None:
    torch.set_num_threads(int(os.environ.get("PROBE_THREADS", "1")))
    vae = random_wfvae(os.environ.get("PROBE_STRUCTURE", "4x8x8"), int(os.environ.get("PROBE_BASE", "32")))
    for case in argv:
        print(json.dumps(measure(vae, case)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
