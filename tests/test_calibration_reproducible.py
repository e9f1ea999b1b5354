"""A calibration fit follows one path whatever the last bits of its residuals (megasim.calibration.reproducible):
another machine's NumPy, BLAS or SciPy changes those bits, and without the rounding a fit of one measurement set
landed in another minimum."""

from __future__ import annotations

import math

import numpy as np
import pytest

from megasim.calibration.lsq import least_squares_batched
from megasim.calibration.reproducible import DIGITS, rounded, rounded_scalar, sum_of_squares


def test_rounded_keeps_ten_significant_digits_and_is_idempotent():
    rng = np.random.default_rng(7)
    v = rng.standard_normal((3, 4)) * 10.0 ** rng.integers(-10, 30, (3, 4))
    r = rounded(v)
    assert r.shape == v.shape
    assert np.all(np.abs(r - v) <= 0.5 * 10.0 ** (1 - DIGITS) * np.abs(v) * (1 + 1e-9))
    assert np.array_equal(rounded(r), r)
    assert rounded_scalar(1.23456789012345) == 1.234567890
    special = rounded([0.0, -0.0, 5e-324, -3e-13, math.inf, -math.inf])
    assert special.tolist() == [0.0, 0.0, 0.0, 0.0, math.inf, -math.inf] and np.isnan(rounded([math.nan])[0])


def test_a_last_bit_does_not_move_a_rounded_value():
    rng = np.random.default_rng(11)
    v = rng.uniform(-1.0, 1.0, 2000)
    up = np.nextafter(v, np.inf)
    assert np.mean(rounded(v) == rounded(up)) > 0.999


def test_sum_of_squares_does_not_depend_on_the_order():
    rng = np.random.default_rng(3)
    r = rng.standard_normal(257) * 10.0 ** rng.integers(-8, 3, 257)
    assert sum_of_squares(r) == sum_of_squares(r[::-1]) == sum_of_squares(rng.permutation(r))
    assert sum_of_squares(r) == pytest.approx(float(r @ r), rel=1e-9)


def _curved(points, target, bump):
    """Log errors of a small smooth model (as a fit's residuals are: no decimal grid in them), each perturbed by
    `bump` last bits."""
    out = []
    for p in points:
        sim = np.concatenate([np.exp(p) + 0.1 * np.sin(p), [1.0 + 0.05 * np.exp(p[0] - p[1])]])
        meas = np.concatenate([np.exp(target) + 0.1 * np.sin(target), [1.0 + 0.05 * np.exp(0.3)]])
        r = np.log(sim / meas)
        out.append(r if bump == 0 else np.nextafter(r, np.inf * np.sign(bump)))
    return out


@pytest.mark.parametrize("bump", [1, -1])
def test_a_fit_is_the_same_when_its_residuals_move_by_a_last_bit(bump):
    target = np.array([0.7, -1.3, 1.9]) + 0.0123
    kwargs = dict(max_evals=300, diff_step=2e-2, xtol=1e-8, ftol=1e-8, gtol=1e-8, refresh=3)
    base = least_squares_batched(lambda ps: _curved(ps, target, 0), [0.0, 0.0, 0.0], [-3] * 3, [3] * 3, **kwargs)
    moved = least_squares_batched(lambda ps: _curved(ps, target, bump), [0.0, 0.0, 0.0], [-3] * 3, [3] * 3, **kwargs)
    assert base.x == pytest.approx(target, abs=0.1)
    assert np.array_equal(base.x, moved.x) and base.cost == moved.cost and base.evaluations == moved.evaluations


def _loose(points):
    """Residuals that see only x0 + x1 (a direction they leave loose) and x2."""
    return [np.array([p[0] + p[1] - 1.0, math.exp(p[2]) - 2.0, 0.3 * (p[0] + p[1] - 1.0)]) for p in points]


def test_the_prior_holds_a_loose_direction_at_the_start():
    """Without the prior, where the search ends along a direction the residuals do not see depends on its path
    (and on the last bits a singular Jacobian's solve puts there, which differ between BLAS kernels); with it,
    the fit is the point nearest the start: x0 and x1 share the move equally, x2 is found."""
    kwargs = dict(max_evals=200, diff_step=2e-2, xtol=1e-8, ftol=1e-8, gtol=1e-8, refresh=3)
    fit = least_squares_batched(_loose, [0.2, 0.1, 0.0], [-5] * 3, [5] * 3, prior_weight=0.01, **kwargs)
    assert fit.x[0] + fit.x[1] == pytest.approx(1.0, abs=1e-3) and fit.x[2] == pytest.approx(math.log(2.0), abs=1e-3)
    assert fit.x[0] - 0.2 == pytest.approx(fit.x[1] - 0.1, abs=1e-3)
    # the prior's pull on a coordinate the residuals pin is a small fraction of it: the cost is the prior's alone
    assert fit.cost == pytest.approx(0.5 * 0.01 ** 2 * (2 * 0.35 ** 2 + math.log(2.0) ** 2), rel=0.05)
    with pytest.raises(ValueError, match="prior_weight=-1"):
        least_squares_batched(_loose, [0.0] * 3, [-5] * 3, [5] * 3, prior_weight=-1.0, **kwargs)
