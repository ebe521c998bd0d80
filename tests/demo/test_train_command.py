"""``train-demo`` end to end on a few steps: every stage writes files the public loaders read, the decoder
stage runs in its own process beside the DiT stage, and a second run resumes instead of retraining."""
import json
import os

import torch

from wan_core import load_dit, load_text_encoder, load_vae
from wan_core.demo import train as T
from wan_core.demo.model import DEMO_VAE


def _tiny(**kw) -> T.DemoTrainConfig:
    base = dict(vae_phases=(T.VAEPhase(steps=1, batch=1, frames=(5,), lr=1e-3),
                            T.VAEPhase(steps=1, batch=1, frames=(5, 9), lr=5e-4, clip=1.0, object_weight=5.0)),
                num_clips=6, dit_steps=2, dit_batch=2, dit_warmup=1, decoder_steps=1, parallel=True)
    base.update(kw)
    return T.DemoTrainConfig(**base)


def test_train_demo_runs_every_stage_and_resumes(tmp_path):
    out = str(tmp_path / "run")
    summary = T.run(out, _tiny())
    for key in ("text_encoder", "vae", "latents", "dit", "vae_decoder"):
        assert key in summary, key
    assert summary["dit"]["steps"] == 2 and summary["vae_decoder"]["steps"] == 1
    dit = load_dit(os.path.join(out, "dit.safetensors"))
    assert dit.config.text_len == 32
    vae = load_vae(os.path.join(out, "vae.safetensors"))
    assert vae.config == DEMO_VAE
    te = load_text_encoder(os.path.join(out, "text_encoder.safetensors"))
    assert te.encode(["a red circle moving left"])[0].shape[0] == 6
    log = [json.loads(line) for line in open(os.path.join(out, "log.jsonl"), encoding="utf-8")]
    done = {r["stage"] for r in log if r.get("done")}
    assert done == {"text_encoder", "vae", "latents", "dit", "vae_decoder"}
    # a second run finds every output and trains nothing
    mtimes = {f: os.path.getmtime(os.path.join(out, f)) for f in ("dit.safetensors", "vae.safetensors")}
    T.run(out, _tiny())
    assert mtimes == {f: os.path.getmtime(os.path.join(out, f)) for f in mtimes}


def test_vae_batches_draw_their_length_from_the_phase():
    import random

    lengths = {T._vae_batch(random.Random(s), 2, (5, 9, 17), 32).shape[2] for s in range(12)}
    assert lengths == {5, 9, 17}
    x = T._vae_batch(random.Random(0), 3, (5,), 32)
    assert x.shape == (3, 3, 5, 32, 32) and x.abs().max() <= 1.0 and torch.isfinite(x).all()


def test_vae_phases_split_the_global_step():
    cfg = T.DemoTrainConfig()
    a, b = cfg.vae_phases
    assert cfg.vae_steps == a.steps + b.steps
    assert cfg.vae_phase(0) == (a, 0) and cfg.vae_phase(a.steps - 1) == (a, a.steps - 1)
    assert cfg.vae_phase(a.steps) == (b, 0)


def test_object_pixels_weigh_more_in_the_reconstruction_loss():
    x = torch.full((1, 3, 1, 4, 4), 0.1)
    x[..., 0, 0] = torch.tensor([1.0, -1.0, -1.0]).view(1, 3, 1)  # one red (saturated) pixel
    y_obj, y_bg = x.clone(), x.clone()
    y_obj[..., 0, 0] += 0.5
    y_bg[..., 3, 3] += 0.5
    plain = [T.reconstruction_loss(y, x)[0] for y in (y_obj, y_bg)]
    assert torch.isclose(plain[0], plain[1])
    weighted = [T.reconstruction_loss(y, x, object_weight=5.0)[0] for y in (y_obj, y_bg)]
    assert weighted[0] > 4 * weighted[1]
    assert T.reconstruction_loss(y_obj, x, 5.0)[1] == T.reconstruction_loss(y_obj, x)[1]  # the MSE is plain
