"""Prompt rewriting with a local LLM (Wan report section 4.5): the instructions the model sees, greedy and
seeded decoding, the answer cleaner, the fallback to the original prompt, the cache, the per-token callback and
the loading errors. The LLM is a tiny random Qwen2 written by ``tiny_llm`` (nothing is downloaded)."""
from __future__ import annotations

import json
import shutil
import warnings

import pytest
import torch

from wan_core.text.rewrite import (RewriterError, RewriteWarning, clean_rewritten_prompt, load_prompt_rewriter,
                                   resolve_language, rewrite_instructions)

from . import tiny_llm

PROMPT = "a cat on the moon"
FAST = dict(max_new_tokens=8)


@pytest.fixture(scope="module")
def llm_dir(tmp_path_factory):
    return tiny_llm.build_tiny_llm(tmp_path_factory.mktemp("llm") / "tiny-instruct")


@pytest.fixture
def rewriter(llm_dir):
    return load_prompt_rewriter(llm_dir)


def spy_generate(rewriter):
    """Wrap ``model.generate``: returns the list of input-id tensors it was called with."""
    calls = []
    real = rewriter.model.generate

    def generate(*args, **kwargs):
        calls.append(kwargs["input_ids"].clone())
        return real(*args, **kwargs)

    rewriter.model.generate = generate
    return calls


# ---------------------------------------------------------------- what the model is asked


def test_chat_prompt_holds_the_instructions_and_the_user_prompt(rewriter):
    calls = spy_generate(rewriter)
    rewriter.rewrite(PROMPT, **FAST)
    (ids,) = calls
    seen = rewriter.tokenizer.decode(ids[0])
    assert seen.startswith("<|im_start|>system\n") and seen.endswith("<|im_start|>assistant\n")
    assert rewrite_instructions("en") in seen
    assert f"<|im_start|>user\n{PROMPT}<|im_end|>" in seen
    # the rules of Wan report 4.5, in our words
    for phrase in ("Keep the meaning", "visual style", "sums up what happens", "natural motion", "in English"):
        assert phrase in seen, phrase


def test_instructions_order_style_summary_details():
    text = rewrite_instructions("en")
    assert text.index("visual style") < text.index("sums up") < text.index("the details")
    assert "Rewritten:" in text and text.count("Prompt:") == 2  # two example rewrites
    zh = rewrite_instructions("zh")
    assert "简体中文" in zh and "宇航员" in zh


def test_language_choice():
    assert resolve_language("a cat") == "en"
    assert resolve_language("一只猫在月球上") == "zh"
    assert resolve_language("一只猫", "en") == "en" and resolve_language("a cat", "zh") == "zh"
    with pytest.raises(ValueError, match="language"):
        resolve_language("a cat", "fr")


def test_plain_text_format_without_a_chat_template(rewriter):
    rewriter.tokenizer.chat_template = None
    text = rewriter.chat_text(PROMPT, language="zh")
    assert text.startswith(rewrite_instructions("zh")) and text.endswith(f"\n\nPrompt: {PROMPT}\nRewritten:")
    assert rewriter.rewrite(PROMPT, **FAST).strip()


def test_template_without_a_system_role_gets_the_instructions_in_the_user_turn(rewriter):
    rewriter.tokenizer.chat_template = tiny_llm.NO_SYSTEM
    text = rewriter.chat_text(PROMPT)
    assert "system" not in text.split("\n")[0]
    assert text.startswith("<|im_start|>user\n" + rewrite_instructions("en")) and f"Prompt: {PROMPT}" in text


# ---------------------------------------------------------------- decoding


def test_greedy_is_deterministic_and_ignores_the_seed(llm_dir):
    a = load_prompt_rewriter(llm_dir).rewrite(PROMPT, seed=1, **FAST)
    b = load_prompt_rewriter(llm_dir).rewrite(PROMPT, seed=2, **FAST)
    assert a == b and a and a != PROMPT


def test_seeded_sampling_is_reproducible_and_leaves_the_global_rng(rewriter):
    text = rewriter.chat_text(PROMPT)
    state = torch.get_rng_state()

    def run(seed):
        return rewriter.generate_text(text, seed=seed, temperature=1.0, top_p=1.0, max_new_tokens=12)

    first, again, other = run(3), run(3), run(4)
    assert first == again and first != other
    assert torch.equal(torch.get_rng_state(), state)


def test_top_p_keeps_the_most_likely_token(rewriter):
    text = rewriter.chat_text(PROMPT)
    greedy = rewriter.generate_text(text, max_new_tokens=6)
    assert rewriter.generate_text(text, seed=5, temperature=1.0, top_p=1e-6, max_new_tokens=6) == greedy


def test_bad_settings(rewriter):
    with pytest.raises(ValueError, match="empty"):
        rewriter.rewrite("   ")
    with pytest.raises(ValueError, match="temperature"):
        rewriter.rewrite(PROMPT, temperature=-1)
    with pytest.raises(ValueError, match="max_new_tokens"):
        rewriter.rewrite(PROMPT, max_new_tokens=0)


# ---------------------------------------------------------------- cleaning the answer


@pytest.mark.parametrize("raw, clean", [
    ("  A cat   walks\n\non the moon.  ", "A cat walks on the moon."),
    ("Rewritten prompt: A cat walks.", "A cat walks."),
    ("**Rewritten prompt:** A cat walks.", "A cat walks."),
    ("Prompt:\nA cat walks.", "A cat walks."),
    ("Sure! Here is the rewritten prompt:\n\n\"A cat walks.\"", "A cat walks."),
    ("Here's an expanded version: A cat walks.", "A cat walks."),
    ("“A cat walks.”", "A cat walks."),
    ("'A cat walks.'", "A cat walks."),
    ('"A cat" walks under "the moon"', '"A cat" walks under "the moon"'),
    ("```\nA cat walks.\n```", "A cat walks."),
    ("<think>The user wants a cat.\nLet me think.</think>\n\nA cat walks.", "A cat walks."),
    ("I should add motion.</think>A cat walks.", "A cat walks."),  # <think> was in the chat template
    ("<think>still thinking when the tokens ran out", ""),
    ("A cat walks.<|im_end|><|endoftext|>", "A cat walks."),
    ("<s> A cat walks.</s>", "A cat walks."),
    ("A cat walks.<end_of_turn>", "A cat walks."),
    ("A cat walks.\n\nNote: I added a walking motion.", "A cat walks."),
    ("A cat walks.\nUser: now a dog", "A cat walks."),
    ("改写后的提示词：一只猫在月球上行走。", "一只猫在月球上行走。"),
    ("好的，以下是改写结果：\n「一只猫在月球上行走。」", "一只猫在月球上行走。"),
    ("Realistic style: a cat walks.", "Realistic style: a cat walks."),  # a colon inside a prompt stays
    ("", ""),
    ("<|im_end|>", ""),
])
def test_clean_rewritten_prompt(raw, clean):
    assert clean_rewritten_prompt(raw) == clean


def test_clean_removes_the_tokenizers_own_special_tokens():
    assert clean_rewritten_prompt("[EOT]A cat walks.[EOT]", special_tokens=["[EOT]"]) == "A cat walks."


# ---------------------------------------------------------------- fallback, cache, callback


def test_nothing_usable_keeps_the_original_prompt_with_a_warning(rewriter):
    with torch.no_grad():
        rewriter.model.model.norm.weight.zero_()  # all logits equal: greedy picks id 0 = EOS at once
    calls = spy_generate(rewriter)
    with pytest.warns(RewriteWarning, match="original prompt"):
        assert rewriter.rewrite(PROMPT, **FAST) == PROMPT
    with pytest.warns(RewriteWarning):
        rewriter.rewrite(PROMPT, **FAST)  # a fallback is not cached: tried (and warned) again
    assert len(calls) == 2


def test_cache_hit_does_not_generate_again(rewriter):
    calls = spy_generate(rewriter)
    first = rewriter.rewrite(PROMPT, **FAST)
    assert rewriter.rewrite(PROMPT, **FAST) == first
    assert rewriter.rewrite(PROMPT, seed=99, **FAST) == first  # greedy: the seed is not part of the key
    assert rewriter.cached(PROMPT, **FAST) == first and len(calls) == 1
    rewriter.rewrite(PROMPT, max_new_tokens=9)  # other settings
    rewriter.rewrite(PROMPT, seed=1, temperature=0.8, **FAST)
    rewriter.rewrite(PROMPT, seed=2, temperature=0.8, **FAST)  # sampling: the seed is part of the key
    rewriter.rewrite(PROMPT, seed=2, temperature=0.8, **FAST)
    assert len(calls) == 4


def test_callback_runs_per_token_and_may_stop(rewriter):
    seen = []
    rewriter.rewrite(PROMPT, callback=lambda n, total: seen.append((n, total)), **FAST)
    assert seen == [(n, 8) for n in range(1, 9)]

    class Stop(Exception):
        pass

    def stop_at_3(n, total):
        if n == 3:
            raise Stop

    rewriter.clear_cache()
    calls = spy_generate(rewriter)
    with pytest.raises(Stop):
        rewriter.rewrite(PROMPT, callback=stop_at_3, **FAST)
    assert len(calls) == 1 and rewriter.cached(PROMPT, **FAST) is None


# ---------------------------------------------------------------- loading errors


def test_missing_folder_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such-llm"):
        load_prompt_rewriter(tmp_path / "no-such-llm")


def test_folder_without_config_is_named(tmp_path):
    (tmp_path / "weights-only").mkdir()
    (tmp_path / "weights-only" / "model.gguf").write_bytes(b"GGUF")
    with pytest.raises(RewriterError, match="weights-only.*no config.json"):
        load_prompt_rewriter(tmp_path / "weights-only")


def test_non_causal_lm_folder_is_named(tmp_path):
    from transformers import T5Config

    T5Config(d_model=8, num_layers=1, num_heads=1, d_kv=8, d_ff=8, vocab_size=32).save_pretrained(tmp_path / "t5")
    with pytest.raises(RewriterError, match=r"t5.*'t5' model, which is not a causal language model"):
        load_prompt_rewriter(tmp_path / "t5")


def test_unknown_architecture_is_named(tmp_path):
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text(json.dumps({"model_type": "not-a-real-model"}))
    with pytest.raises(RewriterError, match="odd.*config.json"):
        load_prompt_rewriter(tmp_path / "odd")


def test_missing_tokenizer_is_named(llm_dir, tmp_path):
    bare = tmp_path / "no-tokenizer"
    bare.mkdir()
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(llm_dir / name, bare / name)
    with pytest.raises(RewriterError, match="no-tokenizer.*no tokenizer files"):
        load_prompt_rewriter(bare)


def test_missing_weights_are_named(llm_dir, tmp_path):
    shutil.copytree(llm_dir, tmp_path / "no-weights")
    (tmp_path / "no-weights" / "model.safetensors").unlink()
    with pytest.raises(RewriterError, match="no-weights.*cannot load the model"):
        load_prompt_rewriter(tmp_path / "no-weights")


def test_dtype_and_device_options(llm_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no transformers deprecation about the dtype keyword
        rw = load_prompt_rewriter(llm_dir, dtype="bf16", device="cpu")
    assert rw.dtype == torch.bfloat16 and rw.device == torch.device("cpu")
    assert rw.rewrite(PROMPT, max_new_tokens=4)
    assert load_prompt_rewriter(llm_dir, dtype=torch.float16).dtype == torch.float16
    assert load_prompt_rewriter(llm_dir).dtype == torch.float32  # auto on the CPU
    with pytest.raises(ValueError, match="dtype"):
        load_prompt_rewriter(llm_dir, dtype="int4")
