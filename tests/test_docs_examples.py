"""The code blocks of the docs run as written."""

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize("doc, expected", [("custom_taskgraph.md", ("interleaved", "nonfused")),
                                           ("extending.md", ("toy_direct k_tile=16,rows=2", "best k_tile",
                                                             "toy_direct on the GPU executor")),
                                           ("simpy_processes.md", ("alone", "beside a DRAM stream"))])
def test_doc_code_runs(doc, expected, capsys):
    text = (DOCS / doc).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, f"{doc} has no python code block"
    for block in blocks:
        exec(compile(block, doc, "exec"), {})
    out = capsys.readouterr().out
    assert all(word in out for word in expected), out
    if doc == "extending.md":
        from megasim.algorithms import ALGORITHMS
        ALGORITHMS.pop("toy_direct")   # registered by the example; other tests see the built-in set
        from gpu.runtime.table import KERNEL_TABLES
        KERNEL_TABLES.pop("toy_direct", None)   # its GPU kernel table, registered by the example too
