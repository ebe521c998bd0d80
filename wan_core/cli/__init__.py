"""The command line: ``python -m wan_core generate --prompt "..." --out video.mp4`` and ``train-demo``.

Models come from explicit paths (``--dit/--vae/--text-encoder``) or a ComfyUI-style models folder
(``--models-dir`` or ``WANCORE_MODELS_DIR``: ``diffusion_models/``, ``vae/``, ``text_encoders/``), where each part
is recognised by what the file is (its header), not by its name; ``--preset tiny-random`` runs the whole chain
on random weights in seconds (the output is noise).

Every flag is checked before a model is loaded, and every error the user can fix is one line on stderr with
exit code 2 (130 when interrupted); ``--debug`` shows the traceback instead. torch and the models are
imported inside the command, so ``--help`` answers at once.

Modules: ``parser`` (flags, torch-free), ``request`` (the frozen ``GenerateRequest``: defaults resolved, checks
run once), ``checks``, ``loras``, ``models`` (files and loading), ``placement`` (device, block swap, memory),
``conditioning`` (I2V image), ``wan22`` (A14B experts, TI2V first frame), ``parallel`` (torchrun),
``generate`` (the run), ``metadata``, ``video_io``, ``model_files``, ``train_demo``, ``vae`` (the ``vae``
command: encode/decode/roundtrip a video file), ``errors``, ``dispatch`` (``main``).
"""
from .dispatch import main

__all__ = ["main"]
