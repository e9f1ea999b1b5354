"""gpu.diagnostics.bench_gemm's variant names (pure parsing; no GPU)."""

from __future__ import annotations

import pytest

from gpu.diagnostics.bench_gemm import parse_variant


@pytest.mark.parametrize("name, want", [
    ("64x64x8x128x2", ((64, 64, 8, 128, 2), None, 2, None, 1, 64, 8)),
    ("64x64x8x128x2r128", ((64, 64, 8, 128, 2), None, 2, 128, 1, 64, 8)),
    ("64x64x16x128x2c3", ((64, 64, 16, 128, 2), "c", 3, None, 1, 64, 8)),
    ("64x64x16x128x2a4u8r128", ((64, 64, 16, 128, 2), "a", 4, 128, 8, 64, 8)),
    ("64x64x16x128x2vu2", ((64, 64, 16, 128, 2), "v", 2, None, 2, 64, 8)),
    ("64x64x16x128x2a4i32", ((64, 64, 16, 128, 2), "a", 4, None, 1, 32, 8)),
    ("64x64x16x128x2a4u4i32r128", ((64, 64, 16, 128, 2), "a", 4, 128, 4, 32, 8)),
    ("128x128x16x128x1a4u2i32w", ((128, 128, 16, 128, 1), "a", 4, None, 2, 32, 16)),
    ("128x128x8x128x1vw", ((128, 128, 8, 128, 1), "v", 2, None, 1, 64, 16)),
])
def test_parse_variant(name, want):
    assert parse_variant(name) == want


@pytest.mark.parametrize("name", ["64x64x16x128x2u8", "64x64x16x128", "64x64x16x128x2a4r", "64x64x16x128x2i32", "128x128x16x128x1w"])
def test_bad_variant_is_a_one_line_exit(name):
    with pytest.raises(SystemExit, match=f"--vec-variants '{name}' is not allowed"):
        parse_variant(name)
