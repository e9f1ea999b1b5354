"""gpu.kernels.cache: the on-disk cache of compiled kernels, keyed by what determines their code.

Under the CUDA simulator (CI) nothing compiles, so these check the key (stable across processes, changed
by every part that should change it), the digest of the kernel sources, and the entry's write / read
path with a stand-in for numba-cuda's compiled kernel. The real round trip (a kernel compiled in one
process, loaded in another) runs on the GPU machine: experiments/benchmarks/validate_scaling.py --cold-and-warm.
"""

import subprocess
import sys

import pytest

from gpu.kernels import cache

KEY_ARGS = ("gpu.kernels.winograd.megakernel.build_kernels.<locals>.megakernel", ("fp32", False, 0, 128),
            {"max_registers": 128}, "(array(int32, 2d, C),)", (9, 0))


def test_the_key_is_the_same_in_another_process():
    code = ("from gpu.kernels import cache; print(cache.kernel_key(" + ", ".join(repr(a) for a in KEY_ARGS) + "))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert other == cache.kernel_key(*KEY_ARGS)


@pytest.mark.parametrize("i, changed", [(0, "gpu.kernels.winograd.megakernel.build_kernels.<locals>.gemm_kernel"),
                                        (1, ("fp32", True, 0, 128)), (1, ("3xtf32", False, 0, 128)),
                                        (2, {"max_registers": 168}), (3, "(array(int64, 2d, C),)"), (4, (8, 0))])
def test_every_part_changes_the_key(i, changed):
    args = list(KEY_ARGS)
    args[i] = changed
    assert cache.kernel_key(*args) != cache.kernel_key(*KEY_ARGS)


def test_an_edit_of_any_kernel_source_changes_the_digest(tmp_path, monkeypatch):
    for folder in cache.SOURCES:
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(cache, "ROOT", tmp_path)
    cache.source_digest.cache_clear()
    try:
        before = cache.source_digest()
        (tmp_path / cache.SOURCES[-1] / "a.py").write_text("x = 2\n")
        cache.source_digest.cache_clear()
        assert cache.source_digest() != before
    finally:
        cache.source_digest.cache_clear()


class _Compiled:
    """Stands in for numba-cuda's compiled kernel: what _reduce_states gives, _rebuild takes back."""

    def __init__(self, **states):
        self.states = states

    def _reduce_states(self):
        return self.states

    @classmethod
    def _rebuild(cls, **states):
        return cls(**states)


class _Dispatcher:
    py_func = test_the_key_is_the_same_in_another_process
    targetoptions = {"max_registers": 128}


class _Context:
    def refresh(self):
        pass


def test_an_entry_is_written_then_read_back(tmp_path, monkeypatch):
    import numba.cuda.dispatcher as nd
    monkeypatch.setattr(nd, "_Kernel", _Compiled, raising=False)
    monkeypatch.setattr(cache.SourceKeyedCache, "_compute_capability", staticmethod(lambda: (9, 0)))
    cache.set_directory(tmp_path / "kernels")
    try:
        store = cache.SourceKeyedCache(_Dispatcher(), ("fp32", 4))
        assert store.load_overload("(int32,)", _Context()) is None
        store.save_overload("(int32,)", _Compiled(name="k", signature="(int32,)"))
        assert len(list((tmp_path / "kernels").glob("*/*.nbk"))) == 1
        back = cache.SourceKeyedCache(_Dispatcher(), ("fp32", 4)).load_overload("(int32,)", _Context())
        assert back.states == {"name": "k", "signature": "(int32,)"}
        assert cache.SourceKeyedCache(_Dispatcher(), ("fp32", 5)).load_overload("(int32,)", _Context()) is None
        (next((tmp_path / "kernels").glob("*/*.nbk"))).write_bytes(b"torn")
        assert store.load_overload("(int32,)", _Context()) is None        # unreadable: compiled again
        cache.set_directory(None)
        assert store.load_overload("(int32,)", _Context()) is None        # off
    finally:
        cache.set_directory(cache.DEFAULT_DIRECTORY)


def test_under_the_simulator_a_dispatcher_is_left_as_it_is():
    from numba import config, cuda
    if not config.ENABLE_CUDASIM:
        pytest.skip("a real GPU compiles: the round trip is checked there")

    @cuda.jit
    def k(a):
        a[0] = 1

    assert cache.persist(k, "x") is k


def test_old_source_versions_are_removed_and_the_current_one_kept(tmp_path):
    import os
    folder = tmp_path / "kernels"
    for i in range(7):
        (folder / f"v{i}").mkdir(parents=True)
        (folder / f"v{i}" / "k.nbk").write_bytes(b"x")
        os.utime(folder / f"v{i}", (1000 + i, 1000 + i))        # v6 most recently written
    cache.prune(folder, keep="v0", versions=3)
    assert sorted(p.name for p in folder.iterdir()) == ["v0", "v5", "v6"]
    cache.prune(folder, keep="v6", versions=1)
    assert sorted(p.name for p in folder.iterdir()) == ["v6"]
