"""Prompt cleaning before tokenisation, as the official Wan text pipeline does (docs/wan_spec.md section 4.1).

ftfy text repair when the optional ``ftfy`` package is installed, HTML-unescape twice, strip, collapse
whitespace runs to one space. ``prompt_problem`` / ``check_prompt`` are the one check every entry point (the
command line, the text-encode node's validation and execution, the encoder itself) runs on user text: a
Python ``str`` can hold lone UTF-16 surrogates (undecodable bytes in ``sys.argv`` arrive as U+DC80..U+DCFF,
and JSON ``"\ud800"`` decodes to one), which are not Unicode text and crash SentencePiece.
"""
from __future__ import annotations

import html
import re

_WHITESPACE = re.compile(r"\s+")
_SURROGATE = re.compile("[\ud800-\udfff]")
_ftfy_fix = None
_ftfy_checked = False


def _ftfy():
    global _ftfy_fix, _ftfy_checked
    if not _ftfy_checked:
        _ftfy_checked = True
        try:
            import ftfy  # optional: repairs mojibake such as "cafÃ©"

            _ftfy_fix = ftfy.fix_text
        except ImportError:
            _ftfy_fix = None
    return _ftfy_fix


def clean_prompt(text: str, use_ftfy: bool = True) -> str:
    """The prompt as the encoder sees it: ``"  a &amp;amp; b\\n"`` -> ``"a & b"``.

    ``use_ftfy``: apply ``ftfy.fix_text`` first when ftfy is installed (it is optional).
    """
    if not isinstance(text, str):
        raise TypeError(f"a prompt must be a str, got {type(text).__name__}")
    bad = _invalid_unicode(text, "prompt")
    if bad:
        raise ValueError(bad)
    fix = _ftfy() if use_ftfy else None
    if fix is not None:
        text = fix(text)
    text = html.unescape(html.unescape(text)).strip()
    return _WHITESPACE.sub(" ", text).strip()


def _invalid_unicode(text: str, name: str) -> str | None:
    m = _SURROGATE.search(text)
    if m is None:
        return None
    return (f"{name}: contains invalid Unicode (a lone surrogate U+{ord(m.group()):04X} at character {m.start()}), "
            f"e.g. bytes that are not UTF-8 in a shell argument or a bad \\u escape in JSON; re-type the text or "
            f"save it as UTF-8")


def prompt_problem(text, name: str = "prompt", allow_empty: bool = False) -> str | None:
    """One line saying what is wrong with a user prompt, or None when it can be encoded.

    Refused: a non-string, invalid Unicode (lone surrogates), and (unless ``allow_empty``, as for a negative
    prompt) text that is empty once cleaned. ``name`` is the input or flag the message starts with.
    """
    if not isinstance(text, str):
        return f"{name}: expected text, got {type(text).__name__}"
    bad = _invalid_unicode(text, name)
    if bad:
        return bad
    if not allow_empty and not clean_prompt(text, use_ftfy=False):
        return f"{name}: the prompt is empty; describe the video to generate"
    return None


def check_prompt(text, name: str = "prompt", allow_empty: bool = False) -> str:
    """``text`` unchanged when ``prompt_problem`` finds nothing wrong; otherwise ``ValueError`` with its message."""
    problem = prompt_problem(text, name, allow_empty)
    if problem:
        raise ValueError(problem)
    return text


__all__ = ["check_prompt", "clean_prompt", "prompt_problem"]
