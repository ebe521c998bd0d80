"""One check for user prompts (``wan_core.text.prompt``): empty text and invalid Unicode (lone surrogates, which
a Python str can hold and SentencePiece cannot take) are refused with a one-line message, everywhere."""
from __future__ import annotations

import json

import pytest

from wan_core.text.prompt import check_prompt, clean_prompt, prompt_problem

ARGV_UNDECODABLE = b"a fox \xff".decode("utf-8", "surrogateescape")  # what sys.argv holds for non-UTF-8 bytes
JSON_LONE = json.loads('"a fox \\ud800 in snow"')  # what /prompt's JSON decoder gives


@pytest.mark.parametrize("text, where", [(ARGV_UNDECODABLE, "U+DCFF at character 6"),
                                         (JSON_LONE, "U+D800 at character 6"),
                                         ("\udfff", "U+DFFF at character 0")])
def test_lone_surrogates_are_refused_with_where_they_are(text, where):
    problem = prompt_problem(text, "positive")
    assert problem.startswith("positive: contains invalid Unicode") and where in problem and "\n" not in problem
    with pytest.raises(ValueError, match="invalid Unicode"):
        check_prompt(text)
    with pytest.raises(ValueError, match="invalid Unicode"):
        clean_prompt(text)  # the encoder's own cleaning refuses it too, for Python API callers


@pytest.mark.parametrize("text", ["", "   ", "\n\t", "&nbsp;"])
def test_empty_prompts_are_refused_unless_allowed(text):
    assert "the prompt is empty" in prompt_problem(text, "--prompt")
    assert prompt_problem(text, "--negative-prompt", allow_empty=True) is None


@pytest.mark.parametrize("text", ["a fox", "狐狸在雪地里奔跑", "emoji \U0001F98A ok", "x\x00y", "caf&eacute;"])
def test_valid_text_passes_unchanged(text):
    assert prompt_problem(text) is None and check_prompt(text) is text


def test_non_text_is_refused():
    assert "expected text, got int" in prompt_problem(3)


def test_the_encoder_refuses_instead_of_crashing_inside_sentencepiece():
    """Before: ``RuntimeError: Unable to cast Python instance of type <class 'str'> to C++ type`` from pybind."""
    from wan_core.demo import tiny_random_models

    _dit, _vae, te = tiny_random_models(seed=0)
    with pytest.raises(ValueError, match="invalid Unicode"):
        te.encode([JSON_LONE])
