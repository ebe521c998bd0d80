"""The demo model's VACE branch: initialisation, training data, the shipped file and what it does."""
import pytest
import torch

from wan_core import load_dit
from wan_core.demo import builtin_paths, data as D, demo_vace_dit_file, load_demo_models
from wan_core.demo.score import colour_masks, score_clip, track
from wan_core.demo.vace_branch import DEMO_VACE_LAYERS, VACE_PREFIXES, vace_dit_from
from wan_core.demo.vace_tasks import colour_patch, silhouette_video, track_centres
from wan_core.demo.vace_train import VaceTrainConfig, VaceTrainDataset, collate_vace, control_contexts


@pytest.fixture(scope="module")
def demo():
    return load_demo_models()


def _inputs(seed=0, frames=5):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 16, frames, 8, 8, generator=g)
    ctx = [torch.randn(6, 64, generator=g), torch.randn(9, 64, generator=g)]
    vace = torch.randn(2, 96, frames, 8, 8, generator=g)
    return x, torch.tensor([900.0, 300.0]), ctx, vace


def test_a_fresh_branch_adds_nothing_and_copies_its_main_blocks(demo):
    dit = demo[0]
    model = vace_dit_from(dit)
    assert model.config.vace_layers == DEMO_VACE_LAYERS == (0, 2, 4)
    x, t, ctx, vace = _inputs()
    with torch.no_grad():
        torch.testing.assert_close(model(x, t, ctx, vace_context=vace), dit(x, t, ctx), rtol=1e-5, atol=1e-5)
    for j, layer in enumerate(DEMO_VACE_LAYERS):
        torch.testing.assert_close(model.vace_blocks[j].ffn[0].weight, dit.blocks[layer].ffn[0].weight.float())
        assert not model.vace_blocks[j].after_proj.weight.any()


def test_silhouettes_patches_and_track_centres():
    spec = D.clip_spec(D.TRAIN_SEED_LIMIT + 11, width=64, height=64, frames=9, caption="a green square moving up")
    sil = silhouette_video(spec)
    assert sil.shape == (3, 9, 64, 64) and sil.min() == -1 and sil.max() == 1
    inside = (sil[0] > 0).float()  # [T, H, W]: where the clip's object is
    detected = colour_masks(D.render(spec))["green"]  # the detector's pixels of the clip's object
    overlap = (inside.bool() & detected).sum() / (inside.bool() | detected).sum()
    assert overlap > 0.9, overlap
    found, (dx, dy), _ = track(inside.bool())
    assert found and dy < 0 and abs(dx) < 0.5
    cover = (sil[0] + 1) / 2  # soft edges: the coverage-weighted centroid is the centre (detector coordinates)
    for axis, coords in ((0, torch.arange(64.0).view(1, 1, 64)), (1, torch.arange(64.0).view(1, 64, 1))):
        c = (cover * coords).flatten(1).sum(1) / cover.flatten(1).sum(1)
        torch.testing.assert_close(c, track_centres(spec)[:, axis], atol=0.02, rtol=0)
    patch = colour_patch("red", 32, 48)
    assert patch.shape == (3, 32, 48) and torch.equal(patch[:, 5, 7], torch.tensor(D.COLOURS["red"]) * 2 - 1)
    with pytest.raises(ValueError, match="colour 'pink'"):
        colour_patch("pink", 8, 8)


def test_control_contexts_equal_the_official_recipe_and_the_dataset_tasks(demo):
    from wan_core.vace import vace_context

    _, vae, _ = demo
    spec = D.clip_spec(3, width=64, height=64, frames=9, two_object_share=0.0)
    sil = silhouette_video(spec)[None]
    plain = vace_context(vae, size=(9, 64, 64)).context[0]
    official = vace_context(vae, sil).context
    ours = control_contexts(vae, plain, sil)
    assert ((ours - official).norm() / official.norm()) < 1e-4
    # a two-item blob: every task yields a latent of its own length (reference: one frame in front)
    z = torch.randn(16, 3, 8, 8)
    ref = {c: torch.full((96, 4, 8, 8), float(i)) for i, c in enumerate(D.COLOURS)}
    blob = {"latents": [z, z], "captions": ["a red circle moving left"] * 2, "control": [ours[0]] * 2,
            "plain": plain, "reference": ref, "ref_latent": {c: r[:16, :1] for c, r in ref.items()},
            "embeddings": {c: torch.zeros(6, 64) for c in ["a red circle moving left"]}, "uncond": [torch.zeros(1, 64)]}
    ds = VaceTrainDataset(blob, VaceTrainConfig(prompt_swap=0.0, caption_dropout=0.0, items_per_clip=20))
    seen = set()
    for i in range(len(ds)):
        lat, text, vace = ds[i]
        assert tuple(lat.shape[1:]) == ds.shapes[i] == tuple(vace.shape[1:])
        if lat.shape[1] == 4:  # reference: the red patch's latent, then the clip
            assert torch.equal(lat[:, :1], ref["red"][:16, :1]) and torch.equal(lat[:, 1:], z)
            seen.add("reference")
        else:
            seen.add("control" if torch.equal(vace, ours[0]) else "plain")
    assert seen == {"control", "reference", "plain"}
    latents, batch = collate_vace([ds[0], ds[0]])
    assert latents.shape[0] == 2 and batch.vace.shape[0] == 2 and len(batch.to("cpu").text) == 2


def test_the_shipped_branch_is_small_and_loads_every_way(tmp_path):
    from safetensors import safe_open

    path = builtin_paths()["vace"]
    assert path.stat().st_size <= 8 * 2 ** 20
    with safe_open(str(path), "pt") as f:
        assert all(k.startswith(VACE_PREFIXES) for k in f.keys())
        assert f.get_tensor("vace_patch_embedding.weight").dtype == torch.float16
    dit = load_demo_models(vace=True)[0]
    assert dit.config.vace_layers == (0, 2, 4) and dit.config.vace_in_dim == 96
    assert dit.head.head.weight.dtype == torch.float32 and dit.vace_blocks[0].after_proj.weight.any()
    combined = demo_vace_dit_file(tmp_path)
    assert demo_vace_dit_file(tmp_path) == combined  # written once
    again = load_dit(combined, dtype=torch.float32)  # VACE detected from the keys, text_len from the header
    assert again.config.vace_layers == (0, 2, 4) and again.config.text_len == dit.config.text_len
    x, t, ctx, vace = _inputs(1)
    with torch.no_grad():
        torch.testing.assert_close(again(x, t, ctx, vace_context=vace), dit(x, t, ctx, vace_context=vace))


@pytest.mark.slow  # three 20-step generations and streamed VAE encodes: ~20 s alone on 2 cores, more when shared
def test_the_control_track_and_the_reference_colour_win_over_the_prompt():
    # the first case of each of vace_eval's experiments (held-out seeds, the demo's sampler settings)
    from wan_core.demo.vace_eval import control_cases, generate, reference_cases
    from wan_core.vace import vace_context

    dit, vae, te = load_demo_models(vace=True)
    prompt, spec = control_cases(1)[0]
    ctx = vace_context(vae, silhouette_video(spec)[None]).context
    controlled = generate(dit, vae, te, prompt, spec.seed, ctx, 1.0)
    assert score_clip(controlled, spec.caption).followed and not score_clip(controlled, prompt).followed
    plain = generate(dit, vae, te, prompt, spec.seed, ctx, 0.0)
    assert score_clip(plain, prompt).followed  # scale 0: the demo DiT, which follows the prompt
    prompt, colour, seed = reference_cases(1)[0]
    ref = vace_context(vae, None, None, [[colour_patch(colour, 64, 64)]], size=(17, 64, 64))
    video = generate(dit, vae, te, prompt, seed, ref.context, 2.0, ref.ref_frames)
    assert video.shape == (3, 17, 64, 64) and track(colour_masks(video)[colour])[0]
