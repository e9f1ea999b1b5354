"""Which commit a result names: git's HEAD, unless ``.git_sha`` names a commit git does not know (the GPU
machine's copy of the tree); a ``.git_sha`` left behind in a development tree is not believed over HEAD."""

import subprocess

import pytest

from megasim import provenance


def _git(*args):
    return subprocess.run(["git", *args], cwd=provenance.REPO, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def head():
    try:
        return _git("rev-parse", "HEAD")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")


def test_a_stale_sha_file_does_not_override_head(tmp_path, monkeypatch, head):
    older = _git("rev-list", "--max-count=1", "--skip=1", "HEAD") or head
    (tmp_path / ".git_sha").write_text(older + "\n")
    monkeypatch.setattr(provenance, "SHA_FILE", tmp_path / ".git_sha")
    assert provenance.git_sha() == head


def test_a_sha_file_naming_an_unknown_commit_is_believed(tmp_path, monkeypatch, head):
    (tmp_path / ".git_sha").write_text("f" * 40 + "\n")
    monkeypatch.setattr(provenance, "SHA_FILE", tmp_path / ".git_sha")
    assert provenance.git_sha() == "f" * 40


def test_without_a_sha_file_it_is_head(tmp_path, monkeypatch, head):
    monkeypatch.setattr(provenance, "SHA_FILE", tmp_path / "absent")
    assert provenance.git_sha() == head
