"""Which commit a result came from.

``git_sha()`` reads the file ``.git_sha`` at the repository root when there is one: the GPU machine's
copy of the tree has no trustworthy ``.git`` (once it answered with an older commit), so the commit is
written there before the copy (``git rev-parse HEAD > .git_sha``, README "On a GPU machine"; the file
is git-ignored, so the device call carries it). Otherwise it asks git. No environment variable decides it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHA_FILE = REPO / ".git_sha"


def git_sha() -> str:
    """The commit of this tree: the first line of ``.git_sha`` if present, else ``git rev-parse HEAD``, else ''."""
    if SHA_FILE.is_file():
        return SHA_FILE.read_text().split("\n", 1)[0].strip()
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
