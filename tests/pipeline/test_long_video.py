"""RIFLEx through the pipeline (``GenerationConfig.riflex``) and with context windows: off is the plain run, auto
within the training length changes nothing, a K changes the run and is undone afterwards, windows use the
window's length; the CLI flag is checked before loading."""
import pytest
import torch

from wan_core.cli import main
from wan_core.demo import tiny_random_models
from wan_core.dit.riflex import RIFLEx
from wan_core.dit.runtime import runtime_of
from wan_core.pipeline import GenerationConfig, WanPipeline
from wan_core.sampling.context_windows import ContextWindows


@pytest.fixture(scope="module")
def tiny():
    dit, vae, te = tiny_random_models(seed=0)
    pipe = WanPipeline(dit, vae, te)
    cond, uncond = pipe.encode_prompts(["a red ball"], None)
    return pipe, cond, uncond


def test_riflex_settings_through_the_pipeline(tiny, monkeypatch):
    pipe, cond, uncond = tiny
    cfg = GenerationConfig(width=32, height=32, frames=17, steps=3, seed=2)
    seen = []
    forward = type(pipe.dit).forward

    def spy(self, *a, **k):
        seen.append(runtime_of(self).riflex)
        return forward(self, *a, **k)

    monkeypatch.setattr(type(pipe.dit), "forward", spy)
    with torch.inference_mode():
        plain = pipe.sample_latents(cond, uncond, cfg)
        assert set(seen) == {None}
        assert torch.equal(pipe.sample_latents(cond, uncond, cfg.replace(riflex="off")), plain)
        seen.clear()
        k2 = pipe.sample_latents(cond, uncond, cfg.replace(riflex=2))
        assert set(seen) == {RIFLEx(2, 5)}  # 17 frames = 5 latent frames
        assert not torch.equal(k2, plain)
        assert runtime_of(pipe.dit).riflex is None  # undone after the run
        seen.clear()
        pipe.sample_latents(cond, uncond, cfg.replace(frames=33, riflex=3, context=ContextWindows.from_frames(17, 8)))
        assert set(seen) == {RIFLEx(3, 5)}  # each window: its own 5 latent frames
    with pytest.raises(ValueError, match="RIFLEx"):
        GenerationConfig(riflex="sometimes").validate()


def test_riflex_flag_is_checked_before_loading(capsys, tmp_path):
    for value, message in (("30", "outside the temporal RoPE's range 1..22"), ("maybe", "expected auto, off")):
        code = main(["generate", "--prompt", "x", "--riflex", value, "--out", str(tmp_path / "x.webp")])
        errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
        assert code == 2 and len(errors) == 1 and message in errors[0], errors
    assert not (tmp_path / "x.webp").exists()
