"""``train-demo`` end to end on a few steps: every stage writes files the public loaders read, the decoder
stage runs in its own process beside the DiT stage, and a second run resumes instead of retraining."""
import json
import os

import pytest
import torch

from wan_core import load_dit, load_text_encoder, load_vae
from wan_core.demo import train as T
from wan_core.demo.model import DEMO_DEFAULTS, DEMO_VAE


def _tiny(**kw) -> T.DemoTrainConfig:
    base = dict(vae_phases=(T.VAEPhase(steps=1, batch=1, frames=(5,), lr=1e-3),
                            T.VAEPhase(steps=1, batch=1, frames=(5, 9), lr=5e-4, clip=1.0, object_weight=5.0,
                                       pca_weight=1.0)),
                vae_pca_clips=4, num_clips=6, dit_steps=2, dit_batch=2, dit_warmup=1, decoder_steps=1, parallel=True,
                text_grounding_steps=2, latent_spectrum_clips=4,
                dit_object_weight=5.0, dit_ema_decay=0.9, dit_precision="bf16",  # the optional recipe parts run too
                dit_attention_kernel="math", dit_fused_adamw=True,
                dit_compile=False)  # compiled blocks: their own tests (inductor would take a minute to build here)
    base.update(kw)
    return T.DemoTrainConfig(**base)


def test_train_demo_runs_every_stage_and_resumes(tmp_path):
    out = str(tmp_path / "run")
    threads = torch.get_num_threads()
    summary = T.run(out, _tiny(threads=3, decoder_pca_object_weight=2.0))
    assert torch.get_num_threads() == threads  # the caller's thread count comes back
    for key in ("text_encoder", "vae", "latents", "dit", "vae_decoder"):
        assert key in summary, key
    assert summary["dit"]["steps"] == 2 and summary["vae_decoder"]["steps"] == 1
    assert summary["vae_decoder"]["object_weight"] == 2.0  # a block-PCA recipe: the decoder takes its own weight
    assert summary["dit"]["precision"] == "bf16"
    assert summary["dit"]["attention_kernel"] == "math" and summary["dit"]["fused_adamw"] is True
    assert summary["dit"]["timestep_shift"] == DEMO_DEFAULTS.shift == 3.0  # trained at the shift it samples with
    # a block-PCA phase: the latents take the code's component variances (not the eigenvalue power)
    spectrum = summary["vae"]["latent_spectrum"]
    assert spectrum["to_channel_variances"] is True
    assert spectrum["power"] == T.DemoTrainConfig().latent_spectrum_pca_power
    assert summary["text_encoder"]["grounding"]["steps"] == 2  # pretrained in stage 1 ...
    assert summary["text_encoder"]["trained_with_dit"] is False  # ... then frozen
    dit = load_dit(os.path.join(out, "dit.safetensors"))
    assert dit.config.text_len == 32
    from safetensors import safe_open

    with safe_open(os.path.join(out, "dit.safetensors"), "pt") as f:  # the file in dit_file_dtype, fp16 by default
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}
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


@pytest.mark.parametrize("joint", [True, False])
def test_the_text_encoder_trains_with_the_dit_unless_told_not_to(tmp_path, joint):
    out, init = str(tmp_path / "run"), str(tmp_path / "init")
    cfg = _tiny(train_text_encoder=joint, vae_phases=(T.VAEPhase(steps=1, batch=1, frames=(5,), lr=1e-3),),
                dit_ema_decay=0.0, dit_object_weight=1.0, decoder_steps=0, parallel=False, dit_precision="fp32")
    summary = T.run(out, cfg)
    spectrum = summary["vae"]["latent_spectrum"]  # reconstruction only: the eigenvalue map of power 0.5
    assert spectrum["to_channel_variances"] is False and spectrum["power"] == 0.5
    os.makedirs(init)
    T.stage_text_encoder(init, cfg)  # what stage 1 wrote before the DiT stage
    from safetensors.torch import load_file

    trained, first = (load_file(os.path.join(d, "text_encoder.safetensors")) for d in (out, init))
    assert trained.keys() == first.keys() and "spiece_model" in trained
    assert torch.equal(trained["spiece_model"], first["spiece_model"])  # the tokenizer is kept
    changed = [k for k in first if k != "spiece_model" and not torch.equal(trained[k], first[k])]
    assert summary["text_encoder"]["trained_with_dit"] is joint
    if joint:
        assert "shared.weight" in changed and any("relative_attention_bias" in k for k in changed), changed
    else:
        assert changed == []
    load_text_encoder(os.path.join(out, "text_encoder.safetensors"))  # the public loader reads it


def test_the_grounding_stage_trains_the_encoder_and_keeps_the_tokenizer(tmp_path):
    grounded, random_init = str(tmp_path / "grounded"), str(tmp_path / "random")
    for d, steps in ((grounded, 3), (random_init, 0)):
        os.makedirs(d)
        T.stage_text_encoder(d, _tiny(text_grounding_steps=steps))
    from safetensors.torch import load_file

    g, r = (load_file(os.path.join(d, "text_encoder.safetensors")) for d in (grounded, random_init))
    assert g.keys() == r.keys() and torch.equal(g["spiece_model"], r["spiece_model"])
    changed = {k for k in r if k != "spiece_model" and not torch.equal(g[k], r[k])}
    assert "shared.weight" in changed and any("relative_attention_bias" in k for k in changed), changed
    summary = json.load(open(os.path.join(grounded, "summary.json"), encoding="utf-8"))["text_encoder"]
    assert summary["grounding"]["steps"] == 3 and 0 <= summary["grounding"]["accuracy_held_out_pairs"] <= 1
    assert json.load(open(os.path.join(random_init, "summary.json"), encoding="utf-8"))["text_encoder"][
        "grounding"] is None
    assert not [f for f in os.listdir(grounded) if "init" in f]  # the scratch copy of the random init is gone
    te = load_text_encoder(os.path.join(grounded, "text_encoder.safetensors"))  # the public loader reads it
    assert te.encode(["a red circle moving left"])[0].shape == (6, te.config.d_model)


def test_training_conditioning_matches_the_pipelines():
    """The joint model's (token ids -> masked encoder states -> DiT) equals the DiT on ``TextEncoder.encode``'s
    per-prompt states, so what trained is what generates; gradients reach the encoder."""
    from wan_core.demo import builtin_paths

    paths = builtin_paths()
    te = load_text_encoder(paths["text_encoder"], cache_size=0)
    dit = load_dit(paths["dit"]).float()
    prompts = ["a red circle moving left and a blue square moving up", "a green square moving down", ""]
    ids = T.token_contexts(te, prompts, dit.config.text_len)
    assert all(v.shape == (32,) for v in ids.values())
    assert int((ids[prompts[1]] != te.tokenizer.pad_id).sum()) == len(te.tokenizer.token_ids(prompts[1], 512))
    joint = T.TextConditionedDiT(dit, te.model, te.tokenizer.pad_id)
    x = torch.randn(3, 16, 2, 4, 4, generator=torch.Generator().manual_seed(0))
    t = torch.tensor([900.0, 500.0, 100.0])
    with torch.no_grad():
        want = dit(x, t, te.encode(prompts))
        got = joint(x, t, torch.stack([ids[p] for p in prompts]))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    te.model.requires_grad_(True)
    joint(x, t, torch.stack([ids[p] for p in prompts])).square().mean().backward()
    assert te.model.shared.weight.grad is not None and float(te.model.shared.weight.grad.abs().sum()) > 0
    with pytest.raises(ValueError, match="text_len 4"):
        T.token_contexts(te, prompts[:1], 4)


def test_vae_batches_draw_their_length_from_the_phase():
    import random

    lengths = {T._vae_batch(random.Random(s), 2, (5, 9, 17), 32).shape[2] for s in range(12)}
    assert lengths == {5, 9, 17}
    x = T._vae_batch(random.Random(0), 3, (5,), 32)
    assert x.shape == (3, 3, 5, 32, 32) and x.abs().max() <= 1.0 and torch.isfinite(x).all()


def test_the_decoder_stage_weighs_object_pixels_by_recipe():
    assert T.decoder_object_weight(T.DemoTrainConfig()) == T.DemoTrainConfig().decoder_pca_object_weight == 1.0
    rec = T.DemoTrainConfig(vae_phases=T.VAE_RECIPES["reconstruction"])
    assert T.decoder_object_weight(rec) == rec.decoder_object_weight == 5.0


def test_vae_phases_split_the_global_step():
    cfg = T.DemoTrainConfig(vae_phases=T.VAE_RECIPES["reconstruction"])
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


def test_object_coverage_counts_object_pixels_per_latent_cell():
    from wan_core.demo import data as D

    spec = D.clip_spec(7, width=64, height=64, frames=17)
    video = D.render(spec)
    cov = T.latent_object_coverage(video)
    assert cov.shape == (5, 8, 8) and float(cov.min()) >= 0.0 and float(cov.max()) <= 1.0
    obj = (video.amax(0) - video.amin(0)) > 0.6                      # [17, 64, 64] object pixels
    assert 0 < int(obj[0].sum()) < 64 * 64 // 2
    # latent frame 0 <- video frame 0; latent frame f <- any of video frames 4f-3 .. 4f
    groups = [obj[:1]] + [obj[4 * f - 3: 4 * f + 1] for f in range(1, 5)]
    for f, g in enumerate(groups):
        assert float(cov[f].sum()) * 64 == pytest.approx(float(g.any(0).sum()), abs=1e-3)
        cx, cy = spec.objects[0].centre(0 if f == 0 else 4 * f)
        assert float(cov[f, int(min(cy, 63)) // 8, int(min(cx, 63)) // 8]) > 0.2  # the centre's cell
    with pytest.raises(ValueError, match="1 \\+ 4n frames"):
        T.latent_object_coverage(video[:, :16])


def test_object_weights_follow_the_stored_latent_order():
    from wan_core.demo import data as D

    seeds = D.training_seeds(12)
    specs = [D.clip_spec(s) for s in seeds]
    assert len({(s.frames, s.height, s.width) for s in specs}) > 1  # the stored order differs from the seeds'
    stored = [s for g in T._shape_groups(specs).values() for s in g]
    blob = {"seeds": seeds, "latents": [torch.zeros(16, (s.frames - 1) // 4 + 1, s.height // 8, s.width // 8)
                                        for s in stored]}
    weights = T.object_loss_weights(blob, 5.0)
    for spec, w in zip(stored, weights):
        assert torch.equal(w, 1.0 + 4.0 * T.latent_object_coverage(D.render(spec))[None])
    assert any(float(w.max()) > 3.0 for w in weights) and all(float(w.min()) == 1.0 for w in weights)
    # latents encoded at another two-object share render again at that share
    seeds = D.training_seeds(12, two_object_share=0.9)
    stored = [s for g in T._shape_groups([D.clip_spec(s, two_object_share=0.9) for s in seeds]).values() for s in g]
    assert sum(len(s.objects) == 2 for s in stored) > sum(len(s.objects) == 2 for s in specs)
    blob = {"seeds": seeds, "two_object_share": 0.9,
            "latents": [torch.zeros(16, (s.frames - 1) // 4 + 1, s.height // 8, s.width // 8) for s in stored]}
    for spec, w in zip(stored, T.object_loss_weights(blob, 5.0)):
        assert torch.equal(w, 1.0 + 4.0 * T.latent_object_coverage(D.render(spec))[None])
    blob["latents"][0] = torch.zeros(16, 1, 2, 2)
    with pytest.raises(RuntimeError, match="delete latents.pt"):
        T.object_loss_weights(blob, 5.0)


def test_dit_takes_the_threads_once_the_decoder_process_is_done(tmp_path):
    hook = T._ThreadsWhenAlone(str(tmp_path), threads=2)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # as run() sets it while the decoder's process shares the machine
        assert hook() is False and torch.get_num_threads() == 1
        (tmp_path / "vae_decoder_done.json").write_text("{}")
        assert hook() is False and torch.get_num_threads() == 2  # never an interrupt, now two threads
    finally:
        torch.set_num_threads(before)


def test_stages_that_run_alone_use_up_to_two_cores():
    assert T.DemoTrainConfig().threads == min(2, os.cpu_count() or 1)


def test_dit_precision_auto_follows_the_cpu(monkeypatch):
    monkeypatch.setattr(T, "native_bf16", lambda: True)
    assert T.dit_precision(T.DemoTrainConfig()) == "bf16"
    monkeypatch.setattr(T, "native_bf16", lambda: False)
    assert T.dit_precision(T.DemoTrainConfig()) == "fp32"
    assert T.dit_precision(T.DemoTrainConfig(dit_precision="bf16")) == "bf16"  # an explicit choice stays
    with pytest.raises(ValueError, match="dit_precision"):
        T.DemoTrainConfig(dit_precision="fp16")
    with pytest.raises(ValueError, match="dit_file_dtype"):
        T.DemoTrainConfig(dit_file_dtype="float16")


def test_native_bf16_reads_torchs_cpu_checks(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert T.native_bf16() is False
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert T.native_bf16() is True


def test_a_failing_compiled_dit_stage_goes_on_eager(tmp_path, monkeypatch):
    """Compiled blocks that fail during training (an inductor or C++ build error shows up at the first forward or
    backward): the stage says so, logs it and trains on eager from the last checkpoint to the same files."""
    import wan_core.memory as M

    def failing(model, **kw):
        def boom(*a, **k):
            raise RuntimeError("C++ compile failed (test)")
        for block in model.blocks:
            vars(block)["forward"] = boom
        return ""

    monkeypatch.setattr(M, "compile_blocks", failing)
    out = str(tmp_path / "run")
    summary = T.run(out, _tiny(dit_compile=True, parallel=False))
    assert summary["dit"]["steps"] == 2 and summary["dit"]["compiled"] is False
    assert os.path.exists(os.path.join(out, "dit.safetensors"))
    log = [json.loads(line) for line in open(os.path.join(out, "log.jsonl"), encoding="utf-8")]
    assert [r["compile_failed"] for r in log if "compile_failed" in r] == ["RuntimeError: C++ compile failed (test)"]


def test_command_line_flags_reach_the_recipe(monkeypatch, tmp_path):
    import argparse

    seen = []

    def fake_run(out, cfg):
        seen.append(cfg)
        return {}

    from wan_core.cli.parser import VAE_RECIPES, build_parser

    monkeypatch.setattr(T, "run", fake_run)
    ap = argparse.ArgumentParser()
    T.add_arguments(ap)
    # `python -m wan_core train-demo` builds its flags without importing torch: the same flags, the same recipes
    cli = build_parser()._subparsers._group_actions[0].choices["train-demo"]  # type: ignore[union-attr]
    flags = {a.option_strings[-1]: a.choices for a in ap._actions}
    assert {a.option_strings[-1]: a.choices for a in cli._actions} == flags
    assert VAE_RECIPES == tuple(T.VAE_RECIPES)
    T.main(cli.parse_args(["--out", str(tmp_path), "--precision", "fp32", "--dit-steps", "7", "--no-compile"]))
    T.main(ap.parse_args(["--out", str(tmp_path)]))
    assert (seen[0].dit_precision, seen[0].dit_steps) == ("fp32", 7)
    assert (seen[1].dit_precision, seen[1].dit_steps) == ("auto", T.DemoTrainConfig().dit_steps)
    assert seen[0].dit_compile is False is not seen[1].dit_compile  # --no-compile (given with the first call)
    assert seen[1].vae_phases == T.VAE_RECIPES["block-pca"]  # the shipped files' recipe is the default
    T.main(ap.parse_args(["--out", str(tmp_path), "--vae-recipe", "block-pca"]))
    T.main(ap.parse_args(["--out", str(tmp_path), "--vae-recipe", "reconstruction", "--vae-steps", "300"]))
    assert seen[2].vae_phases == T.VAE_RECIPES["block-pca"] and seen[2].vae_phases[0].pca_weight > 0
    assert seen[3].vae_phases[0].pca_weight == 0
    assert [p.steps for p in seen[3].vae_phases] == [200, 100]  # split in the recipe's proportions


def test_an_interrupted_vae_stage_resumes_to_the_weights_of_an_uninterrupted_one(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    monkeypatch.setattr(T, "CHECKPOINT_EVERY", 2)
    cfg = _tiny(vae_phases=(T.VAEPhase(steps=2, batch=1, frames=(5,), lr=1e-3),
                            T.VAEPhase(steps=2, batch=1, frames=(5,), lr=5e-4, clip=1.0, pca_weight=1.0)))
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    os.makedirs(a)
    os.makedirs(b)
    real = T._after_step

    def stop_after_the_first_checkpoint(out, stage, bar, step, *rest):
        real(out, stage, bar, step, *rest)
        if step == 1:
            raise KeyboardInterrupt

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same sums in the same order in both runs
    try:
        T.stage_vae(a, cfg)
        monkeypatch.setattr(T, "_after_step", stop_after_the_first_checkpoint)
        with pytest.raises(KeyboardInterrupt):
            T.stage_vae(b, cfg)
        assert not os.path.exists(os.path.join(b, "vae.safetensors"))
        monkeypatch.setattr(T, "_after_step", real)
        T.stage_vae(b, cfg)  # resumes from the step-2 checkpoint
    finally:
        torch.set_num_threads(threads)
    wa, wb = load_file(os.path.join(a, "vae.safetensors")), load_file(os.path.join(b, "vae.safetensors"))
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)  # the latent noise of steps 2-3 is what run a drew


def test_stages_stopped_after_their_last_checkpoint_finish_on_the_next_run(tmp_path, monkeypatch):
    """Stopped between the last step's checkpoint and the stage's file (the VAE stage's latent maps take a few
    seconds): the next run trains nothing and writes the file, with no final MSE to report."""
    monkeypatch.setattr(T, "CHECKPOINT_EVERY", 1)
    cfg = _tiny(vae_phases=(T.VAEPhase(steps=1, batch=1, frames=(5,), lr=1e-3, pca_weight=1.0),))
    out = str(tmp_path)
    real_save = T._save

    def stop_before_the_vae_file(tensors, path, metadata=None):
        if path.endswith("vae.safetensors"):
            raise KeyboardInterrupt
        real_save(tensors, path, metadata)

    monkeypatch.setattr(T, "_save", stop_before_the_vae_file)
    with pytest.raises(KeyboardInterrupt):
        T.stage_vae(out, cfg)
    assert os.path.exists(os.path.join(out, "vae_ckpt.pt")) and not os.path.exists(os.path.join(out, "vae.safetensors"))
    monkeypatch.setattr(T, "_save", real_save)
    T.stage_vae(out, cfg)
    assert load_vae(os.path.join(out, "vae.safetensors")).config == DEMO_VAE
    assert json.load(open(os.path.join(out, "summary.json"), encoding="utf-8"))["vae"]["final_mse"] is None
    # the decoder stage: the same stop, after its checkpoint at its last step
    before = os.path.getmtime(os.path.join(out, "vae.safetensors"))
    monkeypatch.setattr(T, "_save", stop_before_the_vae_file)
    with pytest.raises(KeyboardInterrupt):
        T.stage_vae_decoder(out, cfg)
    monkeypatch.setattr(T, "_save", real_save)
    T.stage_vae_decoder(out, cfg)
    done = json.load(open(os.path.join(out, T.DECODER_DONE), encoding="utf-8"))
    assert done["final_mse"] is None and os.path.getmtime(os.path.join(out, "vae.safetensors")) >= before


def test_decoder_stage_trains_behind_the_unfolded_latent_map(tmp_path):
    """With ``latent_map.safetensors`` beside the (mapped) VAE, the decoder stage gives what training the
    unmapped VAE and folding the map in afterwards gives, and leaves the encoder's ``conv1`` bit for bit."""
    from safetensors.torch import load_file, save_file

    from wan_core.vae.model import WanVAEModel

    torch.manual_seed(0)
    plain = WanVAEModel(DEMO_VAE).eval()
    with torch.no_grad():
        for name, p in plain.named_parameters():
            if name.endswith("gamma"):
                p.fill_(1.0)
    a = (torch.eye(16) + 0.3 * torch.randn(16, 16)).double()
    b = torch.randn(16).double()
    mapped = WanVAEModel(DEMO_VAE).eval()
    mapped.load_state_dict(plain.state_dict())
    T._fold_latent_map_(mapped, a, b)
    plain_dir, mapped_dir = tmp_path / "plain", tmp_path / "mapped"
    for d, model in ((plain_dir, plain), (mapped_dir, mapped)):
        d.mkdir()
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(d / "vae.safetensors"))
    save_file({"a": a, "b": b}, str(mapped_dir / T.LATENT_MAP))
    cfg = _tiny(decoder_steps=2, decoder_lr=1e-3, vae_crop=16)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        T.stage_vae_decoder(str(plain_dir), cfg)
        T.stage_vae_decoder(str(mapped_dir), cfg)
    finally:
        torch.set_num_threads(threads)
    trained = WanVAEModel(DEMO_VAE).eval()
    trained.load_state_dict(load_file(str(plain_dir / "vae.safetensors")))
    assert not torch.equal(trained.decoder.head[2].weight, plain.decoder.head[2].weight)  # it trained
    T._fold_latent_map_(trained, a, b)
    got, start = load_file(str(mapped_dir / "vae.safetensors")), mapped.state_dict()
    for name in ("conv1.weight", "conv1.bias"):
        assert torch.equal(got[name], start[name]), name
    # Adam's first steps move each weight by about +-lr, so a gradient within rounding of 0 may step either way:
    # compared as a whole, the two runs differ by a small fraction of what training moved
    names = [n for n in start if not n.startswith("conv1.")]
    want = torch.cat([trained.state_dict()[n].flatten() for n in names])
    diff = torch.cat([got[n].flatten() for n in names]) - want
    moved = want - torch.cat([start[n].flatten() for n in names])
    assert float(diff.norm()) < 0.05 * float(moved.norm()), (float(diff.norm()), float(moved.norm()))
