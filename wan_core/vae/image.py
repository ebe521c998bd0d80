"""Conversions between VAE video tensors and ComfyUI IMAGE batches.

VAE side: [B, 3, T, H, W] in [-1, 1] (docs/wan_spec.md section 3.4); ComfyUI side: IMAGE [N, H, W, 3] float32 in [0, 1]
with video frames in the batch dimension (docs/comfyui.md section 6.4).
"""
from __future__ import annotations

import torch


def image_to_video(image: torch.Tensor) -> torch.Tensor:
    """ComfyUI IMAGE [T, H, W, C] in [0, 1] (C = 3, or 4 with alpha, which is dropped) -> video
    [1, 3, T, H, W] in [-1, 1], float32, same device."""
    if not isinstance(image, torch.Tensor) or image.dim() != 4 or image.shape[-1] not in (3, 4):
        shape = list(image.shape) if isinstance(image, torch.Tensor) else type(image).__name__
        raise ValueError(f"expected an IMAGE [T, H, W, 3] (frames in the batch dimension), got {shape}")
    video = image[..., :3].to(torch.float32).permute(3, 0, 1, 2).unsqueeze(0)
    return video.mul(2.0).sub_(1.0)


def video_to_image(video: torch.Tensor) -> torch.Tensor:
    """Video [B, 3, T, H, W] in [-1, 1] -> ComfyUI IMAGE [B*T, H, W, 3] float32 in [0, 1] (clamped);
    the frames of video 0 come first, then those of video 1, ..."""
    if not isinstance(video, torch.Tensor) or video.dim() != 5 or video.shape[1] != 3:
        shape = list(video.shape) if isinstance(video, torch.Tensor) else type(video).__name__
        raise ValueError(f"expected a video [B, 3, T, H, W], got {shape}")
    b, c, t, h, w = video.shape
    image = video.to(torch.float32).permute(0, 2, 3, 4, 1).reshape(b * t, h, w, c)
    return image.add(1.0).mul_(0.5).clamp_(0.0, 1.0)
