"""The model variants as one table: every Wan model this package runs, with its DiT config, the official sampling
settings and what tells its files apart. The command line, the pipeline, the nodes' defaults and the web
estimate read it from here; nothing else keeps a copy.

Torch-free on purpose: ``python -m wan_core --help`` reads the defaults before anything heavy is imported.

Sources of the sampling values (docs/wan22.md section 1, docs/wan_spec.md section 6):
- Wan 2.1 T2V/I2V/FLF2V: 832x480, 81 frames at 16 fps, 50 steps, shift 5, guidance 5 (Wan2.1 generate.py and
  wan/configs). The official script drops I2V to 40 steps and shift 3 at 480p; the command line keeps the T2V
  values for every Wan 2.1 DiT, as it always has, and the table says what it does.
- Wan 2.2 T2V-A14B: wan/configs/wan_t2v_A14B.py lines 34-37 (shift 12, 40 steps, boundary 0.875, guidance
  (low, high) = (3.0, 4.0)); I2V-A14B: wan/configs/wan_i2v_A14B.py lines 34-37 (shift 5, 40 steps, boundary
  0.900, 3.5 / 3.5); TI2V-5B: wan/configs/wan_ti2v_5B.py lines 32-36 (24 fps, shift 5, 50 steps, guidance 5,
  121 frames) at 1280x704 (wan/configs/__init__.py line 46).
- Wan 2.1 VACE 1.3B / 14B (``WAN21_VACE``): Wan2.1 generate.py (commit 9737cba) ``_validate_args``: 50 steps, shift
  16 for "vace" tasks, ``--sample_guide_scale`` 5.0, 81 frames; wan/configs/__init__.py: the T2V configs (16 fps),
  sizes 832x480 / 480x832 (1.3B) and also 1280x720 (14B); wan/vace.py ``generate``: ``context_scale`` 1.0.
- The demo model: what it was tuned for (docs/demo_model.md; ``wan_core.demo.DEMO_DEFAULTS`` is this row).
- tiny-random: random weights, sized to run in seconds.

RIFLEx facts (``Variant.riflex``, docs/long_video.md): the intrinsic temporal RoPE component ``k`` of each model;
the training length it goes with is the row's ``sampling.frames`` (what the model was trained on).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, get_args

from .config import DIT_PRESETS, DiTConfig

Task = Literal["t2v", "i2v", "flf2v", "ti2v", "vace"]
TASKS: tuple[str, ...] = get_args(Task)
VaeKind = Literal["wan2.1", "wan2.2"]

NUM_TRAIN_TIMESTEPS = 1000  # Wan2.2 wan/configs/shared_config.py line 17 (the boundary is a fraction of it)


@dataclass(frozen=True)
class SamplingDefaults:
    """What a flag or widget left unset takes. ``guidance`` is the (high-noise expert's) scale; ``guidance_low``
    and ``boundary`` are read for two-expert variants only; ``negative_prompt`` None = Wan's official one."""

    width: int
    height: int
    frames: int
    steps: int
    guidance: float
    shift: float
    fps: int
    guidance_low: float = 0.0  # two-expert variants only
    boundary: float = 0.0  # two-expert variants only
    negative_prompt: str | None = None

    def generation(self) -> dict[str, object]:
        """The values the command line fills unset flags with (names as its flags)."""
        out: dict[str, object] = {k: getattr(self, k) for k in
                                  ("width", "height", "frames", "steps", "guidance", "shift", "fps")}
        if self.negative_prompt is not None:
            out["negative_prompt"] = self.negative_prompt
        return out

    def replace(self, **changes) -> "SamplingDefaults":
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class RiflexFacts:
    """RIFLEx (Zhao et al. 2025) for one variant: ``k``, the 1-based index of the temporal RoPE frequency whose
    period is the model's intrinsic repetition length; ``source``: where that k comes from."""

    k: int
    source: str


# Wan 2.1 / 2.2: the Wan wrapper's documented default (kijai/ComfyUI-WanVideoWrapper, WanVideoSampler input
# riflex_freq_index: "Frequency index for RIFLEX, disabled when 0, default 6"). The paper's identification rule
# with N = the 21 training latent frames would give k = 4 (period 22); the published 6 (period 51) is kept.
_WAN_RIFLEX = RiflexFacts(6, "ComfyUI-WanVideoWrapper riflex_freq_index: 'disabled when 0, default 6'")
# The demo model (17 frames = 5 latent frames, head_dim 128: temporal RoPE d = 44, theta 10000) has no published
# k: the paper's rule (thu-ml/RIFLEx identify_k) with N = 5 picks the component whose period round(2*pi/theta_j)
# is closest to 5: j = 1 (period 6; j = 2 has 10), so k = 1 (tests/dit/test_riflex.py recomputes it).
_DEMO_RIFLEX = RiflexFacts(1, "derived: paper's identification rule, N = 5 training latent frames")


@dataclass(frozen=True)
class Variant:
    """One model variant. ``dit``: the ``DIT_PRESETS`` key of its DiT (one expert for A14B); ``size``: the
    ``wan_core.estimate`` model size ("demo" and "tiny": none of its sizes); ``experts``: two DiT files (high /
    low noise) make one model."""

    name: str
    label: str
    task: Task
    dit: str | None  # None: a config of its own (the demo model's is wan_core.demo.model.DEMO_DIT)
    vae: VaeKind
    size: str
    sampling: SamplingDefaults
    experts: bool = False
    riflex: RiflexFacts | None = None  # None: no known k (RIFLEx "auto" then applies the paper's rule)

    @property
    def config(self) -> DiTConfig | None:
        return DIT_PRESETS[self.dit] if self.dit else None


_WAN21 = SamplingDefaults(width=832, height=480, frames=81, steps=50, guidance=5.0, shift=5.0, fps=16)

VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("wan2.1-t2v-1.3b", "Wan 2.1 T2V 1.3B", "t2v", "wan2.1-t2v-1.3b", "wan2.1", "1.3B", _WAN21,
            riflex=_WAN_RIFLEX),
    Variant("wan2.1-t2v-14b", "Wan 2.1 T2V 14B", "t2v", "wan2.1-t2v-14b", "wan2.1", "14B", _WAN21,
            riflex=_WAN_RIFLEX),
    Variant("wan2.1-i2v-14b", "Wan 2.1 I2V 14B", "i2v", "wan2.1-i2v-14b", "wan2.1", "14B", _WAN21,
            riflex=_WAN_RIFLEX),
    Variant("wan2.1-flf2v-14b", "Wan 2.1 FLF2V 14B", "flf2v", "wan2.1-flf2v-14b", "wan2.1", "14B", _WAN21,
            riflex=_WAN_RIFLEX),
    # Wan 2.1 VACE (docs/vace.md): Wan2.1 generate.py lines 71-81 (50 steps; shift 16 for "vace" tasks), guidance
    # 5 (its --sample_guide_scale default), 81 frames at 16 fps; 832x480 (wan/configs/__init__.py lines 51-52:
    # the 1.3B's only sizes are 480p)
    Variant("wan2.1-vace-1.3b", "Wan 2.1 VACE 1.3B", "vace", "wan2.1-vace-1.3b", "wan2.1", "1.3B",
            _WAN21.replace(shift=16.0), riflex=_WAN_RIFLEX),
    Variant("wan2.1-vace-14b", "Wan 2.1 VACE 14B", "vace", "wan2.1-vace-14b", "wan2.1", "14B",
            _WAN21.replace(shift=16.0), riflex=_WAN_RIFLEX),
    Variant("wan2.2-t2v-a14b", "Wan 2.2 T2V A14B", "t2v", "wan2.2-t2v-a14b", "wan2.1", "14B",
            _WAN21.replace(steps=40, shift=12.0, guidance=4.0, guidance_low=3.0, boundary=0.875), experts=True,
            riflex=_WAN_RIFLEX),
    Variant("wan2.2-i2v-a14b", "Wan 2.2 I2V A14B", "i2v", "wan2.2-i2v-a14b", "wan2.1", "14B",
            _WAN21.replace(steps=40, shift=5.0, guidance=3.5, guidance_low=3.5, boundary=0.900), experts=True,
            riflex=_WAN_RIFLEX),
    Variant("wan2.2-ti2v-5b", "Wan 2.2 TI2V 5B", "ti2v", "wan2.2-ti2v-5b", "wan2.2", "5B",
            SamplingDefaults(width=1280, height=704, frames=121, steps=50, guidance=5.0, shift=5.0, fps=24),
            riflex=_WAN_RIFLEX),
    # guidance 6 rather than 4, chosen on 120 validation pairs (`data.held_out(6)[120:]`, docs/demo_model.md): run 5
    # followed 75.8 / 81.7 / 78.3 % of them at guidance 4 / 6 / 8; run 7 followed 89.2 / 87.5 / 89.2 / 87.5 / 86.7 %
    # at 4 / 5 / 6 / 7 / 8: flat
    Variant("wancore-demo", "WanCore demo model", "t2v", None, "wan2.1", "demo",
            SamplingDefaults(width=64, height=64, frames=17, steps=20, guidance=6.0, shift=3.0, fps=8,
                             negative_prompt=""), riflex=_DEMO_RIFLEX),
    Variant("tiny-random", "tiny random weights", "t2v", "tiny", "wan2.1", "tiny",
            SamplingDefaults(width=64, height=64, frames=9, steps=4, guidance=5.0, shift=5.0, fps=16)),
)}

# The presets of the command line (--preset) are variants that bring their own files.
PRESETS = ("demo", "tiny-random")
PRESET_VARIANTS = {"demo": "wancore-demo", "tiny-random": "tiny-random"}

T2V_A14B = VARIANTS["wan2.2-t2v-a14b"].sampling
I2V_A14B = VARIANTS["wan2.2-i2v-a14b"].sampling
TI2V_5B = VARIANTS["wan2.2-ti2v-5b"].sampling
WAN21 = _WAN21
WAN21_VACE = _WAN21.replace(shift=16.0)  # Wan 2.1 VACE 1.3B / 14B (the sources above); VACE scale 1.0
VACE_SCALE = 1.0  # Wan2.1 wan/vace.py generate(context_scale=1.0)


def variant(name: str) -> Variant:
    try:
        return VARIANTS[name]
    except KeyError:
        raise ValueError(f"unknown model variant {name!r}; known: {', '.join(VARIANTS)}") from None


def for_files(*, experts: bool = False, image: bool = False, latent_channels: int | None = None) -> Variant:
    """The variant whose defaults apply to a run: two experts (A14B; I2V with a start image), a 48-channel
    DiT (TI2V-5B), else Wan 2.1 (the T2V row: every Wan 2.1 DiT shares its defaults)."""
    if experts:
        return VARIANTS["wan2.2-i2v-a14b" if image else "wan2.2-t2v-a14b"]
    if latent_channels == 48:
        return VARIANTS["wan2.2-ti2v-5b"]
    return VARIANTS["wan2.1-t2v-1.3b"]
