"""The code blocks of the docs run as written."""

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize("doc", ["custom_taskgraph.md"])
def test_doc_code_runs(doc, capsys):
    text = (DOCS / doc).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, f"{doc} has no python code block"
    for block in blocks:
        exec(compile(block, doc, "exec"), {})
    out = capsys.readouterr().out
    assert "interleaved" in out and "nonfused" in out
