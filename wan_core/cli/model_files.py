"""What a model file is, from its header alone, and which file of a ComfyUI-style models folder to use.

A models folder often holds several candidates for one part (a 1.3B and a 14B DiT, ``wan2.2_vae`` beside
``wan_2.1_vae``, an image-to-video DiT next to the text-to-video one). File names do not say reliably which is
which, so ``identify`` looks at the tensor names and shapes (safetensors headers; ``.pth`` files are memory-mapped,
not read) with the loaders' own detection, and ``find_model`` picks the one file that fits or refuses with the
list of candidates.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..checkpoint import (
    GGUF_EXT,
    PICKLE_EXTS,
    SAFETENSORS_EXTS,
    CheckpointError,
    is_quant_aux_key,
    open_checkpoint,
)

PARTS = ("dit", "vae", "text_encoder")
# image-to-video (docs/i2v.md section 8): the I2V / FLF2V DiT instead of "dit", and the CLIP vision encoder
IMAGE_PARTS = ("dit_i2v", "dit_flf2v", "clip_vision")
PART_NAMES = {"dit": "Wan 2.1 T2V DiT", "vae": "Wan 2.1 VAE", "text_encoder": "umT5 text encoder",
              "dit_i2v": "image-to-video DiT", "dit_flf2v": "first-last-frame DiT", "clip_vision": "CLIP vision model"}
# ComfyUI's folder for each part, then its legacy name (folder_paths: "unet" and "clip" are older names)
FOLDERS = {"dit": ("diffusion_models", "unet"), "vae": ("vae",), "text_encoder": ("text_encoders", "clip"),
           "dit_i2v": ("diffusion_models", "unet"), "dit_flf2v": ("diffusion_models", "unet"),
           "clip_vision": ("clip_vision",)}
WEIGHT_EXTS = SAFETENSORS_EXTS + PICKLE_EXTS


@dataclass(frozen=True)
class ModelFile:
    """``path`` is a usable ``part`` when ``problem`` is None; ``what`` describes it either way
    (``"Wan 2.1 T2V DiT 1.3B"``, or what the file looks like instead)."""

    path: Path
    part: str
    what: str
    problem: str | None = None
    size: str | None = None  # DiT only: "1.3B" | "14B" (wan_core.estimate.MODELS) or None for other widths
    channels: int | None = None  # DiT / VAE: latent channels, 16 (Wan 2.1 VAE) or 48 (Wan 2.2 VAE, TI2V-5B)
    image_dim: int = 0  # image-to-video DiT: the CLIP width its img_emb takes (0: no CLIP needed)

    @property
    def ok(self) -> bool:
        return self.problem is None


def identify(path: str | Path, part: str) -> ModelFile:
    """Whether ``path`` (file or diffusers/transformers folder) is a usable ``part`` ("dit" | "vae" |
    "text_encoder"), reading headers only. Never raises for a bad file: the reason is in ``problem``."""
    if part not in PARTS + IMAGE_PARTS:
        raise ValueError(f"part must be one of {', '.join(PARTS + IMAGE_PARTS)}, got {part!r}")
    path = Path(path).expanduser()
    try:
        if part in ("dit_i2v", "dit_flf2v"):
            return _identify_image_dit(path, part)
        return {"dit": _identify_dit, "vae": _identify_vae, "text_encoder": _identify_text_encoder,
                "clip_vision": _identify_clip_vision}[part](path)
    except (CheckpointError, KeyError, ValueError, OSError) as e:
        message = str(e.args[0] if isinstance(e, KeyError) and e.args else e).split("\n")[0]
        message = message.removeprefix(f"{path}: ")  # the caller names the file
        return ModelFile(path, part, "unreadable or not this model", problem=message)


def _identify_dit(path: Path) -> ModelFile:
    from ..config import detect_dit_config
    from ..dit.loader import official_state_dict
    from ..estimate import MODELS

    sd = official_state_dict(path)
    cfg = detect_dit_config({k: sd.shape(k) for k in sd if not is_quant_aux_key(k)})
    size = next((name for name, m in MODELS.items() if m["dim"] == cfg.dim and m["num_layers"] == cfg.num_layers),
                None)
    what = f"Wan DiT {size or f'dim {cfg.dim}, {cfg.num_layers} blocks'}"
    if cfg.in_dim == cfg.out_dim == 48 and not any(k.startswith("img_emb.") for k in sd):
        name = "Wan 2.2 TI2V-5B DiT" if size == "5B" else f"Wan 2.2 48-channel DiT dim {cfg.dim}"
        return ModelFile(path, "dit", name, size=size, channels=48)  # docs/wan22.md section 5
    if cfg.in_dim != 16 or cfg.out_dim != 16:
        kind = "image-to-video" if cfg.in_dim == 36 else f"{cfg.in_dim}-channel"
        hint = ": give it a start image (--image)" if cfg.in_dim == 36 else ""
        return ModelFile(path, "dit", what, problem=f"a {kind} DiT, not Wan 2.1 text-to-video (16 channels){hint}")
    if any(k.startswith("img_emb.") for k in sd):
        return ModelFile(path, "dit", what, problem="an image-to-video DiT (it has an image embedding)")
    expert = expert_from_name(path)  # a Wan 2.2 A14B expert is shaped as the 2.1 14B: only the name tells
    note = f" (Wan 2.2 A14B {expert}-noise expert, by its name)" if expert else ""
    return ModelFile(path, "dit", f"Wan 2.1 T2V DiT {size or f'dim {cfg.dim}'}{note}", size=size, channels=16)


def _identify_image_dit(path: Path, part: str) -> ModelFile:
    from ..config import detect_dit_config
    from ..dit.loader import official_state_dict
    from ..estimate import MODELS

    sd = official_state_dict(path)
    cfg = detect_dit_config({k: sd.shape(k) for k in sd if not is_quant_aux_key(k)})
    size = next((name for name, m in MODELS.items() if m["dim"] == cfg.dim and m["num_layers"] == cfg.num_layers),
                None)
    width = size or f"dim {cfg.dim}"
    if cfg.in_dim != 2 * cfg.out_dim + 4:
        return ModelFile(path, part, f"Wan DiT {width}",
                         problem=f"a {cfg.in_dim}-channel DiT, not an image-to-video model (36 channels)")
    flf = bool(cfg.image_pos_len)
    what = f"Wan 2.1 {'FLF2V' if flf else 'I2V'} DiT {width}" if cfg.image_dim else f"image-to-video DiT {width}"
    if flf != (part == "dit_flf2v"):
        problem = ("a first-last-frame DiT: give --last-image too" if flf else
                   "a one-image I2V DiT; a last image needs the first-last-frame model (FLF2V)")
        return ModelFile(path, part, what, problem=problem)
    return ModelFile(path, part, what, size=size, image_dim=cfg.image_dim)


def _identify_clip_vision(path: Path) -> ModelFile:
    from ..i2v.clip_vision import _vision_state_dict

    sd = _vision_state_dict(path)
    hidden = sd.shape("vision_model.embeddings.patch_embedding.weight")[0]
    return ModelFile(path, "clip_vision", f"CLIP vision model (width {hidden})", image_dim=int(hidden))


def _identify_vae(path: Path) -> ModelFile:
    from ..checkpoint import describe_keys, strip_prefix
    from ..vae.config import detect_vae_config
    from ..vae.keys import DIFFUSERS, PREFIXES, detect_key_format, to_official

    sd = strip_prefix(open_checkpoint(path, subfolder="vae"), PREFIXES)
    fmt = detect_key_format(sd)
    if fmt is None:
        return ModelFile(path, "vae", describe_keys(sd),
                         problem=f"not a Wan 2.1 VAE: it looks like {describe_keys(sd)}")
    if fmt == DIFFUSERS:
        sd = to_official(sd)
    if "conv2.weight" in sd and sd.shape("conv2.weight")[0] == 48 or (
            "encoder.conv1.weight" in sd and sd.shape("encoder.conv1.weight")[1] == 12):
        # for the TI2V-5B DiT; the folder search picks it only for a 48-channel DiT (docs/wan22.md section 5)
        return ModelFile(path, "vae", "Wan 2.2 VAE (48 latent channels)", channels=48)
    cfg = detect_vae_config({k: tuple(sd.shape(k)) for k in sd if not is_quant_aux_key(k)}, str(path))
    return ModelFile(path, "vae", f"Wan 2.1 VAE ({cfg.z_dim} latent channels)", channels=cfg.z_dim)


def _identify_text_encoder(path: Path) -> ModelFile:
    from ..checkpoint import describe_keys, strip_prefix
    from ..text.keys import COMFY_PREFIXES, detect_naming, find_spiece_key

    if path.is_dir() and not (path / "config.json").exists() and (path / "text_encoder").is_dir():
        path = path / "text_encoder"
    sd = open_checkpoint(path)
    body = strip_prefix(sd, COMFY_PREFIXES)
    naming = detect_naming(k for k in body if not k.endswith("spiece_model"))
    if naming is None:
        return ModelFile(path, "text_encoder", describe_keys(sd),
                         problem=f"not a umT5 text encoder: it looks like {describe_keys(sd)}")
    tok = ", tokenizer embedded" if find_spiece_key(sd) else ""
    return ModelFile(path, "text_encoder", f"umT5 text encoder ({naming} names{tok})")


def candidates(models_dir: str | Path, part: str) -> list[Path]:
    """Weight files under ``models_dir``'s folders for ``part`` (``FOLDERS``), sorted, any depth."""
    root = Path(models_dir).expanduser()
    found: list[Path] = []
    exts = WEIGHT_EXTS + ((GGUF_EXT,) if part.startswith("dit") else ())  # GGUF: DiTs only (docs/gguf.md)
    for folder in FOLDERS[part]:
        if (root / folder).is_dir():
            found += sorted(p for p in (root / folder).rglob("*") if p.suffix.lower() in exts and p.is_file())
    return found


def expert_from_name(path: str | Path) -> str | None:
    """"high" / "low" when a file or folder name says which Wan 2.2 A14B expert it is (ComfyUI's
    ``wan2.2_t2v_high_noise_14B_*.safetensors``, the official ``high_noise_model/`` folders), else None."""
    parts = [p.lower().replace("-", "_") for p in Path(path).parts[-2:]]
    for expert in ("high", "low"):
        if any(f"{expert}_noise" in p or f"{expert}noise" in p for p in parts):
            return expert
    return None


def find_model(models_dir: str | Path, part: str, channels: int | None = None) -> ModelFile:
    """The one file in ``models_dir`` that is a usable ``part`` (a VAE of ``channels`` latent channels, 16 by
    default); ``ValueError`` (one line) when there is none
    (naming what each candidate is instead) or several (listing them: pass one explicitly)."""
    root = Path(models_dir).expanduser()
    if not root.is_dir():
        raise ValueError(f"--models-dir {root}: no such folder")
    files = [identify(p, part) for p in candidates(root, part)]
    if part == "vae":  # the VAE whose latents the DiT takes: 16 channels unless told (docs/wan22.md section 5)
        want = channels or 16
        files = [f if not f.ok or f.channels in (None, want) else
                 ModelFile(f.path, part, f.what, problem=f"{f.what}: the DiT needs {want}-channel latents")
                 for f in files]
    usable = [f for f in files if f.ok]
    flag = "--dit" if part.startswith("dit") else "--" + part.replace("_", "-")
    where = ", ".join(f"{root / d}" for d in FOLDERS[part])
    if len(usable) == 1:
        return usable[0]
    if not usable:
        if not files:
            raise ValueError(f"no {PART_NAMES[part]} found in {where}; pass its path with {flag}")
        seen = "; ".join(f"{_rel(f.path, root)}: {f.problem}" for f in files[:4])
        raise ValueError(f"no {PART_NAMES[part]} found in {where} ({seen}); pass its path with {flag}")
    listed = ", ".join(f"{_rel(f.path, root)} ({f.what})" for f in usable)
    raise ValueError(f"{len(usable)} files in {root} could be the {PART_NAMES[part]}: {listed}; choose one with "
                     f"{flag}")


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


__all__ = ["FOLDERS", "IMAGE_PARTS", "PARTS", "ModelFile", "candidates", "find_model", "identify"]
