"""Which commit a result came from.

``git_sha()`` asks git for HEAD, unless the file ``.git_sha`` at the repository root names a commit this
tree's git does not know: the GPU machine's copy of the tree has no trustworthy ``.git`` (once it answered
with an older commit), so the commit is written there before the copy (``git rev-parse HEAD > .git_sha``,
README "On a GPU machine"; the file is git-ignored, so the device call carries it). A ``.git_sha`` left
behind in a development tree names a commit git knows, and is not believed over HEAD. No environment
variable decides it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHA_FILE = REPO / ".git_sha"


def _git(*args: str) -> str | None:
    """git's output, or None when git fails or is not there."""
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def git_sha() -> str:
    """The commit of this tree: the first line of ``.git_sha`` when git does not know that commit (the
    GPU machine's copy), else ``git rev-parse HEAD``, else ''."""
    written = SHA_FILE.read_text().split("\n", 1)[0].strip() if SHA_FILE.is_file() else ""
    head = _git("rev-parse", "HEAD")
    if written and (head is None or _git("cat-file", "-e", f"{written}^{{commit}}") is None):
        return written
    return head or written
