"""Every reference to a project document resolves inside the repository.

Code and docs cite specs as ``docs/<file>.md section N`` (or ``sections N, M-P``). The scan checks that each
cited file exists under ``docs/`` and that each cited section number is a heading of that file (``## 6.``,
``### 6.1``), and it rejects the forms that point outside the repository: bare spec names
(``wan_spec.md 4.1``, ``DESIGN.md``), ``spec 6.2``, the team's ``../shared`` folder, seed documents and the
old ``keys/`` folder (the key lists are test data under ``tests/<area>/data/``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED_SUFFIXES = (".py", ".js", ".md", ".json", ".toml")
SKIPPED_DIRS = {".git", "__pycache__", ".ruff_cache", ".mypy_cache", ".pytest_cache", "node_modules", ".venv",
                "venv", ".ci-venv", "build", "dist"}
THIS_FILE = Path(__file__).resolve()

_NUM = r"\d+(?:\.\d+)*"
# docs/<name>.md, optionally quoted, then optionally "section(s)" and a list/range of section numbers
DOC_REF = re.compile(
    rf"(?<![\w/.-])docs/(?P<name>[\w.-]+?\.md)[`'\"*]*"
    rf"(?:\s+(?:sections?\s+)?(?P<nums>{_NUM}(?:[ \t]*(?:,|and|or|-|–|/)[ \t]*(?:sections?\s+)?{_NUM})*))?"
)
_NUM_RE = re.compile(_NUM)
HEADING = re.compile(rf"^#{{1,6}}\s+({_NUM})\.?(?:\s|$)", re.MULTILINE)
# a repository path to test data named in prose
DATA_PATH = re.compile(r"(?<![\w/.-])(tests/[\w-]+/data/[\w.-]*\w)")

# Forms that point at documents outside the repository, with what to write instead.
LEGACY = [
    (re.compile(r"(?<![\w/.-])(?:DESIGN|STYLE|DEVELOPERS|peers|design|wan_spec|algorithms|comfyui)\.md\b"),
     "a project doc without its folder: write docs/<file>.md section N"),
    (re.compile(r"(?<![\w/.-])wan_spec \d"), "write docs/wan_spec.md section N"),
    (re.compile(r"(?<![\w/.-])spec \d+\.\d"), "an unnamed spec section: write docs/wan_spec.md section N"),
    (re.compile(r"\.\./shared\b|(?<![\w-])shared/(?:docs|seeds)\b"),
     "the team's shared folder is not in the repository: cite docs/<file>.md"),
    (re.compile(r"\bseed 0\d\d\b"), "a seed document is not in the repository: cite the paper by name"),
    (re.compile(r"(?<![\w/.-])keys/[\w-]+\.(?:tsv|txt)\b"),
     "the key lists live in tests/<area>/data/: name that path"),
]


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)
    checked: int = 0  # doc references that resolved


def doc_sections(path: Path) -> set[str]:
    """Section numbers that are headings of a markdown file (``## 6. Title`` -> "6", ``### 6.1 X`` -> "6.1")."""
    return set(HEADING.findall(path.read_text(encoding="utf-8")))


def _cited_sections(nums: str) -> list[str]:
    """All numbers of a list such as ``1.1, 1.2 and 6.1`` or ``6.2-6.3`` (both ends of a range)."""
    return _NUM_RE.findall(nums)


def scan_text(text: str, where: str, root: Path, report: Report | None = None) -> Report:
    """Check every doc reference in ``text`` (from file ``where``) against the docs under ``root``."""
    report = report if report is not None else Report()
    sections_cache: dict[str, set[str] | None] = {}
    for m in DOC_REF.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        name = m.group("name")
        doc = root / "docs" / name
        if name not in sections_cache:
            sections_cache[name] = doc_sections(doc) if doc.is_file() else None
        sections = sections_cache[name]
        if sections is None:
            report.problems.append(f"{where}:{line}: docs/{name} does not exist")
            continue
        missing = [n for n in _cited_sections(m.group("nums") or "") if n not in sections]
        if missing:
            report.problems.append(f"{where}:{line}: docs/{name} has no section {', '.join(missing)}")
            continue
        report.checked += 1
    for m in DATA_PATH.finditer(text):
        if not (root / m.group(1)).exists():
            line = text.count("\n", 0, m.start()) + 1
            report.problems.append(f"{where}:{line}: {m.group(1)} does not exist")
    for pattern, advice in LEGACY:
        for m in pattern.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            report.problems.append(f"{where}:{line}: {m.group(0)!r}: {advice}")
    return report


def scanned_files(root: Path) -> list[Path]:
    """Source and documentation files of the repository (``SCANNED_SUFFIXES``), without caches and venvs."""
    out = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in SKIPPED_DIRS or part.endswith(".egg-info") for part in rel.parts[:-1]):
            continue
        if path.is_file() and path.suffix in SCANNED_SUFFIXES and path.resolve() != THIS_FILE:
            out.append(path)
    return out


def scan_repo(root: Path) -> Report:
    report = Report()
    for path in scanned_files(root):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        scan_text(text, path.relative_to(root).as_posix(), root, report)
    return report


# ------------------------------------------------------------------------------------------------ the repo


def test_every_doc_reference_in_the_repository_resolves():
    report = scan_repo(ROOT)
    assert not report.problems, "unresolved doc references:\n" + "\n".join(report.problems)
    assert report.checked >= 100, f"only {report.checked} doc references found; is the scanner still matching?"


@pytest.mark.parametrize("name", ["design.md", "wan_spec.md", "algorithms.md", "comfyui.md"])
def test_project_docs_exist_and_have_numbered_sections(name):
    sections = doc_sections(ROOT / "docs" / name)
    assert {"1", "2", "3"} <= sections


def test_license_is_the_apache_2_text_pyproject_declares():
    assert 'license = { text = "Apache-2.0" }' in (ROOT / "pyproject.toml").read_text()
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in text and "http://www.apache.org/licenses/LICENSE-2.0" in text


# ------------------------------------------------------------------------------------------ the scanner


@pytest.fixture
def fake_root(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "spec.md").write_text("# Spec\n\n## 1. One\n\n### 1.2 Detail\n\n## 6. Six\n")
    (tmp_path / "tests" / "x" / "data").mkdir(parents=True)
    (tmp_path / "tests" / "x" / "data" / "keys.tsv").write_text("a\tb\n")
    return tmp_path


@pytest.mark.parametrize("text", [
    "see docs/spec.md section 1.2",
    "(`docs/spec.md` section 6)",
    "docs/spec.md sections 1 and 1.2",
    "docs/spec.md sections 1, 1.2 and 6",
    "docs/spec.md sections 1.2-6",
    "docs/spec.md",
    "docs/spec.md section 6 note 2",
    "rows of tests/x/data/keys.tsv.",
    "the Wan report section 4.2.2",  # a paper cited by name is not a repository reference
])
def test_scanner_accepts_resolving_references(fake_root, text):
    assert scan_text(text, "f.py", fake_root).problems == []


@pytest.mark.parametrize("text, expected", [
    ("docs/missing.md section 1", "docs/missing.md does not exist"),
    ("docs/spec.md section 3", "has no section 3"),
    ("docs/spec.md section 1.3", "has no section 1.3"),
    ("docs/spec.md sections 1.2-1.4", "has no section 1.4"),
    ("docs/spec.md sections 1 and 7", "has no section 7"),
    ("docs/spec.md 2.1", "has no section 2.1"),
    ("tests/x/data/other.tsv", "tests/x/data/other.tsv does not exist"),
    # the forms this repository used before its docs existed
    ('"""Public API (DESIGN.md section 4): ``load_dit``', "without its folder"),
    ("Implements wan_spec.md 6.1: x_sigma = ...", "without its folder"),
    ("(comfyui.md 6.2-6.3)", "without its folder"),
    ("# x_sigma of wan_spec 6.1", "docs/wan_spec.md section N"),
    ('"""Classifier-free guidance (spec 6.1): v = ...', "unnamed spec section"),
    ("# copied from the team's doc (the copy keeps the test alive where ../shared is absent)", "shared folder"),
    ("Implements the Wan report's objective (seed 002, section 4.2.2)", "seed document"),
    ("rows of keys/umt5_keymap_official_to_hf.tsv", "tests/<area>/data/"),
])
def test_scanner_rejects_unresolved_references(fake_root, text, expected):
    problems = scan_text(text, "f.py", fake_root).problems
    assert len(problems) == 1 and expected in problems[0], problems


def test_scanner_reports_file_and_line(fake_root):
    problems = scan_text("first line\nsecond docs/spec.md section 9\n", "pkg/mod.py", fake_root).problems
    assert problems == ["pkg/mod.py:2: docs/spec.md has no section 9"]


def test_repo_scan_covers_every_source_kind_and_skips_caches(fake_root):
    for rel in ("a.py", "web/b.js", "c.md", "workflows/d.json", "pyproject.toml"):
        path = fake_root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("see docs/nowhere.md\n")
    for rel in (".git/e.py", "pkg.egg-info/f.md", "g.txt", "__pycache__/h.py"):
        path = fake_root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("see docs/nowhere.md\n")
    report = scan_repo(fake_root)
    where = sorted(p.split(":")[0] for p in report.problems)
    assert where == ["a.py", "c.md", "pyproject.toml", "web/b.js", "workflows/d.json"]
