"""``generate`` with VACE flags (docs/vace.md section 3): a VACE DiT with a control video, a mask and two
reference images writes the run's frames (references trimmed), a control video of another size is resized and
said; bad requests are one line before any model loads."""
from __future__ import annotations

import re

import pytest
import torch
from safetensors.torch import save_file

from wan_core.cli import main
from wan_core.cli.video_read import read_video

from ..vace.helpers import vace_dit


def _frames(folder, count: int, size=(40, 56), seed: int = 0, grey: bool = False):
    from PIL import Image

    folder.mkdir()
    g = torch.Generator().manual_seed(seed)
    for i in range(count):
        pixels = (torch.rand(*size, 1 if grey else 3, generator=g) * 255).to(torch.uint8)
        pixels = (pixels > 127).to(torch.uint8) * 255 if grey else pixels
        Image.fromarray(pixels.squeeze(-1).numpy() if grey else pixels.numpy()).save(folder / f"frame_{i:05d}.png")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Tiny random VACE and T2V DiTs, VAE, umT5; a 7-frame 56x40 control video, a one-frame mask, two images."""
    from PIL import Image

    from wan_core.demo import tiny_random_models, tiny_tokenizer_bytes

    root = tmp_path_factory.mktemp("vace")
    t2v, vae, te = tiny_random_models(seed=3)
    save_file({k: v.contiguous() for k, v in vace_dit(5, te.text_dim).state_dict().items()}, root / "vace.safetensors")
    save_file({k: v.contiguous() for k, v in t2v.state_dict().items()}, root / "t2v.safetensors")
    save_file({k: v.contiguous() for k, v in vae.model.state_dict().items()}, root / "vae.safetensors")
    sd = {k: v.contiguous() for k, v in te.model.state_dict().items() if k != "encoder.embed_tokens.weight"}
    sd["spiece_model"] = torch.frombuffer(bytearray(tiny_tokenizer_bytes()), dtype=torch.uint8)
    save_file(sd, root / "umt5.safetensors")
    _frames(root / "control", 7)
    _frames(root / "mask", 1, size=(48, 64), grey=True)
    for i, name in enumerate(("ref1.png", "ref2.png")):
        pixels = (torch.rand(40, 30, 3, generator=torch.Generator().manual_seed(i)) * 255).to(torch.uint8)
        Image.fromarray(pixels.numpy()).save(root / name)
    return root


def run(capsys, files, *args, dit="vace.safetensors"):
    code = main(["generate", "--prompt", "a fox", "--width", "64", "--height", "48", "--frames", "5", "--steps", "2",
                 "--dit", str(files / dit), "--vae", str(files / "vae.safetensors"),
                 "--text-encoder", str(files / "umt5.safetensors"), *args])
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_vace_run_writes_the_video_frames_only(files, tmp_path, capsys):
    out = tmp_path / "vace.webp"
    code, lines = run(capsys, files, "--vace-video", str(files / "control"), "--vace-mask", str(files / "mask"),
                      "--ref-image", str(files / "ref1.png"), "--ref-image", str(files / "ref2.png"),
                      "--ref-scale", "0.5", "--out", str(out))
    assert code == 0, lines
    frames, _ = read_video(out)
    assert frames.shape == (5, 48, 64, 3)  # the run's frames: the two reference frames were trimmed
    text = "\n".join(lines)
    assert "control video: 56x40 resized to the run's 64x48" in text and "7 frames cut to the run's 5" in text
    assert "mask video: one mask, used for all 5 frames" in text


def test_vace_model_without_vace_flags_runs_on_an_empty_context(files, tmp_path, capsys):
    out = tmp_path / "plain.webp"
    code, lines = run(capsys, files, "--out", str(out))
    assert code == 0, lines
    assert read_video(out)[0].shape[0] == 5


@pytest.mark.parametrize("extra, pattern, dit", [
    (("--ref-image", "{f}/ref1.png"), r"the DiT t2v.safetensors has no VACE blocks", "t2v.safetensors"),
    (("--vace-video", "{f}/control", "--frames", "9"), r"--vace-video control has 7 frames but the run makes 9: "
                                                        r"give --frames 5", "vace.safetensors"),
    (("--ref-image", "{f}/ref1.png",) * 3, r"--ref-image: 3 reference images, at most 2 for 5 frames",
     "vace.safetensors"),
    (("--ref-scale", "0.5"), r"--ref-scale is the strength of --ref-image", "vace.safetensors"),
    (("--ref-image", "{f}/missing.png"), r"--ref-image: .*missing.png: no such image file", "vace.safetensors"),
    (("--vace-video", "{f}/nothing"), r"--vace-video: .*nothing: no such video", "vace.safetensors"),
    (("--vace-scale", "nan"), r"--vace-scale nan: must be a finite number >= 0", "vace.safetensors"),
])
def test_bad_vace_requests_are_one_line_before_loading(files, tmp_path, capsys, tripwire, extra, pattern, dit):
    args = [a.format(f=files) for a in extra]
    code, lines = run(capsys, files, *args, "--out", str(tmp_path / "x.webp"), dit=dit)
    assert code == 2, lines
    assert len([line for line in lines if line.startswith("error:")]) == 1 and re.search(pattern, lines[-1]), lines


def test_preset_with_vace_flags_is_refused(files, tmp_path, capsys, tripwire):
    code = main(["generate", "--prompt", "a fox", "--preset", "demo", "--ref-image", str(files / "ref1.png"),
                 "--out", str(tmp_path / "x.webp")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "--preset demo is text-to-video" in err[-1], err


def test_official_vace_defaults(files):
    """Wan2.1 generate.py: shift 16 for the vace tasks (50 steps and guidance 5 as T2V), unless --shift is given."""
    from wan_core.cli import parser
    from wan_core.cli.request import resolve

    def request(*flags):
        return resolve(parser.build_parser().parse_args(["generate", "--prompt", "x", "--out", "x.mp4", "--dit",
                                                         str(files / "vace.safetensors"), *flags]))

    vace = request("--ref-image", str(files / "ref1.png"))
    assert (vace.shift, vace.steps, vace.guidance, vace.vace_scale, vace.ref_image) == (
        16.0, 50, 5.0, None, (str(files / "ref1.png"),))
    assert request("--ref-image", str(files / "ref1.png"), "--shift", "8").shift == 8.0
    assert request().shift == 5.0
