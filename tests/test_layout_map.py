"""docs/design.md's module map is what ``python docs/layout_map.py`` generates from the docstrings today."""
from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# wan_core/dit/ has no __init__.py (an implicit namespace package): listed, but with no docstring to show
KNOWN_NAMESPACE_PACKAGES = {"wan_core/dit/"}


def _load_generator():
    spec = importlib.util.spec_from_file_location("layout_map", ROOT / "docs" / "layout_map.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("layout_map", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


layout_map = _load_generator()


def test_every_module_has_a_docstring_to_describe_it():
    items = layout_map.entries()
    assert not layout_map.problems(items), "modules without a docstring:\n" + "\n".join(layout_map.problems(items))
    assert set(layout_map.namespace_packages(items)) <= KNOWN_NAMESPACE_PACKAGES, (
        "a package without __init__.py: add one with a docstring")


def test_the_map_in_docs_design_md_is_current():
    text = layout_map.DESIGN.read_text(encoding="utf-8")
    wanted = layout_map.splice(text, layout_map.render(layout_map.entries()))
    assert wanted == text, "docs/design.md's layout map is out of date: run python docs/layout_map.py"


def test_the_map_names_every_module_once():
    items = layout_map.entries()
    paths = [e.path for e in items]
    assert len(paths) == len(set(paths))
    on_disk = {p.relative_to(ROOT).as_posix() for name in layout_map.PACKAGES for p in (ROOT / name).rglob("*.py")
               if "__pycache__" not in p.parts and p.name != "__init__.py"}
    assert on_disk <= set(paths)
    for moved in ("wan_core/cli/", "wan_core/variants.py", "wan_core/i2v/", "wan_core/dit/moe.py",
                  "wan_core/dit/options.py", "wan_core/sampling/moe.py", "wan_core/sampling/first_frame.py",
                  "wan_core/cache/moe.py"):
        assert moved in paths


def test_regenerating_is_fast_and_idempotent():
    text = layout_map.DESIGN.read_text(encoding="utf-8")
    start = time.perf_counter()
    once = layout_map.splice(text, layout_map.render(layout_map.entries()))
    assert time.perf_counter() - start < 2.0
    assert layout_map.splice(once, layout_map.render(layout_map.entries())) == once


@pytest.mark.parametrize("doc, sentence", [
    ("One line. Then more.", "One line"),
    ("Spans\n  two lines, e.g. this; et al. too.\n\nNext paragraph.", "Spans two lines, e.g. this; et al. too"),
    ("``python -m wan_core``: the command line (``wan_core.cli``).",
     "python -m wan_core: the command line (wan_core.cli)"),
    ("Wan 2.1 settings", "Wan 2.1 settings"),
])
def test_first_sentence(doc, sentence):
    assert layout_map.first_sentence(doc) == sentence


def test_shorten_drops_citations_then_cuts_a_clause():
    assert layout_map.shorten("A thing (docs/design.md section 2) that does y", 30) == "A thing that does y"
    assert layout_map.shorten("Guidance: v = a (b - c), as a function of the loop", 30) == "Guidance: v = a (b - c)"
    assert layout_map.shorten("One long sentence without any clause boundary", 30) == "One long sentence without …"
    assert layout_map.shorten("Counts what it does (the canvas shows them)", 30) == "Counts what it does …"
    assert layout_map.shorten("short", 30) == "short"


def test_splice_needs_both_markers():
    with pytest.raises(ValueError):
        layout_map.splice("no markers here", "x")
    assert layout_map.splice(f"a\n{layout_map.BEGIN}\nold\n{layout_map.END}\nb", "new") == (
        f"a\n{layout_map.BEGIN}\nnew\n{layout_map.END}\nb")
