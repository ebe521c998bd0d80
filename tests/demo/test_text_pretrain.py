"""Grounding pretraining of the demo's text encoder: a reader that sees the token states without positions (as
the DiT's cross-attention does) learns which colour moves which way only once the encoder has been trained."""
import torch

from wan_core.demo import data as D
from wan_core.demo import text_pretrain as G
from wan_core.demo.model import DEMO_TEXT_ENCODER
from wan_core.demo.train import train_tokenizer
from wan_core.text.encoder import TextEncoder, build_umt5
from wan_core.text.tokenizer import SentencePieceTokenizer


def _random_encoder(seed: int = 1) -> TextEncoder:
    torch.manual_seed(seed)
    model = build_umt5(DEMO_TEXT_ENCODER, device="cpu")
    return TextEncoder(model, SentencePieceTokenizer(train_tokenizer()), DEMO_TEXT_ENCODER, cache_size=0)


def test_targets_name_each_colours_shape_and_direction_or_its_absence():
    shape, direction = G.grounding_targets("a red circle moving left and a blue square moving up")
    colours = list(D.COLOURS)
    expect_shape = {"red": 1 + D.SHAPES.index("circle"), "blue": 1 + D.SHAPES.index("square")}
    expect_dir = {"red": 1 + list(D.DIRECTIONS).index("left"), "blue": 1 + list(D.DIRECTIONS).index("up")}
    for i, c in enumerate(colours):
        assert shape[i] == expect_shape.get(c, 0) and direction[i] == expect_dir.get(c, 0), c


def test_training_captions_leave_the_held_out_prompts_out():
    singles, pairs = G.training_captions()
    assert len(singles) == len(D.COLOURS) * len(D.SHAPES) * len(D.DIRECTIONS)
    assert len(pairs) == len(singles) * (len(singles) - len(D.SHAPES) * len(D.DIRECTIONS)) - len(D.HELD_OUT_TWO_OBJECT)
    assert not set(pairs) & set(D.HELD_OUT_TWO_OBJECT)
    assert all(len(D.parse_caption(p)) == 2 for p in pairs)


def test_only_a_trained_encoder_lets_a_position_free_reader_bind_colours_to_directions():
    cfg = G.GroundingConfig(steps=600, seed=3)
    frozen = G.pretrain_grounding(_random_encoder(), G.GroundingConfig(steps=600, seed=3, train_encoder=False))
    te = _random_encoder()
    before = {k: v.clone() for k, v in te.model.state_dict().items()}
    trained = G.pretrain_grounding(te, cfg)
    # single objects need no binding: both readers get them
    assert frozen["accuracy_train_singles"] > 0.9 and trained["accuracy_train_singles"] == 1.0
    # two objects: the random encoder's states mix both phrases, the trained one's do not; the held-out pairs
    # were never trained on
    assert frozen["accuracy_train_pairs"] < 0.6 and frozen["accuracy_held_out_pairs"] <= 0.5, frozen
    assert trained["accuracy_train_pairs"] > 0.95 and trained["accuracy_held_out_pairs"] >= 7 / 8, trained
    assert any(not torch.equal(v, te.model.state_dict()[k]) for k, v in before.items())
    assert not any(p.requires_grad for p in te.model.parameters()) and not te.model.training  # frozen after
