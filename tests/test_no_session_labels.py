"""Code, docs, results and file names say what is true now: no "session N" labels (history is in git)."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LABEL = re.compile(r"session[ _-]?[0-9]+|sessions? [0-9]", re.IGNORECASE)


def _tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return out.splitlines()


def test_no_tracked_file_or_name_carries_a_session_number():
    hits = []
    for name in _tracked():
        if LABEL.search(name):
            hits.append(name)
            continue
        path = ROOT / name
        if not path.is_file() or path.stat().st_size > 5_000_000:
            continue
        data = path.read_bytes()
        if b"\0" in data[:4096]:
            continue                                    # binary
        for i, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if LABEL.search(line) and name != "tests/test_no_session_labels.py":
                hits.append(f"{name}:{i}")
    assert not hits, f"'session N' labels: {hits[:20]}"
