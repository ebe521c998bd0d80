"""Wan 2.1's default negative prompt (docs/wan_spec.md section 6.2: ``sample_neg_prompt``, used when none is given)."""
from __future__ import annotations

__all__ = ["DEFAULT_NEGATIVE_PROMPT"]

# English (the official README's rendering): "Bright tones, overexposed, static, blurred details, subtitles,
# style, works, paintings, images, static, overall gray, worst quality, low quality, JPEG compression residue,
# ugly, incomplete, extra fingers, poorly drawn hands, poorly drawn faces, deformed, disfigured, misshapen
# limbs, fused fingers, still picture, messy background, three legs, many people in the background, walking
# backwards". The model was trained with the Chinese text; keep it verbatim.
DEFAULT_NEGATIVE_PROMPT = (
    "色调艳丽，过曝，静态，细节模糊不清，字幕，风格，作品，画作，画面，静止，整体发灰，最差质量，低质量，"
    "JPEG压缩残留，丑陋的，残缺的，多余的手指，画得不好的手部，画得不好的脸部，畸形的，毁容的，形态畸形的肢体，"
    "手指融合，静止不动的画面，杂乱的背景，三条腿，背景人很多，倒着走"
)
