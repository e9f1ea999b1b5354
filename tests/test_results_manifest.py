"""experiments/results/ keeps only what the README, the docs, the code and the tests cite.

Every file under experiments/results/ is listed in its MANIFEST.txt and cited somewhere (by its own path
or by a folder above it); every cited path exists. A result nobody cites leaves the tree (git keeps it).
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "experiments" / "results"
MANIFEST = RESULTS / "MANIFEST.txt"
CITING = ("README.md", "docs", "megasim", "gpu", "experiments", "tests", "notebooks")
SUFFIXES = (".md", ".py", ".ipynb", ".sh", ".txt")
PATH = re.compile(r"experiments/results/[A-Za-z0-9_.\-/]*[A-Za-z0-9_\-]")


def _citing_files():
    for name in CITING:
        path = ROOT / name
        files = [path] if path.is_file() else path.rglob("*")
        for f in files:
            if f.is_file() and f.suffix in SUFFIXES and RESULTS not in f.parents:
                yield f


def _is_file(path: str) -> bool:
    return "." in path.rsplit("/", 1)[-1]


def cited_paths() -> dict[str, str]:
    """Cited path -> a file that cites it. Code and tests cite files (a folder named in code is where a
    script writes, not evidence); the README and the docs may cite a folder of evidence, at least two
    levels below experiments/results/ (a device's whole folder is not a citation). Globs and format
    templates are left out."""
    out: dict[str, str] = {}
    for f in _citing_files():
        prose = f.suffix == ".md"
        for m in PATH.finditer(f.read_text(errors="replace")):
            path = m.group(0).rstrip("./")
            if any(ch in path for ch in "*{<") or path.endswith("_"):
                continue
            depth = len(path.split("/")) - 2
            if _is_file(path) or (prose and depth >= 2):
                out.setdefault(path, str(f.relative_to(ROOT)))
    return out


def kept_files() -> set[str]:
    return {str(p.relative_to(ROOT)) for p in RESULTS.rglob("*") if p.is_file() and p != MANIFEST}


def manifest() -> set[str]:
    return {line.strip() for line in MANIFEST.read_text().splitlines() if line.strip() and not line.startswith("#")}


def test_every_cited_result_exists():
    missing = {p: by for p, by in cited_paths().items() if not (ROOT / p).exists()
               and p.rstrip("/") != "experiments/results"}
    assert not missing, f"cited but missing: {missing}"


def test_every_kept_result_is_cited_and_listed():
    cited = set(cited_paths())
    kept = kept_files()
    uncited = {f for f in kept if not any(f == c or f.startswith(c.rstrip("/") + "/") for c in cited
                                          if c.rstrip("/") != "experiments/results")}
    assert not uncited, f"kept but cited nowhere: {sorted(uncited)[:20]}"
    assert manifest() == kept, f"MANIFEST.txt differs from the tree: {sorted(manifest() ^ kept)[:20]}"


def test_the_kept_results_are_small():
    total = sum((ROOT / f).stat().st_size for f in kept_files())
    assert total < 8 * 2**20, f"experiments/results/ keeps {total / 2**20:.1f} MiB (at most 8 MiB: cite summaries, not raw data)"


def test_the_readme_results_table_names_files_that_exist():
    """Each row of the README's current-results table ends with its file under experiments/results/."""
    rows = [line for line in (ROOT / "README.md").read_text().splitlines()
            if line.startswith("|") and line.rstrip().endswith("` |")]
    assert rows, "the README has no results table rows"
    missing = [m.group(1) for line in rows for m in [re.search(r"`([^`]+)` \|$", line.rstrip())]
               if m and not (RESULTS / m.group(1)).exists()]
    assert not missing, f"the README's results table names missing files: {missing}"
