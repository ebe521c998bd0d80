"""Full-size DiT key sets and shapes on the meta device (tests/dit/data/wan_dit_1_3b_keys.txt,
docs/wan_spec.md sections 1.1, 2.8), and the official <-> diffusers rules against
tests/dit/data/wan_dit_keymap_official_to_diffusers.tsv."""
from __future__ import annotations

import re

import torch

from wan_core.config import DIT_PRESETS, detect_dit_config
from wan_core.dit.keys import diffusers_to_official, official_to_diffusers
from wan_core.dit.model import WanDiT

from .helpers import DATA, tsv_map


def meta_model(name: str) -> WanDiT:
    with torch.device("meta"):
        return WanDiT(DIT_PRESETS[name])


def reference_1_3b_shapes() -> dict[str, tuple[int, ...]]:
    shapes = {}
    for line in (DATA / "wan_dit_1_3b_keys.txt").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        key, shape = line.split("\t")[:2]
        shapes[key] = tuple(int(s) for s in re.findall(r"\d+", shape))
    return shapes


def test_1_3b_keys_and_shapes_match_reference_list():
    sd = meta_model("wan2.1-t2v-1.3b").state_dict()
    ref = reference_1_3b_shapes()
    assert len(ref) == 825
    assert {k: tuple(v.shape) for k, v in sd.items()} == ref
    assert sum(v.numel() for v in sd.values()) == 1_418_996_800


def test_14b_counts():
    sd = meta_model("wan2.1-t2v-14b").state_dict()
    assert len(sd) == 1095
    assert sum(v.numel() for v in sd.values()) == 14_288_491_584
    assert tuple(sd["time_projection.1.weight"].shape) == (30720, 5120)
    assert tuple(sd["blocks.39.ffn.0.weight"].shape) == (13824, 5120)


def test_detect_config_from_shapes_recovers_presets():
    for name in ("wan2.1-t2v-1.3b", "wan2.1-t2v-14b"):
        shapes = {k: tuple(v.shape) for k, v in meta_model(name).state_dict().items()}
        cfg = detect_dit_config(shapes)
        assert cfg == DIT_PRESETS[name]


def test_rules_reproduce_the_tsv_both_ways():
    rows = tsv_map()
    assert len(rows) == 825
    for off, dif in rows.items():
        assert official_to_diffusers(off) == dif, off
        assert diffusers_to_official(dif) == off, dif
