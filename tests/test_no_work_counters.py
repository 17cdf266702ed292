"""The project dates its history by versions and dates, never by an internal work counter.

README.md, CHANGELOG.md, docs/*.md, benchmarks/**/*.md and every text file under src/ say when something was
changed or measured by a release (CHANGELOG.md) or a date (and, for a figure, the machine), not by the
number of a work session or of one of the project's own issues, which a user cannot look up. A reference to an
upstream project's issue carries a '#' ("TRL issue #3671", "vllm#1234") and is allowed.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# "session 18", "sessions 15-17", "Issue 40", "issues 25 and 29"; "issue #3671" (upstream) never matches.
COUNTERS = (
    re.compile(r"\bsessions? \d+\b", re.IGNORECASE),
    re.compile(r"\bissues? \d+\b", re.IGNORECASE),
)
TEXT_SUFFIXES = {".py", ".md", ".txt", ".yaml", ".yml", ".json", ".toml", ".cfg", ".ini", ".sh", ".j2"}


def checked_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md"]
    files += sorted((ROOT / "docs").glob("*.md"))
    files += sorted((ROOT / "benchmarks").rglob("*.md"))
    files += sorted(p for p in (ROOT / "src").rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)
    return [f for f in files if f.is_file()]


def counters_in(text: str) -> list[tuple[int, str]]:
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for pattern in COUNTERS:
            found += [(number, match.group(0)) for match in pattern.finditer(line)]
    return found


def test_the_checked_files_exist():
    names = {str(f.relative_to(ROOT)) for f in checked_files()}
    assert {"README.md", "CHANGELOG.md", "docs/architecture.md", "benchmarks/README.md",
            "benchmarks/results/learning-tiny.md"} <= names
    assert any(name.startswith("src/") for name in names)


def test_the_pattern_finds_counters_and_spares_upstream_references():
    text = "measured in session 17\nSessions 15-17 ran it\n(issue 40)\nissues 25 and 29\nTRL issue #3671\nvllm#1234"
    assert [hit for _, hit in counters_in(text)] == ["session 17", "Sessions 15", "issue 40", "issues 25"]
    assert counters_in("a session fixture; an issue with the tokenizer; sessions of 2 steps") == []


def test_no_internal_work_counter_in_readme_docs_changelog_or_code():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {hit!r}"
        for path in checked_files()
        for number, hit in counters_in(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert found == [], "a work counter instead of a version or a date:\n" + "\n".join(found)


# A commit hash as git abbreviates it: 7-40 hex digits with a letter and a digit among them ("b8071fa"). A full
# SHA-256 (64 digits) is content, not a revision, and does not match; neither do words ("deadline") or numbers.
COMMIT_HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


def commit_hashes_in(text: str) -> list[tuple[int, str]]:
    return [(number, match.group(0)) for number, line in enumerate(text.splitlines(), start=1)
            for match in COMMIT_HASH.finditer(line)]


def test_the_hash_pattern_finds_revisions_and_spares_words_numbers_and_digests():
    text = "from b8071fa (before)\n`same_behaviour.py 95cbe55 3248c99`\n0.4.0.dev0\n2026-11-26\nfacade\n" + "ab12" * 16
    assert [hit for _, hit in commit_hashes_in(text)] == ["b8071fa", "95cbe55", "3248c99"]


def test_no_commit_hash_in_docs():
    """docs/ says how things are; which revision changed them is the CHANGELOG's and the benchmarks' (benchmarks/results/)."""
    found = [f"{path.relative_to(ROOT)}:{number}: {hit!r}" for path in sorted((ROOT / "docs").glob("*.md"))
             for number, hit in commit_hashes_in(path.read_text(encoding="utf-8"))]
    assert found == [], "a commit hash in docs/:\n" + "\n".join(found)
