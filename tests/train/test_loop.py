"""The training loop on a tiny WanDiT: overfits a tiny set, resumes bit-identically, skips a spiking batch.

References: a fixed-draw evaluation loss before/after (not the loop's own numbers), an uninterrupted run for
resume, the sampler's plan for where the poisoned item sits.
"""
import json
import os

import pytest
import torch
from torch.utils.data import Dataset

from wan_core.train.bucket_sampler import BucketSampler
from wan_core.train.grad_clip import GradientSpikeError, read_spike_marker
from wan_core.train.loop import (SPIKE_MARKER_NAME, TrainConfig, collate_latents, evaluation_loss,
                                 latest_checkpoint, learning_rate, train)

model_mod = pytest.importorskip("wan_core.dit.model")
from wan_core.config import dit_preset  # noqa: E402

TEXT_DIM = 32


def tiny_dit(seed=0):
    torch.manual_seed(seed)
    cfg = dit_preset("tiny").replace(num_layers=2, text_dim=TEXT_DIM, text_len=16)
    return model_mod.WanDiT(cfg)


class LatentSet(Dataset):
    """Latents [16, F, H, W] that are constant over space ("solid colour" clips), one caption each.

    ``repeats`` lists each clip that many times (several timesteps per batch); ``served`` records indices.
    """

    def __init__(self, shapes, repeats=1, seed=0, poison=None):
        g = torch.Generator().manual_seed(seed)
        base = [(torch.randn(16, 1, 1, 1, generator=g).expand(16, *s).clone(),
                 torch.randn(5, TEXT_DIM, generator=g)) for s in shapes]
        self.items = [it for it in base for _ in range(repeats)]
        self.shapes = [s for s in shapes for _ in range(repeats)]
        self.poison = poison
        self.served = []

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        self.served.append(i)
        lat, ctx = self.items[i]
        if i == self.poison:
            lat = torch.full_like(lat, float("nan"))
        return lat, ctx


def _eval(model, ds, firsts):
    return sum(evaluation_loss(model, *collate_latents([ds[i]]), draws=16, seed=123) for i in firsts) / len(firsts)


def test_loop_overfits_a_tiny_set():
    ds = LatentSet([(1, 4, 4), (2, 4, 4)], repeats=8)
    model = tiny_dit()
    before = _eval(model, ds, [0, 8])
    cfg = TrainConfig(max_steps=300, batch_size=8, lr=5e-3, weight_decay=0.0, warmup_steps=20,
                      lr_schedule="cosine", min_lr_ratio=0.05, progress=False)
    result = train(model, ds, cfg)
    after = _eval(model, ds, [0, 8])
    assert before / after >= 10.0, (before, after)
    assert len(result.losses) == 300 and result.step == result.data_step == 300
    assert result.clip_status[0] == "init" and set(result.clip_status) <= {"init", "normal", "clipped"}
    assert all(n > 0 for n in result.grad_norms)
    first, last = sum(result.losses[:20]) / 20, sum(result.losses[-20:]) / 20
    assert last < first / 5


def _params(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_resume_after_checkpoint_is_bit_identical(tmp_path):
    ds = LatentSet([(1, 4, 4), (2, 4, 4), (1, 4, 4)], repeats=2)      # 2 buckets, epochs roll over
    base = dict(max_steps=8, batch_size=2, grad_accum=2, lr=2e-3, warmup_steps=3, lr_schedule="cosine",
                progress=False, keep_last=0)
    full = tiny_dit()
    ref = train(full, ds, TrainConfig(**base))

    stops = iter(range(1, 100))
    first = tiny_dit()
    part = train(first, ds, TrainConfig(**base, checkpoint_dir=str(tmp_path)),
                 interrupt=lambda: next(stops) == 4)                  # stop after step 4
    assert part.interrupted and part.step == 4 and part.checkpoint.endswith("step_00000004")
    ckpt = latest_checkpoint(str(tmp_path))
    assert sorted(os.listdir(ckpt)) == [".wancore_checkpoint", "model.safetensors", "optimizer.pt",
                                        "trainer_state.json"]
    state = json.load(open(os.path.join(ckpt, "trainer_state.json")))
    assert state["step"] == 4 and state["data_step"] == 4 and state["clipper"]["mean"] > 0

    fresh = tiny_dit(seed=99)                                         # different init: weights must load
    rest = train(fresh, ds, TrainConfig(**base, checkpoint_dir=str(tmp_path)), resume="latest")
    assert part.losses + rest.losses == ref.losses                    # exact float equality
    a, b = _params(full), _params(fresh)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert rest.step == 8 and latest_checkpoint(str(tmp_path)).endswith("step_00000008")


def test_learning_rate_schedule():
    cfg = TrainConfig(max_steps=110, lr=1.0, warmup_steps=10, lr_schedule="cosine", min_lr_ratio=0.1)
    assert learning_rate(cfg, 0) == pytest.approx(0.1) and learning_rate(cfg, 9) == pytest.approx(1.0)
    assert learning_rate(cfg, 10) == pytest.approx(1.0)
    assert learning_rate(cfg, 60) == pytest.approx(0.1 + 0.9 * 0.5)      # half way: cos(pi/2) = 0
    assert learning_rate(cfg, 110) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="precision"):
        TrainConfig(max_steps=1, precision="fp16")


def test_bf16_autocast_steps():
    ds = LatentSet([(1, 4, 4)], repeats=4)
    model = tiny_dit()
    result = train(model, ds, TrainConfig(max_steps=3, batch_size=2, precision="bf16", progress=False))
    assert all(torch.isfinite(torch.tensor(result.losses)))
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_spike_stops_and_resume_skips_the_bad_batch(tmp_path):
    shapes = [(1, 4, 4)] * 8
    cfg = TrainConfig(max_steps=3, batch_size=2, lr=1e-3, checkpoint_dir=str(tmp_path), checkpoint_every=2,
                      progress=False)
    plan = BucketSampler(shapes, 2, num_replicas=1, rank=0, seed=cfg.seed).plan().megabatches
    bad = plan[2][0][0]                                               # served at data step 2 (the 3rd step)
    ds = LatentSet(shapes, poison=bad)
    model = tiny_dit()
    with pytest.raises(GradientSpikeError, match="not finite") as info:
        train(model, ds, cfg)
    assert info.value.step == 2
    marker = read_spike_marker(os.path.join(str(tmp_path), SPIKE_MARKER_NAME))
    assert marker["step"] == 2 and marker["resume_data_step"] == 3
    assert latest_checkpoint(str(tmp_path)).endswith("step_00000002")

    ds.served.clear()
    result = train(tiny_dit(seed=5), ds, cfg, resume="latest")
    assert result.step == 3 and result.data_step == 4
    assert sorted(ds.served) == sorted(plan[3][0]) and bad not in ds.served   # data step 3, not 2
    assert read_spike_marker(os.path.join(str(tmp_path), SPIKE_MARKER_NAME)) is None   # passed: cleared


def test_ema_is_the_moving_average_of_the_steps_parameters():
    ds = LatentSet([(1, 4, 4), (2, 4, 4)], repeats=2)
    model = tiny_dit()
    init = {k: p.detach().double().clone() for k, p in model.named_parameters()}
    seen = []

    def record():  # called after every optimizer step: the trajectory the average is taken over
        seen.append({k: p.detach().double().clone() for k, p in model.named_parameters()})
        return False

    decay = 0.8
    result = train(model, ds, TrainConfig(max_steps=12, batch_size=2, lr=1e-2, progress=False, ema_decay=decay),
                   interrupt=record)
    ref = dict(init)
    for n, params in enumerate(seen):  # float64 reference of the documented warm-up rule
        d = min(decay, (1 + n) / (10 + n))
        ref = {k: d * ref[k] + (1 - d) * params[k] for k in ref}
    assert set(result.ema) == set(ref)
    for k in ref:
        torch.testing.assert_close(result.ema[k].double(), ref[k], rtol=1e-5, atol=1e-6)
    moved = [k for k in ref if not torch.allclose(ref[k], seen[-1][k])]
    assert moved  # the average is not the last weights
    assert train(tiny_dit(), ds, TrainConfig(max_steps=2, batch_size=2, progress=False)).ema is None


def test_ema_resumes_from_the_checkpoint(tmp_path):
    ds = LatentSet([(1, 4, 4), (2, 4, 4)], repeats=2)
    base = dict(max_steps=8, batch_size=2, lr=2e-3, progress=False, keep_last=0, ema_decay=0.9)
    ref = train(tiny_dit(), ds, TrainConfig(**base))
    stops = iter(range(1, 100))
    part = train(tiny_dit(), ds, TrainConfig(**base, checkpoint_dir=str(tmp_path)),
                 interrupt=lambda: next(stops) == 5)
    assert part.interrupted and "ema.safetensors" in os.listdir(part.checkpoint)
    rest = train(tiny_dit(seed=3), ds, TrainConfig(**base, checkpoint_dir=str(tmp_path)), resume="latest")
    assert all(torch.equal(ref.ema[k], rest.ema[k]) for k in ref.ema)
    with pytest.raises(ValueError, match="ema_decay"):
        TrainConfig(max_steps=1, ema_decay=1.0)



def test_loss_weights_from_the_dataset_reach_the_loss():
    from wan_core.train.loop import _micro_generator
    from wan_core.train.loss import flow_matching_loss

    class Weighted(Dataset):
        shapes = [(2, 4, 4)]

        def __init__(self, weight):
            g = torch.Generator().manual_seed(1)
            self.item = {"latent": torch.randn(16, 2, 4, 4, generator=g),
                         "context": torch.randn(5, TEXT_DIM, generator=g), "weight": weight}

        def __len__(self):
            return 1

        def __getitem__(self, i):
            return self.item

    weight = torch.ones(1, 2, 4, 4)
    weight[:, 1, :2] = 9.0                                                # one corner of frame 1 counts 9x
    ds = Weighted(weight)
    cfg = TrainConfig(max_steps=1, batch_size=1, lr=1e-3, progress=False, seed=5)
    model = tiny_dit()
    before = tiny_dit()                                                   # same init: the first step's loss
    result = train(model, ds, cfg)
    item = ds[0]
    with torch.no_grad():
        expect = flow_matching_loss(before, item["latent"][None], item["context"][None],
                                    generator=_micro_generator(5, 0, 0, 1), weight=weight[None])
        unweighted = flow_matching_loss(before, item["latent"][None], item["context"][None],
                                        generator=_micro_generator(5, 0, 0, 1))
    assert result.losses[0] == pytest.approx(float(expect), rel=1e-5)
    assert abs(float(expect) - float(unweighted)) > 1e-4 * float(unweighted)
    lat, ctx, w = collate_latents([item, item])
    assert lat.shape == (2, 16, 2, 4, 4) and ctx.shape == (2, 5, TEXT_DIM) and w.shape == (2, 1, 2, 4, 4)
    with pytest.raises(ValueError, match="loss weight"):
        collate_latents([item, {"latent": item["latent"], "context": item["context"]}])


def _flash_allowed_in_forward(model):
    seen = []
    model.register_forward_pre_hook(lambda *_: seen.append(torch.backends.cuda.flash_sdp_enabled()))
    return seen


def test_math_attention_and_fused_adamw_train_what_the_defaults_do(monkeypatch):
    """The speed options change kernels, not the computation: fp32 losses and weights agree to rounding."""
    import wan_core.train.loop as L

    ds = LatentSet([(1, 4, 4), (2, 4, 4)], repeats=4)
    base = dict(max_steps=5, batch_size=4, lr=2e-3, progress=False)
    ref_model = tiny_dit()
    ref_seen = _flash_allowed_in_forward(ref_model)
    ref = train(ref_model, ds, TrainConfig(**base))

    made = []
    real_adamw = torch.optim.AdamW
    monkeypatch.setattr(L.torch.optim, "AdamW", lambda *a, **kw: made.append(kw) or real_adamw(*a, **kw))
    model = tiny_dit()
    seen = _flash_allowed_in_forward(model)
    fast = train(model, ds, TrainConfig(**base, attention_kernel="math", fused_adamw=True))

    assert ref_seen == [True] * 5 and seen == [False] * 5   # the math kernel only, in every forward ...
    assert torch.backends.cuda.flash_sdp_enabled()           # ... and torch's choice again afterwards
    assert made[0]["fused"] is True
    assert fast.losses == pytest.approx(ref.losses, rel=1e-4)
    a, b = _params(ref_model), _params(model)
    # Adam divides by sqrt(v): rounding-sized gradient differences move a weight by up to ~1 % of a step (lr 2e-3)
    assert all(torch.allclose(a[k], b[k], rtol=0, atol=1e-4) for k in a)


def test_an_unknown_attention_kernel_is_refused():
    with pytest.raises(ValueError, match="attention_kernel must be one of"):
        TrainConfig(max_steps=1, attention_kernel="flash2")


def test_timestep_shift_reaches_the_model():
    """``timestep_shift`` moves every training draw to a noisier level (the demo trains at its sampling shift)."""
    def seen(shift):
        model = tiny_dit()
        timesteps = []
        model.register_forward_pre_hook(lambda m, args: timesteps.append(args[1].detach().clone()))
        cfg = TrainConfig(max_steps=3, batch_size=4, lr=1e-4, warmup_steps=1, timestep_shift=shift, progress=False)
        train(model, LatentSet([(1, 4, 4)], repeats=4), cfg)
        return torch.cat(timesteps) / 1000  # the DiT's timestep is 1000 * sigma

    plain, shifted = seen(1.0), seen(3.0)
    assert plain.shape == shifted.shape == (12,)
    # the same draws (seeded per step), each through the sampler's shift: sigma -> 3 sigma / (1 + 2 sigma)
    torch.testing.assert_close(shifted, 3 * plain / (1 + 2 * plain), rtol=1e-4, atol=1e-5)
    assert bool((shifted > plain).all())


def test_compiled_blocks_train_what_eager_blocks_do(monkeypatch):
    """compile_blocks compiles the DiT's blocks for the forward and backward passes; fp32 losses and weights agree
    with eager to rounding. The aot_eager backend stands in for inductor (same graph capture, no C++ build)."""
    import wan_core.memory as M

    real = M.compile_blocks
    monkeypatch.setattr(M, "compile_blocks", lambda model, **kw: real(model, backend="aot_eager", **kw))
    ds = LatentSet([(1, 4, 4), (2, 4, 4)], repeats=4)
    base = dict(max_steps=4, batch_size=4, lr=2e-3, progress=False)
    ref_model = tiny_dit()
    ref = train(ref_model, ds, TrainConfig(**base))
    model = tiny_dit()
    out = train(model, ds, TrainConfig(**base, compile_blocks=True))
    assert not ref.compiled and out.compiled
    assert all("forward" in vars(block) for block in model.blocks)  # the shared compiled forward, per block
    assert "forward" not in vars(ref_model.blocks[0])
    assert out.losses == pytest.approx(ref.losses, rel=1e-5)
    a, b = _params(ref_model), _params(model)
    assert all(torch.allclose(a[k], b[k], rtol=0, atol=1e-4) for k in a)


def test_compile_blocks_needs_a_dit_and_says_so():
    class NotADiT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)

    with pytest.raises(ValueError, match="holds no WanDiT"):
        train(NotADiT(), LatentSet([(1, 4, 4)], repeats=2), TrainConfig(max_steps=1, compile_blocks=True,
                                                                         progress=False))


def test_compile_blocks_unavailable_trains_eager(monkeypatch):
    """No compiler: one CompileUnavailableWarning, the blocks stay eager, the result says so."""
    import wan_core.memory.compile as C

    monkeypatch.setattr(C, "compile_unavailable", lambda device, backend="inductor": "no C++ compiler (test)")
    model = tiny_dit()
    with pytest.warns(C.CompileUnavailableWarning, match="no C.. compiler"):
        out = train(model, LatentSet([(1, 4, 4)], repeats=2),
                    TrainConfig(max_steps=1, batch_size=2, compile_blocks=True, progress=False))
    assert not out.compiled and "forward" not in vars(model.blocks[0])
