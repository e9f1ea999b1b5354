"""The sparse plug-in's structure-only lowering (``costed=False``, what the GPU executor runs) has the
tasks, launches and accesses of the costed one, on awkward shapes and every op."""

import numpy as np
import pytest

from megasim.algorithms.sparse.lowering import OPS, lower_sparse
from megasim.workloads.problem import ConvProblem

FIELDS = ("kind", "group", "index_in_group", "access_ptr", "access_region", "access_part_lo", "access_part_hi",
          "access_bytes", "access_write", "wait_counters", "signal_counters", "counter_init")


@pytest.mark.parametrize("problem", [ConvProblem(3, 5, 7, 9, 11, 3, 3, 1, 1), ConvProblem(2, 17, 9, 13, 10, 3, 3, 2, 0),
                                     ConvProblem(1, 40, 33, 15, 15, 5, 5, 1, 2)], ids=str)
@pytest.mark.parametrize("op", OPS)
def test_structure_only_lowering_is_the_costed_structure(problem, op):
    costed, sched_c, low_c = lower_sparse(problem, op, 132, sparsity=0.4)
    bare, sched_b, low_b = lower_sparse(problem, op, 132, sparsity=0.4, costed=False)
    assert bare.num_tasks == costed.num_tasks and bare.kind_names == costed.kind_names
    for name in FIELDS:
        assert np.array_equal(getattr(bare, name), getattr(costed, name)), name
    assert [l.order.tolist() for l in sched_b.launches] == [l.order.tolist() for l in sched_c.launches]
    assert low_b.tiling == low_c.tiling
    assert bare.meta["costed"] is False and "costed" not in costed.meta
    assert not bare.flops.any() and costed.flops.any()
