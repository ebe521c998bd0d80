"""Prompt cleaning before tokenisation, as the official Wan text pipeline does (docs/wan_spec.md section 4.1).

ftfy text repair when the optional ``ftfy`` package is installed, HTML-unescape twice, strip, collapse
whitespace runs to one space.
"""
from __future__ import annotations

import html
import re

_WHITESPACE = re.compile(r"\s+")
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
    fix = _ftfy() if use_ftfy else None
    if fix is not None:
        text = fix(text)
    text = html.unescape(html.unescape(text)).strip()
    return _WHITESPACE.sub(" ", text).strip()


__all__ = ["clean_prompt"]
