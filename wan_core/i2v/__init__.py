"""Image-to-video for Wan 2.1 I2V / FLF2V (docs/i2v.md): the start (and last) image as a conditioning latent plus
the official mask (``conditioning``), and the CLIP vision encoder whose tokens the I2V DiT cross-attends to
(``clip_vision``)."""
from .clip_vision import CLIP_MEAN, CLIP_STD, CLIPVisionEncoder, load_clip_vision, preprocess
from .conditioning import (ImageCondition, check_image_model, check_image_request, condition_mask, conditioning_video,
                           image_condition, load_image, official_size, resize_image)

__all__ = ["CLIP_MEAN", "CLIP_STD", "CLIPVisionEncoder", "ImageCondition", "check_image_model", "check_image_request",
           "condition_mask", "conditioning_video", "image_condition", "load_clip_vision", "load_image",
           "official_size", "preprocess", "resize_image"]
