"""The umT5-XXL text encoder of Wan 2.1: checkpoint loading, tokenisation, encoding, prompt cache.

Implements docs/wan_spec.md sections 1.3 and 4 (computation through ``transformers.UMT5EncoderModel``), 5.1
(official / transformers / ComfyUI names) and 5.4 (fp8 and scaled-fp8 files are dequantised on load).
transformers is imported inside functions so ``import wan_core`` stays cheap.
"""
from __future__ import annotations

import os
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ..checkpoint import (
    FP8_DTYPES,
    CheckpointError,
    LazyStateDict,
    check_shapes,
    describe_keys,
    is_quant_aux_key,
    materialize,
    open_checkpoint,
    stored_float_dtype,
    strip_prefix,
)
from ..config import TEXT_ENCODER_PRESETS, TextEncoderConfig
from .keys import (
    COMFY_PREFIXES,
    EMBED_KEY,
    TIED_EMBED_KEY,
    detect_naming,
    find_spiece_key,
    hf_to_official,
    official_to_hf,
)
from ..progress import InterruptFn, ProgressFn, check_interrupt
from .prompt import clean_prompt
from .tokenizer import PromptTokenizer, TokenizerError, load_tokenizer, tokenizer_file_in

NO_TOKENIZER_HINT = ("no tokenizer: pass tokenizer=<folder with spiece.model or tokenizer.json>, or use a ComfyUI "
                     "umt5 file that embeds spiece_model")

_HF_BLOCK_RE = re.compile(r"^encoder\.block\.(\d+)\.")


# --------------------------------------------------------------------------------------------- config


def detect_text_encoder_config(shapes: Mapping[str, Sequence[int]], source: str = "<state dict>",
                               hf_config: Mapping | None = None) -> TextEncoderConfig:
    """umT5 hyper-parameters from transformers-named parameter shapes (docs/wan_spec.md section 1.3).

    Everything but the relative-position max distance is in the shapes: vocab and d_model from
    ``shared.weight``, (buckets, heads) from a relative-bias table, d_kv from the q width, d_ff from
    ``wi_0``, the layer count from the block indices. ``hf_config``: a transformers ``config.json`` (folder
    loads) supplying max distance and epsilon.
    """
    need = [EMBED_KEY, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
            "encoder.block.0.layer.0.SelfAttention.q.weight", "encoder.block.0.layer.1.DenseReluDense.wi_0.weight"]
    missing = [k for k in need if k not in shapes]
    if missing:
        raise CheckpointError(f"{source}: cannot detect the umT5 config: missing {', '.join(missing)} "
                              f"(pass config= to load_text_encoder for unusual files)")
    vocab, d_model = (int(s) for s in shapes[EMBED_KEY])
    buckets, heads = (int(s) for s in shapes[need[1]])
    inner = int(shapes[need[2]][0])
    if inner % heads:
        raise CheckpointError(f"{source}: q width {inner} is not a multiple of the {heads} heads of the "
                              f"relative bias table")
    layers = {int(m.group(1)) for k in shapes if (m := _HF_BLOCK_RE.match(k))}
    extra = {}
    if hf_config:
        for field in ("relative_attention_max_distance", "layer_norm_epsilon"):
            if field in hf_config:
                extra[field] = type(getattr(TextEncoderConfig, field))(hf_config[field])
    cfg = TextEncoderConfig(vocab_size=vocab, d_model=d_model, d_kv=inner // heads, num_heads=heads,
                            d_ff=int(shapes[need[3]][0]), num_layers=max(layers) + 1,
                            relative_attention_num_buckets=buckets, **extra)
    for preset in TEXT_ENCODER_PRESETS.values():
        if preset.replace(name="custom") == cfg:
            return preset
    return cfg


def _resolve_config(config) -> TextEncoderConfig | None:
    if config is None or isinstance(config, TextEncoderConfig):
        return config
    if isinstance(config, str):
        try:
            return TEXT_ENCODER_PRESETS[config]
        except KeyError:
            raise ValueError(f"unknown text-encoder preset {config!r}; known: "
                             f"{', '.join(TEXT_ENCODER_PRESETS)}") from None
    raise TypeError(f"config must be a TextEncoderConfig, a preset name or None, got {type(config).__name__}")


def umt5_hf_config(cfg: TextEncoderConfig):
    """The ``transformers.UMT5Config`` of ``cfg``: gated GELU(tanh) FFN, per-layer relative bias, no dropout."""
    from transformers import UMT5Config

    return UMT5Config(
        vocab_size=cfg.vocab_size, d_model=cfg.d_model, d_kv=cfg.d_kv, d_ff=cfg.d_ff, num_layers=cfg.num_layers,
        num_heads=cfg.num_heads, relative_attention_num_buckets=cfg.relative_attention_num_buckets,
        relative_attention_max_distance=cfg.relative_attention_max_distance, dropout_rate=0.0,
        layer_norm_epsilon=cfg.layer_norm_epsilon, feed_forward_proj="gated-gelu", is_encoder_decoder=False,
        use_cache=False, pad_token_id=cfg.pad_token_id, eos_token_id=cfg.eos_token_id,
    )


def build_umt5(cfg: TextEncoderConfig, device: torch.device | str = "meta"):
    """An empty ``UMT5EncoderModel`` for ``cfg``; on ``meta`` (default) it allocates nothing, so a loaded
    5.7B encoder is materialised exactly once (from the checkpoint, by ``load_state_dict(assign=True)``)."""
    from transformers import UMT5EncoderModel

    with torch.device(device):
        model = UMT5EncoderModel(umt5_hf_config(cfg))
    return model.eval().requires_grad_(False)


def expected_shapes(cfg: TextEncoderConfig) -> dict[str, tuple[int, ...]]:
    """transformers name -> shape of every stored tensor (the tied ``encoder.embed_tokens`` excluded)."""
    model = build_umt5(cfg, "meta")
    return {k: tuple(v.shape) for k, v in model.state_dict().items() if k != TIED_EMBED_KEY}


# ------------------------------------------------------------------------------------------- encoder


class TextEncoder:
    """umT5 encoder + tokenizer + LRU cache of prompt embeddings (docs/design.md section 4).

    ``encode(prompts)`` -> list of float32 tensors ``[L_i, d_model]``: the hidden states of the real
    tokens and the EOS token of each prompt (L_i <= 512), on the encoder's device.
    """

    def __init__(self, model, tokenizer: PromptTokenizer, config: TextEncoderConfig, cache_size: int = 16,
                 batch_size: int = 8, source: str = "<state dict>"):
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self.cache_size = int(cache_size)
        self.batch_size = int(batch_size)
        self.source = source
        self.max_length = config.text_len
        self._cache: OrderedDict[str, torch.Tensor] = OrderedDict()

    # properties ------------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.model.shared.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.shared.weight.dtype

    @property
    def text_dim(self) -> int:
        return self.config.d_model

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> "TextEncoder":
        """Move (e.g. offload to CPU) or cast the encoder; a dtype change clears the prompt cache."""
        if dtype is not None and dtype != self.dtype:
            self.model.to(dtype=dtype)
            if dtype == torch.float16:
                _upcast_wo(self.model)
            self.clear_cache()
        if device is not None:
            self.model.to(device=device)
        return self

    # tokenisation ----------------------------------------------------------------------------------
    def tokenize(self, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Cleaned ``prompts`` -> (ids [B, L], mask [B, L]); L = longest prompt incl. EOS, <= 512."""
        return self.tokenizer([clean_prompt(p) for p in prompts], self.max_length)

    # cache -----------------------------------------------------------------------------------------
    def clear_cache(self) -> None:
        self._cache.clear()

    def cached_prompts(self) -> list[str]:
        """Cleaned prompts currently cached, least recently used first."""
        return list(self._cache)

    def _cache_get(self, key: str) -> torch.Tensor | None:
        t = self._cache.get(key)
        if t is not None:
            self._cache.move_to_end(key)
        return t

    def _cache_put(self, key: str, value: torch.Tensor) -> None:
        if self.cache_size <= 0:
            return
        self._cache[key] = value
        self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    # encoding --------------------------------------------------------------------------------------
    def encode(self, prompts: Sequence[str] | str, batch_size: int | None = None,
               progress: ProgressFn | None = None, interrupt: InterruptFn | None = None) -> list[torch.Tensor]:
        """Encode prompts -> list of ``[L_i, d_model]`` float32 tensors (real tokens + EOS,
        docs/wan_spec.md section 4.1).

        Prompts are cleaned (HTML unescape, whitespace), cached prompts are not re-encoded, the others run
        in batches of ``batch_size`` (padding masked). ``progress(done, total)`` is called after each batch
        with the number of prompts encoded so far out of those not cached. ``interrupt()`` is asked before
        each batch (``wan_core.progress``): a true answer raises ``Interrupted``; prompts encoded before are
        kept in the cache.
        """
        if isinstance(prompts, str):
            prompts = [prompts]
        keys = [clean_prompt(p) for p in prompts]
        found: dict[str, torch.Tensor] = {}
        todo: list[str] = []
        for k in keys:
            if k in found or k in todo:
                continue
            hit = self._cache_get(k)
            if hit is None:
                todo.append(k)
            else:
                found[k] = hit
        if todo:
            found.update(self._run(todo, batch_size or self.batch_size, progress, interrupt))
        device = self.device
        return [found[k].to(device, copy=True) for k in keys]

    def _run(self, texts: list[str], batch_size: int, progress: ProgressFn | None,
             interrupt: InterruptFn | None = None) -> dict[str, torch.Tensor]:
        rows = {t: self.tokenizer.token_ids(t, self.max_length) for t in texts}
        order = sorted(texts, key=lambda t: len(rows[t]), reverse=True)  # similar lengths share a batch
        out: dict[str, torch.Tensor] = {}
        device = self.device
        for start in range(0, len(order), max(1, batch_size)):
            check_interrupt(interrupt, "text encoding", len(out), len(order))
            chunk = order[start:start + max(1, batch_size)]
            width = max(len(rows[t]) for t in chunk)
            ids = torch.full((len(chunk), width), self.tokenizer.pad_id, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for i, t in enumerate(chunk):
                ids[i, : len(rows[t])] = torch.tensor(rows[t], dtype=torch.long)
                mask[i, : len(rows[t])] = 1
            with torch.inference_mode():
                hidden = self.model(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
            for i, t in enumerate(chunk):
                emb = hidden[i, : len(rows[t])].float().clone()
                out[t] = emb
                self._cache_put(t, emb)
            if progress is not None:
                progress(len(out), len(order))
        return out

    __call__ = encode

    def __repr__(self) -> str:
        c = self.config
        return (f"TextEncoder({self.source!r}, {c.num_layers} layers, d_model {c.d_model}, {self.dtype}, "
                f"{self.device}, tokenizer={self.tokenizer.kind})")


# -------------------------------------------------------------------------------------------- loading


def _upcast_wo(model) -> None:
    # As transformers does for fp16 (UMT5's _keep_in_fp32_modules): the FFN output projection stays fp32.
    for block in model.encoder.block:
        block.layer[1].DenseReluDense.wo.to(torch.float32)


def _open(src) -> tuple[LazyStateDict, Path | None]:
    """Open ``src``; a diffusers Wan pipeline folder is read from its ``text_encoder`` subfolder."""
    if isinstance(src, Mapping):
        return open_checkpoint(src), None
    path = Path(os.fspath(src)).expanduser()
    if path.is_dir() and not (path / "config.json").exists() and (path / "text_encoder").is_dir():
        return open_checkpoint(path, subfolder="text_encoder"), path / "text_encoder"
    return open_checkpoint(path), path


def _tokenizer_near(path: Path | None) -> Path | None:
    """A tokenizer shipped with the weights: inside a transformers folder, in a pipeline's ``tokenizer``
    folder, or the official Wan layout's ``google/umt5-xxl`` beside the ``.pth``."""
    if path is None:
        return None
    base = path if path.is_dir() else path.parent
    candidates = ([path, path / "tokenizer", path.parent / "tokenizer"] if path.is_dir() else []) + [
        base / "google" / "umt5-xxl"]
    for cand in candidates:
        if cand.is_dir() and tokenizer_file_in(cand) is not None:
            return cand
    return None


def _param_keys(sd: LazyStateDict) -> list[str]:
    return [k for k in sd if not is_quant_aux_key(k)]


def load_text_encoder(
    src,
    tokenizer=None,
    dtype: torch.dtype | None = None,
    device: torch.device | str = "cpu",
    config: TextEncoderConfig | str | None = None,
    cache_size: int = 16,
    batch_size: int = 8,
    progress: ProgressFn | None = None,
) -> TextEncoder:
    """Load the umT5 encoder of Wan 2.1 and its tokenizer (``progress(done, total)`` per tensor read).

    ``src``: the official ``models_t5_umt5-xxl-enc-bf16.pth``, a ComfyUI ``umt5_xxl_*.safetensors`` (fp16,
    bf16, fp8, scaled fp8; also inside an all-in-one file under ``text_encoders.umt5xxl.transformer.``), a
    transformers ``UMT5EncoderModel`` folder, a diffusers Wan pipeline folder, or a ``{name: tensor}`` dict.
    ``tokenizer``: a folder with ``spiece.model`` or ``tokenizer.json``, such a file, or None = the
    checkpoint's embedded ``spiece_model``, else a tokenizer shipped beside the weights.
    ``dtype``: None keeps the stored dtype (fp8 files: bfloat16). ``config``: None = detect from shapes.
    ``cache_size``: how many recent prompt embeddings to keep (0 disables the cache).
    """
    sd, path = _open(src)
    source = sd.source
    spiece_key = find_spiece_key(sd)
    body, naming = _encoder_weights(sd)

    # Shapes under transformers names, for config detection.
    to_hf = (lambda k: official_to_hf(k) or k) if naming == "official" else (lambda k: k)
    hf_shapes = {to_hf(k): body.shape(k) for k in _param_keys(body)}
    _reject_shared_bias_t5(hf_shapes, source)
    cfg = _resolve_config(config) or detect_text_encoder_config(
        hf_shapes, source, (sd.metadata.get("config") if isinstance(sd.metadata.get("config"), dict) else None))

    # Check every tensor, reporting names as the file spells them.
    model = build_umt5(cfg, "meta")
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items() if k != TIED_EMBED_KEY}
    if naming == "official":
        expected = {hf_to_official(k): s for k, s in expected.items()}
    check_shapes({k: body.shape(k) for k in _param_keys(body)}, expected, source,
                 f"a umT5 encoder ({cfg.num_layers} layers, d_model {cfg.d_model}, {naming} names)")

    # Tokenizer before the (large) weights are read, so a missing one fails fast.
    tok = _resolve_tokenizer(tokenizer, sd, spiece_key, path, source)
    if tok.vocab_size > cfg.vocab_size:
        raise TokenizerError(f"{tok.source}: the tokenizer has {tok.vocab_size} tokens but the encoder in {source} "
                             f"embeds only {cfg.vocab_size}; this is not the umT5 tokenizer of this model")

    _assign(model, body.rename(to_hf) if naming == "official" else body, dtype, device, progress, source)
    return TextEncoder(model.eval().requires_grad_(False), tok, cfg, cache_size=cache_size, batch_size=batch_size,
                       source=source)


def _encoder_weights(sd: LazyStateDict) -> tuple[LazyStateDict, str]:
    """The encoder's tensors of an opened file (prefixes, the embedded tokenizer and a duplicate tied embedding
    left out) and their naming ("official" | "hf"); ``CheckpointError`` when it is not a umT5 encoder."""
    body = strip_prefix(sd, COMFY_PREFIXES)
    body = body.rename(lambda k: None if k == "spiece_model" or k.endswith(".spiece_model") else k)
    naming = detect_naming(body)
    if naming is None:
        raise CheckpointError(f"{sd.source}: not a umT5 text encoder: this looks like {describe_keys(sd)}. "
                              f"Wan needs umt5-xxl (models_t5_umt5-xxl-enc-bf16.pth or umt5_xxl_*.safetensors)")
    if naming == "hf" and TIED_EMBED_KEY in body:
        has_shared = EMBED_KEY in body
        body = body.rename(lambda k: (None if has_shared else EMBED_KEY) if k == TIED_EMBED_KEY else k)
    return body, naming


def _assign(model, hf: LazyStateDict, dtype: torch.dtype | None, device, progress: ProgressFn | None,
            source: str) -> None:
    """Read the tensors ``hf`` (transformers names) into the meta ``model`` in ``dtype`` (None = as stored; fp8:
    bfloat16); under float16 the FFN output weights stay float32."""
    stored = stored_float_dtype(hf)
    target = dtype or (torch.bfloat16 if stored in FP8_DTYPES else stored)
    tensors = materialize(hf, dtype=target, device=device, progress=progress)
    if target == torch.float16:
        for k in list(tensors):
            if k.endswith("DenseReluDense.wo.weight"):
                tensors[k] = tensors[k].to(torch.float32)
    tensors[TIED_EMBED_KEY] = tensors[EMBED_KEY]
    model.load_state_dict(tensors, strict=True, assign=True)
    model.encoder.embed_tokens = model.shared  # keep the tie after assign=True
    leftovers = [n for n, p in list(model.named_parameters()) + list(model.named_buffers()) if p.is_meta]
    if leftovers:  # pragma: no cover - check_shapes covers every parameter
        raise CheckpointError(f"{source}: tensors not loaded: {', '.join(leftovers[:5])}")


def _reject_shared_bias_t5(hf_shapes: Mapping[str, Sequence[int]], source: str) -> None:
    """T5 v1.1 / Flux / SD3 ``t5xxl`` files keep a relative bias only in block 0; umT5 has one per block."""
    blocks = {int(m.group(1)) for k in hf_shapes if (m := _HF_BLOCK_RE.match(k))}
    bias = "encoder.block.{}.layer.0.SelfAttention.relative_attention_bias.weight"
    if len(blocks) > 1 and bias.format(0) in hf_shapes and bias.format(1) not in hf_shapes:
        raise CheckpointError(
            f"{source}: this is a T5 (v1.1) encoder with one shared relative-position bias (e.g. the t5xxl used by "
            f"Flux/SD3), not umT5: {bias.format(1)} is missing. Wan needs umt5-xxl "
            f"(models_t5_umt5-xxl-enc-bf16.pth or umt5_xxl_*.safetensors)")


def _resolve_tokenizer(tokenizer, sd: LazyStateDict, spiece_key: str | None, path: Path | None,
                       source: str) -> PromptTokenizer:
    if tokenizer is not None:
        return load_tokenizer(tokenizer)
    if spiece_key is not None:
        return load_tokenizer(sd[spiece_key], source=f"{source}:{spiece_key}")
    near = _tokenizer_near(path)
    if near is not None:
        return load_tokenizer(near)
    raise TokenizerError(f"{source}: {NO_TOKENIZER_HINT}")


__all__ = ["TextEncoder", "load_text_encoder", "detect_text_encoder_config", "build_umt5", "umt5_hf_config",
           "expected_shapes", "NO_TOKENIZER_HINT"]
