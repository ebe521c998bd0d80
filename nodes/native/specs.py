"""The native-MODEL nodes: WanCore Native Attention, WanCore Native Cache, WanCore Native RIFLEx, WanCore Embeds
to Conditioning."""
from __future__ import annotations

import torch

from wan_core.attention.sage import sage_kernel_installed
from wan_core.attention.skiparse import SCHEDULES
from wan_core.cache import ATTENTION_CHOICES, METHODS, TEACACHE_MODES, start_session
from wan_core.dit.riflex import auto_k, check_k

from .. import cache as _cache_node
from .. import host
from ..declare import Input, NodeSpec, Output
from .attention_patch import NATIVE_BACKENDS, NativeAttention, parse_ks
from .cache_patch import NativeCache, NativeDiT, native_config
from .patcher import native_attention_patch, native_cache_patch
from .riflex_patch import native_riflex_patch

CATEGORY = "WanCore/native"
SKIPARSE_CHOICES = SCHEDULES


BACKEND_CHOICES = ("auto", *NATIVE_BACKENDS)  # auto: best_backend()


def best_backend() -> str:
    """What ``auto`` runs: the SageAttention kernel where it runs (CUDA with the package installed), else ComfyUI's
    own attention. Not ``sage`` everywhere: without the kernel it falls back to int8 in torch, which warns on every
    run and is several times slower than sdpa (37 s against 8 s on a CPU server)."""
    return "sage" if host.torch_device().type == "cuda" and sage_kernel_installed() else "sdpa"


def attention_override(backend: str = "sdpa", skiparse: str = "none", k: int = 4,
                       custom_ks: str = "") -> NativeAttention:
    """The :class:`NativeAttention` for the node's widget values (one-line ValueError when invalid)."""
    ks = parse_ks(custom_ks) if skiparse == "custom" else None
    return NativeAttention(best_backend() if backend == "auto" else backend, skiparse, k, ks)


def patch_attention(model, backend: str = "auto", skiparse: str = "none", k: int = 4, custom_ks: str = ""):
    what = "WanCore Native Attention"
    dm = host.native_wan_model(model, what)
    override = attention_override(backend, skiparse, k, custom_ks)
    layers = len(dm.blocks)
    try:
        override.check_layers(layers)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None
    if override.is_noop:
        return (model,)
    host.show_text(f"{what}: {override.describe()} on {type(dm).__name__} ({layers} blocks)")
    return (native_attention_patch(model, override, layers),)


def validate_attention(backend: str = "auto", skiparse: str = "none", k: int = 4,
                       custom_ks: str | None = "") -> bool | str:
    problems = ATTENTION.range_problems(k=k)
    if problems:
        return "; ".join(problems)
    try:
        if k is not None and custom_ks is not None and backend is not None and skiparse is not None:
            attention_override(backend, skiparse, k, custom_ks)
    except ValueError as e:
        return str(e)
    return True


ATTENTION = NodeSpec(
    node_id="WanCoreNativeAttention", display_name="WanCore Native Attention", category=CATEGORY,
    description="Patches a native Wan 2.1/2.2 MODEL (Load Diffusion Model, LoRA loaders, ModelSamplingSD3...) "
                "with WanCore's attention: 8-bit attention (sage = the SageAttention kernel on CUDA, its int8 "
                "algorithm elsewhere) and skiparse sparse self-attention. Returns a patched copy; sdpa + none "
                "returns the model unchanged.",
    inputs=(
        Input("model", "MODEL"),
        Input("backend", "COMBO", default="auto", options=BACKEND_CHOICES,
              tooltip="auto: sage where the SageAttention kernel runs (CUDA with the package), else sdpa; sdpa: "
                      "ComfyUI's own attention; sage: SageAttention kernel (CUDA; falls back to int8, slower); "
                      "int8: the SageAttention algorithm in torch (any device)"),
        Input("skiparse", "COMBO", default="none", options=SKIPARSE_CHOICES,
              tooltip="sparse self-attention schedule: none; osp13 (first/last 2 blocks dense, ratio k); suv "
                      "(U-shaped ratios 1-8); custom (one ratio per block below). Changes the output."),
        Input("k", "INT", default=4, min=2, max=8, step=1, tooltip="osp13: sparse ratio of the sparse blocks"),
        Input("custom_ks", "STRING", default="", optional=True, advanced=True,
              tooltip="custom: one ratio per block, e.g. '1 1 4 4 4 4 1 1' (1 = dense)"),
    ),
    outputs=(Output("MODEL", "model"),),
    fn=patch_attention,
    validate=validate_attention,
    search_aliases=("sage attention", "skiparse", "sparse attention", "int8 attention"),
)


def cache_setting(method: str = "easycache", threshold: float = -1.0, start: float = -1.0, end: float = -1.0,
                  attention: str = "extrapolate", teacache_mode: str = "e", calibration: str = "") -> NativeCache:
    return NativeCache(_cache_node.build(method, threshold, start, end, attention, teacache_mode, calibration))


def patch_cache(model, method: str = "easycache", threshold: float = -1.0, start: float = -1.0, end: float = -1.0,
                attention: str = "extrapolate", teacache_mode: str = "e", calibration: str = ""):
    what = "WanCore Native Cache"
    dm = host.native_wan_model(model, what)
    cache = cache_setting(method, threshold, start, end, attention, teacache_mode, calibration)
    if cache.is_noop:
        return (model,)
    try:  # the errors of a run (no published table for this model, a calibration of another model) now
        start_session(cache.native_config(), NativeDiT(native_config(dm)), 2, 2.0)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None
    return (native_cache_patch(model, cache, len(dm.blocks)),)


def validate_cache(method: str = "easycache", threshold: float = -1.0, start: float = -1.0, end: float = -1.0,
                   attention: str = "extrapolate", teacache_mode: str = "e",
                   calibration: str | None = "") -> bool | str:
    return _cache_node.validate_cache(method, threshold, start, end, attention, teacache_mode, calibration or "")


NATIVE_METHODS = tuple(m for m in METHODS if m != "exact")
# the core's descriptions build on "exact" (text K/V once per prompt), which ComfyUI's own forward does not have
NATIVE_METHOD_HELP = "; ".join(f"{m}: {_cache_node.DESCRIPTIONS[m].removeprefix('exact + ')}"
                               for m in NATIVE_METHODS)

CACHE = NodeSpec(
    node_id="WanCoreNativeCache", display_name="WanCore Native Cache", category=CATEGORY,
    description="Patches a native Wan MODEL with a WanCore diffusion cache (docs/caches.md): wan (the Wan "
                "report's CFG cache and attention cache), teacache, magcache, easycache, or calibrate. Returns a "
                "patched copy; 'off' returns the model unchanged. The DiT evaluations computed and skipped are "
                "shown when sampling ends.",
    inputs=(
        Input("model", "MODEL"),
        Input("method", "COMBO", default="easycache", options=NATIVE_METHODS,
              tooltip=NATIVE_METHOD_HELP),
        Input("threshold", "FLOAT", default=-1.0, min=-1.0, max=100.0, step=0.01,
              tooltip="teacache / magcache / easycache: -1 = the method's published default; 0 never reuses; "
                      "higher = faster, lossier (wan and calibrate have no threshold)"),
        Input("start", "FLOAT", default=-1.0, min=-1.0, max=1.0, step=0.01,
              tooltip="fraction of the steps before which every step is computed; -1 = the method's default"),
        Input("end", "FLOAT", default=-1.0, min=-1.0, max=1.0, step=0.01,
              tooltip="fraction of the steps from which every step is computed again; -1 = the method's default"),
        Input("attention", "COMBO", default="extrapolate", options=ATTENTION_CHOICES, advanced=True,
              tooltip="wan: self-attention between computed steps linearly extrapolated from the last two "
                      "(default), reused as is (less memory, less accurate), or off (the CFG cache only)"),
        Input("teacache_mode", "COMBO", default="e", options=TEACACHE_MODES, advanced=True,
              tooltip="teacache indicator: e = timestep embedding, e0 = time projection"),
        Input("calibration", "STRING", default="", multiline=True, optional=True, advanced=True,
              tooltip="teacache / magcache on models without published numbers: the text a 'calibrate' run shows"),
    ),
    outputs=(Output("MODEL", "model"),),
    fn=patch_cache,
    validate=validate_cache,
    search_aliases=("teacache", "magcache", "easycache", "step cache"),
)


def patch_riflex(model, k: int = 0):
    """k = 0: auto (the model's k, applied when the latent is longer than the training length); else that k."""
    what = "WanCore Native RIFLEx"
    dm = host.native_wan_model(model, what)
    config = native_config(dm)
    temporal = int(getattr(getattr(dm, "rope_embedder", None), "axes_dim", config.rope_dims)[0])
    try:
        if k != 0:
            check_k(k, temporal)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None
    if k == 0:
        auto, trained = auto_k(config)
        text = f"auto: k={auto}, from {trained + 1} latent frames on (trained on {trained})"
    else:
        text = f"k={k}"
    host.show_text(f"{what}: {text} on {type(dm).__name__}")
    return (native_riflex_patch(model, "auto" if k == 0 else k, config),)


def validate_riflex(k: int = 0) -> bool | str:
    problems = RIFLEX.range_problems(k=k)
    return "; ".join(problems) if problems else True


RIFLEX = NodeSpec(
    node_id="WanCoreNativeRIFLEx", display_name="WanCore Native RIFLEx", category=CATEGORY,
    description="Patches a native Wan MODEL with RIFLEx (Zhao et al. 2025) for videos longer than the model was "
                "trained on: the temporal RoPE frequency k is lowered to 0.9 * 2*pi / L (L = latent frames of the "
                "run, or of the context window) so the video does not repeat itself. Returns a patched copy.",
    inputs=(
        Input("model", "MODEL"),
        Input("k", "INT", default=0, min=0, max=22, step=1,
              tooltip="0 = auto: the model's k (6 for Wan 2.1/2.2), only when the latent is longer than the "
                      "training length (21 latent frames = 81 frames); 1-22 = that temporal frequency, always"),
    ),
    outputs=(Output("MODEL", "model"),),
    fn=patch_riflex,
    validate=validate_riflex,
    search_aliases=("riflex", "long video", "length extrapolation", "rope"),
)


def to_conditioning(embeds: dict, text_len: int = 512):
    """WanCore embeddings -> native CONDITIONING ``[[tensor [1, text_len, D], {}]]`` for positive and negative,
    zero-padded to ``text_len`` rows like ComfyUI's own umT5 encoder output."""
    if not isinstance(embeds, dict) or "cond" not in embeds or "uncond" not in embeds:
        raise ValueError("embeds: expected the output of WanCore Text Encode")

    def one(rows: list, which: str) -> list:
        out = []
        for r in rows:
            r = torch.as_tensor(r)
            if r.dim() == 3 and r.shape[0] == 1:
                r = r[0]
            if r.dim() != 2:
                raise ValueError(f"embeds {which}: expected [tokens, dim] rows, got {list(r.shape)}")
            if r.shape[0] > text_len:
                raise ValueError(f"embeds {which}: {r.shape[0]} tokens exceed text_len {text_len}; raise text_len "
                                 f"or shorten the prompt")
            padded = torch.zeros(text_len, r.shape[1], dtype=torch.float32)
            padded[: r.shape[0]] = r.float()
            out.append([padded[None].to(host.intermediate_device()), {}])
        return out

    return (one(embeds["cond"], "positive"), one(embeds["uncond"], "negative"))


CONDITIONING = NodeSpec(
    node_id="WanCoreEmbedsToConditioning", display_name="WanCore Embeds to Conditioning", category=CATEGORY,
    description="Turns WanCore Text Encode's embeddings (our umT5 loader: fp8 scaled files, prompt cache) into "
                "native CONDITIONING for KSampler and the other native samplers.",
    inputs=(
        Input("embeds", "WANCORE_EMBEDS"),
        Input("text_len", "INT", default=512, min=1, max=4096, step=1,
              tooltip="rows of the conditioning (zero-padded): 512 for the released Wan models, like ComfyUI's "
                      "umT5 encoder; the built-in demo model uses 32"),
    ),
    outputs=(Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative")),
    fn=to_conditioning,
)

NODES = (ATTENTION, CACHE, RIFLEX, CONDITIONING)
