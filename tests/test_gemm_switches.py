"""The GEMM paths' import-time switches (gpu.kernels.winograd.device): the defaults are the adopted builds, and a
value outside the allowed ones stops the import with a one-line error naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu.runtime.switches import env_choice

REPO = Path(__file__).resolve().parent.parent


def test_env_choice(monkeypatch):
    monkeypatch.delenv("MEGASIM_TEST_SWITCH", raising=False)
    assert env_choice("MEGASIM_TEST_SWITCH", ("a", "b"), "a") == "a"
    monkeypatch.setenv("MEGASIM_TEST_SWITCH", "b")
    assert env_choice("MEGASIM_TEST_SWITCH", ("a", "b"), "a") == "b"
    monkeypatch.setenv("MEGASIM_TEST_SWITCH", "c")
    with pytest.raises(ValueError, match=r"MEGASIM_TEST_SWITCH='c': want one of \('a', 'b'\)"):
        env_choice("MEGASIM_TEST_SWITCH", ("a", "b"), "a")


def _import(**switches):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    for name in ("MEGASIM_GEMM_INDEX", "MEGASIM_GEMM_UNROLL", "MEGASIM_GEMM_INDEX_T32", "MEGASIM_GEMM_UNROLL_T32"):
        env.pop(name, None)
    env.update(switches)
    code = ("from gpu import winograd_device as d; "
            "print(d._INDEX_BITS_B, d._UNROLL_B, d._INDEX_BITS_A, d._UNROLL_A)")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=300, check=False)


def test_defaults_are_the_adopted_builds():
    """t = 64: 32-bit indices, 2 k-steps per pass (session 28); t = 32: 64-bit, rolled."""
    run = _import()
    assert run.returncode == 0, run.stderr[-1500:]
    assert run.stdout.split() == ["32", "2", "64", "1"]


@pytest.mark.parametrize("name, value", [("MEGASIM_GEMM_INDEX", "16"), ("MEGASIM_GEMM_UNROLL_T32", "8")])
def test_a_bad_switch_stops_the_import_with_one_line(name, value):
    run = _import(**{name: value})
    assert run.returncode != 0
    assert f"{name}={value!r}: want one of" in run.stderr.strip().splitlines()[-1]


def test_opaque_strides_switch():
    """gpu.kernels.winograd.device (session 29): the F(2x2)/F(4x4) transforms take opaque strides in the non-fused kernels
    only unless told; F(5x5)/F(6x6) always."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env.pop("MEGASIM_OPAQUE_STRIDES", None)
    code = ("from gpu import winograd_device as d, transforms as t; "
            "print(d.OPAQUE_STRIDES, t._name('itrans', 4, True), t._name('itrans', 6, True), t._stride('C', False))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO,
                         timeout=300, check=False)
    assert run.returncode == 0 and run.stdout.split() == ["nonfused", "itrans_pair_m4_opaque", "itrans_pair_m6", "C"], \
        run.stderr
    env["MEGASIM_OPAQUE_STRIDES"] = "some"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO,
                         timeout=300, check=False)
    assert run.returncode != 0 and "MEGASIM_OPAQUE_STRIDES='some': want one of ('nonfused', 'all', 'none')" in run.stderr
