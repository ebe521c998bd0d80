"""The shipped demo model: files, public loaders, a short generation."""
import torch

from wan_core import load_dit, load_text_encoder, load_vae
from wan_core.demo import DEMO_DEFAULTS, builtin_paths
from wan_core.demo.model import DEMO_DIT, DEMO_TEXT_ENCODER, DEMO_VAE


def test_shipped_files_are_small_and_load_through_the_public_loaders():
    paths = builtin_paths()
    assert set(paths) == {"dit", "vae", "text_encoder", "vace"}
    assert sum(p.stat().st_size for p in paths.values()) <= 25 * 2 ** 20
    dit = load_dit(paths["dit"])
    assert dit.config.replace(name="x") == DEMO_DIT.replace(name="x")  # incl. text_len 32 from the header
    vae = load_vae(paths["vae"])
    assert vae.config == DEMO_VAE
    te = load_text_encoder(paths["text_encoder"])
    assert te.config.d_model == DEMO_TEXT_ENCODER.d_model and te.config.num_layers == DEMO_TEXT_ENCODER.num_layers
    # the embedded word tokenizer: one token per caption word, then EOS
    ids, _ = te.tokenize(["a red circle moving left"])
    assert ids.shape[1] == 6 and int(ids[0, -1]) == te.tokenizer.eos_id
    emb = te.encode(["a red circle moving left"])[0]
    assert emb.shape == (6, DEMO_TEXT_ENCODER.d_model) and torch.isfinite(emb).all()


def test_a_short_generation_with_the_demo_model_runs():
    from wan_core.demo import load_demo_models
    from wan_core.demo.evaluate import generation_config
    from wan_core.pipeline import WanPipeline

    dit, vae, te = load_demo_models()
    cfg = generation_config("a blue square moving right", seed=1, steps=3, frames=9)
    with torch.inference_mode():
        out = WanPipeline(dit, vae, te)(cfg)
    assert out.video.shape == (1, 3, 9, DEMO_DEFAULTS.height, DEMO_DEFAULTS.width)
    assert torch.isfinite(out.video).all() and out.video.std() > 0.05


def test_the_shipped_text_encoder_ties_each_colour_to_its_direction():
    # a reader that sees the frozen states without positions (as the DiT does) answers the held-out two-object
    # prompts, never trained on; on the random encoder shipped before the grounding stage it answered 1 of 8
    from wan_core.demo.text_pretrain import GroundingConfig, pretrain_grounding

    te = load_text_encoder(builtin_paths()["text_encoder"], dtype=torch.float32, cache_size=0)
    report = pretrain_grounding(te, GroundingConfig(steps=600, train_encoder=False))
    assert report["accuracy_held_out_pairs"] >= 7 / 8 and report["accuracy_train_pairs"] > 0.95, report


def test_the_fp16_demo_dit_computes_in_fp32_on_cpu():
    # stored fp16 (half the bytes); every demo entry point upcasts on CPU, where fp16 matmuls are slow
    from wan_core.cli.models import demo_files, load_models
    from wan_core.cli.parser import build_parser
    from wan_core.cli.request import resolve
    from wan_core.demo import load_demo_models

    assert load_dit(builtin_paths()["dit"]).head.head.weight.dtype == torch.float16  # as stored, if asked so
    assert load_demo_models()[0].head.head.weight.dtype == torch.float32
    request = resolve(build_parser().parse_args(["generate", "--prompt", "a red circle moving left", "--out", "x.mp4"]))
    dit = load_models(request, torch.device("cpu"), files=demo_files())[0]
    assert dit.head.head.weight.dtype == torch.float32
    request = resolve(build_parser().parse_args(["generate", "--prompt", "a", "--out", "x.mp4", "--dtype", "bf16"]))
    dit = load_models(request, torch.device("cpu"), files=demo_files())[0]
    assert dit.head.head.weight.dtype == torch.bfloat16  # an explicit choice stays


def test_sizes_outside_training_get_one_note_line(monkeypatch, capsys, tmp_path):
    """The CLI says in one line, before loading, that the demo model never saw 832x480 at 201 frames."""
    from wan_core.cli import main
    from wan_core.cli.errors import UsageError
    from wan_core.demo.data import FRAME_COUNTS, SIZES, untrained_size_note

    assert all(untrained_size_note(w, h, f) is None for w, h in SIZES for f in FRAME_COUNTS)
    assert untrained_size_note(DEMO_DEFAULTS.width, DEMO_DEFAULTS.height, DEMO_DEFAULTS.frames) is None

    def stop():
        raise UsageError("stopped before loading")

    monkeypatch.setattr("wan_core.cli.models.demo_files", stop)
    for size, noted in ((("832", "480", "201"), True), (("64", "64", "17"), False), (("64", "64", "33"), True)):
        code = main(["generate", "--preset", "demo", "--prompt", "a red circle moving left", "--out",
                     str(tmp_path / "x.webp"), "--width", size[0], "--height", size[1], "--frames", size[2]])
        err = capsys.readouterr().err
        assert code == 2 and "stopped before loading" in err
        notes = [line for line in err.splitlines() if "demo model was trained at" in line]
        assert len(notes) == (1 if noted else 0), err
        if noted:
            assert f"{size[0]}x{size[1]}, {size[2]} frames is outside that" in notes[0]
