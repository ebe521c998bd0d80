"""VACE conditioning for Wan 2.1 VACE / Wan 2.2 VACE-Fun: frames, masks and reference images -> the 96-channel
context of the DiT's VACE blocks, task recipes and ComfyUI's native VACE conditioning (docs/vace_conditioning.md).

``vace_context(vae, frames, masks, ref_images)`` -> ``VaceContext`` (``context`` ``[B, 96, n_ref + F, h, w]`` and
the trim count ``ref_frames``); ``tasks`` builds frames + masks for the common tasks; ``native`` converts
``WanVaceToVideo`` conditioning; ``request`` holds one run's inputs for the pipeline (docs/vace.md section 3).
"""
from .checks import MULTIPLE, PIXEL_SLACK
from .context import LATENT_CHANNELS, VACE_CHANNELS, VaceContext, vace_context
from .mask import MASK_CHANNELS, fold_mask
from .native import from_native, from_native_conditioning, to_native
from .reference import fit_reference, max_reference_images
from .request import VaceRequest, build_request, has_vace
from .resize import resize_crop, resize_mask
from .tasks import VaceInput, extend_clip, first_last_frame, inpaint, outpaint, reference_only

__all__ = ["LATENT_CHANNELS", "MASK_CHANNELS", "MULTIPLE", "PIXEL_SLACK", "VACE_CHANNELS", "VaceContext", "VaceInput",
           "VaceRequest", "build_request", "extend_clip", "first_last_frame", "fit_reference", "fold_mask",
           "from_native", "from_native_conditioning", "has_vace", "inpaint", "max_reference_images", "outpaint",
           "reference_only", "resize_crop", "resize_mask", "to_native", "vace_context"]
