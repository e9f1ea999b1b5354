"""The notebooks run top to bottom on tiny settings (MEGASIM_QUICK=1), and are committed without outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="notebook tests need the test extra (nbformat, nbclient, ipykernel)")
nbclient = pytest.importorskip("nbclient", reason="notebook tests need the test extra (nbformat, nbclient, ipykernel)")
pytest.importorskip("ipykernel", reason="notebook tests need the test extra (nbformat, nbclient, ipykernel)")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
DATA = Path(__file__).resolve().parent / "data"


def test_notebooks_found():
    assert [p.name for p in NOTEBOOKS] == ["01_explore_mappings.ipynb", "02_validate.ipynb", "03_sparse.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_outputs_stripped(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: strip outputs before committing"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, monkeypatch):
    monkeypatch.setenv("MEGASIM_QUICK", "1")          # the kernel inherits the environment
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # The measured inputs the notebooks analyse: a committed H200 validation run (02) and a sparse
    # validation's summary beside its bench CSV (03), from tests/data/ (its README names the results files).
    monkeypatch.setenv("MEGASIM_VALIDATION_CSV", str(DATA / "h200_validation.csv"))
    monkeypatch.setenv("MEGASIM_SPARSE_RESULTS", str(DATA / "h200_sparse"))
    nb = nbformat.read(path, as_version=4)
    # No wall-clock assertion (timings are not unit-tested); nbclient's per-cell timeout bounds a hang.
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
