"""Fast start: the CLI imports only what a command needs (docs/errors.md, megasim.cli.main).

Each check runs in a fresh interpreter and reads its sys.modules: `megasim layers` (and importing the
entry point) must not import NumPy, SciPy, Numba or matplotlib; `megasim simulate` of a dense layer
must not import SciPy, Numba or matplotlib.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("scipy", "numba", "matplotlib")


def _modules_after(code: str) -> set[str]:
    probe = code + "\nimport sys, json\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_importing_the_entry_point_imports_nothing_heavy():
    loaded = _modules_after("import megasim.cli.main")
    assert not loaded & {*HEAVY, "numpy", "simpy"}, loaded & {*HEAVY, "numpy", "simpy"}


def test_megasim_layers_imports_no_numpy_scipy_numba_or_matplotlib():
    code = ("import io, contextlib\nfrom megasim.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n    assert main(['layers']) == 0")
    loaded = _modules_after(code)
    assert not loaded & {*HEAVY, "numpy"}, loaded & {*HEAVY, "numpy"}


def test_megasim_simulate_imports_no_scipy_numba_or_matplotlib():
    code = ("import io, contextlib\nfrom megasim.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert main(['simulate', 'N=2,C=8,K=8,H=8,W=8', '--gpu', 'H100']) == 0")
    loaded = _modules_after(code)
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_the_installed_command_runs_layers():
    out = subprocess.run([sys.executable, "-m", "megasim.cli.main", "layers"], capture_output=True, text=True)
    assert out.returncode == 0 and "resnet-1" in out.stdout and not out.stderr


class _Terminal:
    """A stream that says it is a terminal and keeps what is written."""

    def __init__(self) -> None:
        self.text = ""

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


def test_progress_shows_long_work_on_a_terminal_and_clears_its_line():
    import time
    from megasim.cli.common import Progress
    term = _Terminal()
    with Progress(term, after_s=0.05, every_s=0.05) as progress:
        progress("simulating 5 tasks")
        time.sleep(0.3)
    assert "megasim: simulating 5 tasks (" in term.text and term.text.endswith("\r\033[K")


def test_progress_is_silent_for_short_work_and_off_a_terminal():
    from megasim.cli.common import Progress
    term = _Terminal()
    with Progress(term, after_s=5.0) as progress:
        progress("quick")
    assert term.text == ""
    with Progress(after_s=0.0, enabled=False) as progress:     # a pipe: no thread, nothing written
        assert progress._thread is None
