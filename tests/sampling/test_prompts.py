"""The default negative prompt is the official one (docs/wan_spec.md section 6.2, ``sample_neg_prompt``)."""
from __future__ import annotations

import re
from pathlib import Path

from wan_core.sampling import DEFAULT_NEGATIVE_PROMPT

# The spec's line (docs/wan_spec.md section 6.2), kept verbatim in a data file beside this test.
SPEC_LINE = Path(__file__).resolve().parent / "data" / "spec_negative_prompt.txt"


def test_negative_prompt_equals_the_spec_text():
    match = re.search(r"Default negative prompt \(exact\): `([^`]+)`", SPEC_LINE.read_text(encoding="utf-8"))
    assert match is not None, "the spec's negative prompt line was not found"
    assert DEFAULT_NEGATIVE_PROMPT == match.group(1)


def test_negative_prompt_shape():
    items = DEFAULT_NEGATIVE_PROMPT.split("，")  # full-width comma separated, no spaces, no ASCII commas
    assert items[0] == "色调艳丽" and items[-1] == "倒着走"
    assert len(items) == 28 and all(items)  # the README English rendering lists 28 items
    assert "," not in DEFAULT_NEGATIVE_PROMPT and not any(ch.isspace() for ch in DEFAULT_NEGATIVE_PROMPT)
