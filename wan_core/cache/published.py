"""Published numbers of the step-skipping caches for Wan 2.1 (docs/algorithms.md sections 4.2-4.3), each with its
source.

Only numbers live here (facts, copied exactly; no code was copied). ``tests/cache/data/published_wan21.json`` is
an independent copy made from the same files, and a test keeps the two equal. Keys are our DiT preset names
(``wan_core.config.DIT_PRESETS``): the published tables are for the T2V 1.3B and 14B models.
"""
from __future__ import annotations

TEACACHE_SOURCE = "ali-vilab/TeaCache@7c10efc4702c TeaCache4Wan2.1/teacache_generate.py (t2v branch of main)"
MAGCACHE_SOURCE = "Zehong-Ma/MagCache@df81cb181776 MagCache4Wan2.1/magcache_generate.py (t2v branch of main)"
EASYCACHE_SOURCE = "H-EmbodVis/EasyCache@51278044023e EasyCache4Wan2.1/easycache_generate.py"

MODEL_1_3B = "wan2.1-t2v-1.3b"
MODEL_14B = "wan2.1-t2v-14b"

# TeaCache rescaling polynomials (numpy poly1d order: highest degree first), per indicator mode:
# "e" = the timestep embedding [B, D] (published default; 1 retention step, last step always computed),
# "e0" = the time projection [B, 6, D] (``--use_ret_steps``: 5 retention steps, no forced last step).
TEACACHE_COEFFICIENTS: dict[str, dict[str, tuple[float, ...]]] = {
    "e": {
        MODEL_1_3B: (2.39676752e+03, -1.31110545e+03, 2.01331979e+02, -8.29855975e+00, 1.37887774e-01),
        MODEL_14B: (-5784.54975374, 5449.50911966, -1811.16591783, 256.27178429, -13.02252404),
    },
    "e0": {
        MODEL_1_3B: (-5.21862437e+04, 9.23041404e+03, -5.28275948e+02, 1.36987616e+01, -4.99875664e-02),
        MODEL_14B: (-3.03318725e+05, 4.90537029e+04, -2.65530556e+03, 5.87365115e+01, -3.15583525e-01),
    },
}
# Steps always computed at the start (the source counts cond+uncond calls: ret_steps = 1*2 or 5*2) and whether
# the last step is always computed (cutoff_steps = 2*steps - 2 for "e", 2*steps for "e0").
TEACACHE_RETENTION_STEPS = {"e": 1, "e0": 5}
TEACACHE_FORCE_LAST = {"e": True, "e0": False}
# Thresholds of the published latency tables (TeaCache4Wan2.1/README.md): 1.3B 0.08 (~175 s -> ~88 s, "2x"),
# 14B 0.2 (~55 min -> ~27 min); with use_ret_steps ("e0") 0.10 and 0.20 are the "fast" settings.
TEACACHE_THRESHOLD = {"e": {MODEL_1_3B: 0.08, MODEL_14B: 0.2}, "e0": {MODEL_1_3B: 0.10, MODEL_14B: 0.2}}

# MagCache magnitude ratios: 2*steps values for 50 steps, cond and uncond interleaved (cond first), the first
# pair is padding 1.0 (``np.array([1.0]*2 + [...])`` in the source). Calibrated with SDPA attention.
MAGCACHE_RATIOS: dict[str, tuple[float, ...]] = {
    MODEL_14B: (
1.0, 1.0, 1.02504, 1.03017, 1.00025, 1.00251, 0.9985, 0.99962, 0.99779, 0.99771, 0.9966, 0.99658, 0.99482,
    0.99476, 0.99467, 0.99451, 0.99664, 0.99656, 0.99434, 0.99431, 0.99533, 0.99545, 0.99468, 0.99465, 0.99438,
    0.99434, 0.99516, 0.99517, 0.99384, 0.9938, 0.99404, 0.99401, 0.99517, 0.99516, 0.99409, 0.99408, 0.99428,
    0.99426, 0.99347, 0.99343, 0.99418, 0.99416, 0.99271, 0.99269, 0.99313, 0.99311, 0.99215, 0.99215, 0.99218,
    0.99215, 0.99216, 0.99217, 0.99163, 0.99161, 0.99138, 0.99135, 0.98982, 0.9898, 0.98996, 0.98995, 0.9887,
    0.98866, 0.98772, 0.9877, 0.98767, 0.98765, 0.98573, 0.9857, 0.98501, 0.98498, 0.9838, 0.98376, 0.98177,
    0.98173, 0.98037, 0.98035, 0.97678, 0.97677, 0.97546, 0.97543, 0.97184, 0.97183, 0.96711, 0.96708, 0.96349,
    0.96345, 0.95629, 0.95625, 0.94926, 0.94929, 0.93964, 0.93961, 0.92511, 0.92504, 0.90693, 0.90678, 0.8796,
    0.87945, 0.86111, 0.86189,
    ),
    MODEL_1_3B: (
1.0, 1.0, 1.0124, 1.02213, 1.00166, 1.0041, 0.99791, 1.00061, 0.99682, 0.99762, 0.99634, 0.99685, 0.99567,
    0.99586, 0.99416, 0.99422, 0.99578, 0.99575, 0.9957, 0.99563, 0.99511, 0.99506, 0.99535, 0.99531, 0.99552,
    0.99549, 0.99541, 0.99539, 0.9954, 0.99536, 0.99489, 0.99485, 0.99518, 0.99514, 0.99484, 0.99478, 0.99481,
    0.99479, 0.99415, 0.99413, 0.99419, 0.99416, 0.99396, 0.99393, 0.99388, 0.99386, 0.99349, 0.99349, 0.99309,
    0.99304, 0.9927, 0.9927, 0.99228, 0.99226, 0.99171, 0.9917, 0.99137, 0.99135, 0.99068, 0.99063, 0.99005,
    0.99003, 0.98944, 0.98942, 0.98849, 0.98849, 0.98758, 0.98757, 0.98644, 0.98643, 0.98504, 0.98503, 0.9836,
    0.98359, 0.98202, 0.98201, 0.97977, 0.97978, 0.97717, 0.97718, 0.9741, 0.97411, 0.97003, 0.97002, 0.96538,
    0.96541, 0.9593, 0.95933, 0.95086, 0.95089, 0.94013, 0.94019, 0.92402, 0.92414, 0.90241, 0.9026, 0.86821,
    0.86868, 0.81838, 0.81939,
    ),
}
MAGCACHE_STEPS = 50
# Defaults of MagCache4Wan2.1/README.md: 1.3B "E012K4R02" (threshold 0.12, K 4, retention 0.2),
# 14B "E024K6R02" (0.24, 6, 0.2); the script's own argparse default K is 2.
MAGCACHE_DEFAULTS: dict[str, dict[str, float]] = {
    MODEL_1_3B: {"threshold": 0.12, "max_skips": 4, "retention": 0.2},
    MODEL_14B: {"threshold": 0.24, "max_skips": 6, "retention": 0.2},
}

# EasyCache (model-agnostic, no calibration): ``--thresh`` default 0.05, ``ret_steps = 10 * 2`` calls (10 of
# the 50 default steps = 20 %), ``cutoff_steps = 2*steps - 2`` (the last step always computed). ComfyUI's
# native port (comfy_extras/nodes_easycache.py) defaults to reuse_threshold 0.2, start 0.15, end 0.95.
EASYCACHE_THRESHOLD = 0.05
EASYCACHE_RETENTION = 0.2

# Published speed-ups, for the expected-evaluation estimate and the docs (all on one A800 unless noted):
# TeaCache 1.3B 0.08 ~2x, MagCache 14B E024K6R02 60 min -> 21.7 min (2.8x), EasyCache 14B T2V on H20
# ~6862 s -> ~2884 s (2.4x), Wan report 1.62x (CFG + attention cache, 14B).
PUBLISHED_SPEEDUP = {"teacache": 2.0, "magcache": 2.8, "easycache": 2.4, "wan": 1.62}
