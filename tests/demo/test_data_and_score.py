"""The synthetic data of the demo model and the prompt-following detector."""
import pytest
import torch

from wan_core.demo import data as D
from wan_core.demo.score import score_clip, score_clips
from wan_core.train.bucket_sampler import BucketSampler


def test_clips_are_deterministic_and_valid():
    a, cap_a = D.make_clip(7)
    b, cap_b = D.make_clip(7)
    assert cap_a == cap_b and torch.equal(a, b)
    assert not torch.equal(a, D.make_clip(8)[0]) or cap_a != D.make_clip(8)[1]
    for seed in range(40):
        spec = D.clip_spec(seed)
        assert (spec.frames - 1) % 4 == 0 and spec.width % 16 == 0 and spec.height % 16 == 0
        assert D.parse_caption(spec.caption) == [(o.colour, o.shape, o.direction) for o in spec.objects]
    for seed in range(6):
        spec = D.clip_spec(seed)
        video = D.render(spec)
        assert video.shape == (3, spec.frames, spec.height, spec.width)
        assert video.min() >= -1 and video.max() <= 1


def test_training_set_gives_the_bucket_sampler_several_shapes():
    specs = [D.clip_spec(s) for s in D.training_seeds(120)]
    shapes = [((s.frames - 1) // 4 + 1, s.height // 8, s.width // 8) for s in specs]
    assert len(set(shapes)) >= 4
    sampler = BucketSampler(shapes, batch_size=4, seed=0)
    for batch in sampler.batches():
        assert len({shapes[i] for i in batch}) == 1
    assert {len(s.objects) for s in specs} == {1, 2}
    assert len({o.colour for s in specs for o in s.objects}) >= 4


@pytest.mark.parametrize("share", [0.2, 0.5])
def test_two_object_share_sets_the_training_mix_and_keeps_the_held_out_prompts_out(share):
    seeds = D.training_seeds(2000, two_object_share=share)
    specs = [D.clip_spec(s, two_object_share=share) for s in seeds]
    two = sum(len(s.objects) == 2 for s in specs) / len(specs)
    assert abs(two - share) < 0.04, two
    assert not {s.caption for s in specs} & set(D.HELD_OUT_TWO_OBJECT)
    # the default mix is the data module's, whatever share was asked for before
    default = [D.clip_spec(s) for s in D.training_seeds(2000)]
    assert abs(sum(len(s.objects) == 2 for s in default) / 2000 - D.TWO_OBJECT_SHARE) < 0.04


def test_held_out_set_is_disjoint_from_training():
    train_captions = {D.clip_spec(s).caption for s in D.training_seeds(1500)}
    held_prompts = [p for p, _ in D.HELD_OUT]
    assert len(D.HELD_OUT) == len(set(D.HELD_OUT)) == 40
    for p in D.HELD_OUT_TWO_OBJECT:
        assert " and " in p and p not in train_captions
    assert all(seed >= D.TRAIN_SEED_LIMIT for _, seed in D.HELD_OUT)
    assert max(D.training_seeds(1500)) < D.TRAIN_SEED_LIMIT
    # every single-object prompt of the grammar is evaluated (with an unseen seed)
    singles = [p for p in held_prompts if " and " not in p]
    assert len(singles) == len(D.COLOURS) * len(D.SHAPES) * len(D.DIRECTIONS)


def test_more_held_out_seeds_stay_outside_training_and_keep_the_first_set():
    pairs = D.held_out(3)
    assert pairs[: len(D.HELD_OUT)] == D.HELD_OUT and len(pairs) == 3 * len(D.HELD_OUT)
    assert len({s for _, s in pairs}) == len(pairs)                     # every pair its own seed
    assert min(s for _, s in pairs) >= D.TRAIN_SEED_LIMIT
    assert [p for p, _ in pairs[len(D.HELD_OUT):2 * len(D.HELD_OUT)]] == [p for p, _ in D.HELD_OUT]
    with pytest.raises(ValueError, match="seeds_per_prompt"):
        D.held_out(0)


def test_parse_caption_rejects_other_text_with_the_valid_words():
    with pytest.raises(ValueError, match="unknown colour 'purple'"):
        D.parse_caption("a purple circle moving left")
    with pytest.raises(ValueError, match="is not 'a <colour> <shape> moving <direction>'"):
        D.parse_caption("a cat walking")


def test_detector_scores_the_generators_own_clips_fully():
    videos, prompts = zip(*(D.make_clip(s) for s in range(12)))
    score = score_clips(videos, prompts)
    assert score.followed == 1.0
    singles = score.subset(1)
    assert len(singles.clips) >= 5 and singles.followed_with_shape == 1.0


@pytest.mark.parametrize("prompt", ["a red circle moving left", "a blue square moving up",
                                    "a yellow circle moving down and a green square moving right"])
def test_detector_follows_a_prompted_clip_and_misses_wrong_ones(prompt):
    video, caption = D.make_clip(D.TRAIN_SEED_LIMIT + 3, caption=prompt)
    assert caption == prompt
    assert score_clip(video, prompt).followed
    parsed = D.parse_caption(prompt)
    colour, shape, direction = parsed[0]
    other_colour = next(c for c in D.COLOURS if c not in {p[0] for p in parsed})
    opposite = {"left": "right", "right": "left", "up": "down", "down": "up"}[direction]
    wrong_colour = prompt.replace(f"a {colour} ", f"a {other_colour} ", 1)
    wrong_direction = prompt.replace(f"moving {direction}", f"moving {opposite}", 1)
    assert not score_clip(video, wrong_colour).followed
    assert not score_clip(video, wrong_direction).followed
    assert not score_clip(video.flip(1), prompt).followed  # played backwards


def test_detector_misses_a_static_or_empty_clip():
    video, prompt = D.make_clip(3, caption="a green square moving right")
    still = video[:, :1].expand_as(video)
    assert not score_clip(still, prompt).followed
    background = torch.full_like(video, -0.6)
    result = score_clip(background, prompt)
    assert not result.followed and not result.objects[0].found
