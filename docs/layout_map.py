"""Regenerate the module map of docs/design.md section 2 from the modules' own docstrings.

Every package and module of ``wan_core/`` and ``nodes/`` gets one line: its name, indented by depth, and the
first sentence of its docstring, shortened to fit one line. The map is written between the two marker
comments ``<!-- layout:begin -->`` and ``<!-- layout:end -->`` of docs/design.md; running the script twice
changes nothing the second time. The docstrings are read with ``ast`` (nothing is imported), so it runs in
well under a second.

    python docs/layout_map.py          # rewrite the map in docs/design.md
    python docs/layout_map.py --check  # exit 1 (and say why) if the map is out of date or a docstring is missing

``tests/test_layout_map.py`` runs the same check.
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs/design.md"
PACKAGES = ("wan_core", "nodes")
BEGIN = "<!-- layout:begin -->"
END = "<!-- layout:end -->"
NAME_WIDTH = 24  # the description column, as in the hand-written part of the map
LINE_WIDTH = 118  # docs/design.md wraps its prose at about this width
SKIPPED_DIRS = {"__pycache__"}

# A full stop that ends a sentence: followed by white space or the end, not an abbreviation's.
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\bal)(?<!\betc)(?<!\bvs)\.(?=\s|$)")
# A parenthesis (one level of nesting) that cites a doc section, a paper or a year: the first thing a too-long
# line can do without.
_PARENTHESIS = re.compile(r"\s*\((?:[^()]|\([^()]*\))*\)")
_CITES = re.compile(r"docs/|section|et al\.|report|Open-Sora|\b(?:19|20)\d\d\b")


@dataclass(frozen=True)
class Entry:
    """One line of the map: ``path`` relative to the repository root, ``depth`` 0 for a top package."""

    path: str
    depth: int
    label: str  # "dit/" or "model.py"
    summary: str | None  # None: no docstring (or no folder __init__.py)


def first_sentence(docstring: str) -> str:
    """The docstring's first sentence on one line, rst double backticks dropped (the map is a code block)."""
    paragraph = " ".join(docstring.strip().split("\n\n")[0].split())
    m = _SENTENCE_END.search(paragraph)
    sentence = paragraph[: m.start()] if m else paragraph.rstrip(".")
    return sentence.replace("``", "")


def shorten(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: citing parentheses dropped from the end first, then cut at the
    last clause boundary (``: ``, ``; ``, ``, ``) past half the width, else after a word with an ellipsis."""
    while len(text) > width:
        spans = [m for m in _PARENTHESIS.finditer(text) if _CITES.search(m.group())]
        if not spans:
            break
        last = spans[-1]
        text = text[: last.start()] + text[last.end():]
    if len(text) <= width:
        return text
    cut = text[: width - 1]
    for sep in (": ", "; ", ", "):
        at = cut.rfind(sep)
        if at > width // 2:
            return cut[:at]
    cut = cut[: cut.rfind(" ")]
    if cut.count("(") > cut.count(")"):  # no parenthesis left open
        cut = cut[: cut.rfind("(")].rstrip()
    return cut + " …"


def _docstring(path: Path) -> str | None:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))


def _walk(folder: Path, depth: int) -> list[Entry]:
    init = folder / "__init__.py"
    doc = _docstring(init) if init.is_file() else None
    rel = folder.relative_to(ROOT).as_posix()
    entries = [Entry(rel + "/", depth, folder.name + "/", first_sentence(doc) if doc else None)]
    children = sorted(p for p in folder.iterdir() if p.name not in SKIPPED_DIRS)
    for child in children:
        if child.is_dir() and any(child.rglob("*.py")):
            entries += _walk(child, depth + 1)
        elif child.suffix == ".py" and child.name != "__init__.py":
            doc = _docstring(child)
            entries.append(Entry(child.relative_to(ROOT).as_posix(), depth + 1, child.name,
                                 first_sentence(doc) if doc else None))
    return entries


def entries() -> list[Entry]:
    """Every package (a folder holding ``.py`` files) and module of ``PACKAGES``, depth first, by name."""
    out: list[Entry] = []
    for name in PACKAGES:
        out += _walk(ROOT / name, 0)
    return out


def problems(items: list[Entry]) -> list[str]:
    """Modules and packages whose ``__init__.py`` has no docstring to take the line from."""
    return [f"{e.path}: no docstring" for e in items if not e.summary and not _namespace(e)]


def namespace_packages(items: list[Entry]) -> list[str]:
    """Folders of modules without an ``__init__.py`` (implicit namespace packages): nothing to take a line from."""
    return [e.path for e in items if _namespace(e)]


def _namespace(e: Entry) -> bool:
    return e.path.endswith("/") and not (ROOT / e.path / "__init__.py").is_file()


def render(items: list[Entry]) -> str:
    """The map as a fenced code block, one line per entry."""
    lines = ["```"]
    for e in items:
        name = "  " * e.depth + e.label
        fallback = "(no __init__.py: a namespace package)" if _namespace(e) else "(no docstring)"
        summary = shorten(e.summary or fallback, LINE_WIDTH - max(NAME_WIDTH, len(name) + 1))
        lines.append(f"{name:<{NAME_WIDTH - 1}} {summary}".rstrip())
    lines.append("```")
    return "\n".join(lines)


def splice(document: str, block: str) -> str:
    """``document`` with everything between the markers replaced by ``block``."""
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise ValueError(f"docs/design.md needs the markers {BEGIN} and {END}, in this order")
    return document[: start + len(BEGIN)] + "\n" + block + "\n" + document[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if the map is out of date")
    args = parser.parse_args(argv)
    items = entries()
    for problem in problems(items):
        print(f"warning: {problem}", file=sys.stderr)
    for path in namespace_packages(items):
        print(f"note: {path} has no __init__.py, so no docstring to describe it", file=sys.stderr)
    current = DESIGN.read_text(encoding="utf-8")
    wanted = splice(current, render(items))
    if args.check:
        if wanted != current:
            print("docs/design.md: the layout map is out of date; run python docs/layout_map.py", file=sys.stderr)
            return 1
        return 0
    if wanted != current:
        DESIGN.write_text(wanted, encoding="utf-8")
        print("docs/design.md: layout map rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
