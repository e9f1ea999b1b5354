"""The TaskGraph arrays, its builder, validation, parents and hash; schedule validity checks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from megasim.errors import MappingError, MegasimError
from megasim.schedule import Launch, Schedule, check_valid, first_violation
from megasim.taskgraph import TaskGraphBuilder


def diamond():
    """t0 -> (t1, t2) -> t3, with one region written by t0 and read by the others."""
    b = TaskGraphBuilder()
    b.add_kind("produce", threads=128)
    b.add_kind("consume", threads=256, registers=40, shared_bytes=1024)
    data = b.add_region("data", parts=2, part_bytes=4096)
    out = b.add_region("out", parts=1, part_bytes=64)
    c0, c1 = b.add_counter(), b.add_counter()
    b.add_task("produce", signals=[c0], accesses=[(data, 0, 2, 8192, True)])
    b.add_task("consume", index=0, waits=[c0], signals=[c1], flops=10, accesses=[(data, 0, 1, 4096, False)])
    b.add_task("consume", index=1, waits=[c0], signals=[c1], flops=20, accesses=[(data, 1, 2, 4096, False)])
    b.add_task("produce", index=1, waits=[c1], accesses=[(out, 0, 1, 64, True), (-1, 0, 1, 32, False)])
    return b.build(meta={"name": "diamond"})


def test_builder_arrays():
    g = diamond()
    assert g.num_tasks == 4 and g.num_counters == 2 and g.num_regions == 2
    assert g.kind_names == ("produce", "consume")
    assert g.kind.tolist() == [0, 1, 1, 0]
    assert g.counter_init.tolist() == [1, 2]
    assert g.access_ptr.tolist() == [0, 1, 2, 3, 5]
    assert g.tensor_names == ("data", "out")
    assert g.kind_threads.tolist() == [128, 256] and g.kind_shared_bytes.tolist() == [0, 1024]
    assert g.tasks_of_kind("consume").tolist() == [1, 2]
    assert [p.tolist() for p in g.parents_of()] == [[], [0], [0], [1, 2]]
    assert g.meta == {"name": "diamond"}


def test_builder_rejects_unknown_and_duplicate_kinds():
    b = TaskGraphBuilder()
    b.add_kind("a")
    with pytest.raises(MegasimError, match="'a' added twice"):
        b.add_kind("a")
    with pytest.raises(MegasimError, match="unknown task kind 'b'"):
        b.add_task("b")


def test_kind_id_unknown():
    with pytest.raises(MegasimError, match="'gemm'"):
        diamond().kind_id("gemm")


@pytest.mark.parametrize("change,needle", [
    (lambda g: {"counter_init": np.array([1, 1], np.int32)}, "counter 1 starts at 1 but receives 2"),
    (lambda g: {"counter_init": np.array([-1, 2], np.int32)}, ">= 0"),
    (lambda g: {"wait_counters": np.array([[-1], [0], [0], [5]], np.int32)}, "outside"),
    (lambda g: {"access_part_hi": np.array([3, 1, 2, 1, 1], np.int32)}, "parts [0, 3)"),
    (lambda g: {"access_bytes": np.array([1.0, -1.0, 1.0, 1.0, 1.0])}, "access_bytes"),
    (lambda g: {"access_ptr": np.array([0, 2, 1, 3, 5])}, "access_ptr"),
    (lambda g: {"kind": np.array([0, 1, 2, 0], np.int16)}, "unknown kind"),
    (lambda g: {"flops": np.zeros(3)}, "flops"),
    (lambda g: {"kind_threads": np.array([128], np.int32)}, "one entry per kind"),
])
def test_validate_catches_inconsistent_arrays(change, needle):
    g = diamond()
    bad = dataclasses.replace(g, **change(g))
    with pytest.raises(MegasimError) as err:
        bad.validate()
    assert needle in str(err.value)


def test_hash_is_content_based():
    a, b = diamond(), diamond()
    assert a.hash == b.hash and len(a.hash) == 16
    c = dataclasses.replace(a, flops=a.flops + np.array([0, 0, 0, 1.0]))
    assert c.hash != a.hash


def _sched(*orders):
    return Schedule("s", tuple(Launch(np.array(o, np.int64)) for o in orders))


@pytest.mark.parametrize("orders", [([0, 1, 2, 3],), ([0, 2, 1, 3],), ([0], [1, 2], [3]), ([0, 1], [2, 3])])
def test_valid_orders(orders):
    g = diamond()
    assert first_violation(g, _sched(*orders)) is None
    check_valid(g, _sched(*orders))


@pytest.mark.parametrize("orders,needle", [
    (([0, 1, 3, 2],), "task 3 (produce) comes before a parent that signals counter 1"),
    (([1, 0, 2, 3],), "task 1 (consume) comes before"),
    (([0, 1, 2, 3, 1],), "task 1 appears more than once"),
    (([0, 1], [1, 2, 3]), "task 1 appears more than once"),
    (([0, 1, 2],), "task 3 is in no launch (1 missing)"),
    (([0, 1, 2, 4],), "outside [0, 4)"),
    (([3], [0, 1, 2]), "task 3 (produce) comes before"),
])
def test_invalid_orders(orders, needle):
    g = diamond()
    assert needle in first_violation(g, _sched(*orders))
    with pytest.raises(MappingError, match="invalid schedule 's'"):
        check_valid(g, _sched(*orders))


def test_launch_rejects_bad_options():
    with pytest.raises(MappingError, match="'warp'"):
        Launch(np.arange(2), style="warp")
    with pytest.raises(MappingError, match="'random'"):
        Launch(np.arange(2), dispatch="random")
    with pytest.raises(MappingError, match="blocks_per_sm=0"):
        Launch(np.arange(2), style="persistent", blocks_per_sm=0)


def test_with_style_keeps_orders_and_changes_hash():
    s = _sched([0, 1], [2, 3])
    p = s.with_style("persistent", blocks_per_sm=2)
    assert all(l.style == "persistent" and l.blocks_per_sm == 2 for l in p.launches)
    assert [l.order.tolist() for l in p.launches] == [[0, 1], [2, 3]]
    assert p.params["style"] == "persistent" and p.params["blocks_per_sm"] == 2
    assert p.hash != s.hash
    assert _sched([0, 1], [2, 3]).hash == s.hash


def _graph_with(kind_kw=None, region=(2, 4096.0), task=None, access=None):
    """A producer and a consumer, with one field changed: the builder's inputs under test."""
    b = TaskGraphBuilder()
    b.add_kind("produce", **(kind_kw or {}))
    b.add_kind("consume")
    data = b.add_region("data", parts=region[0], part_bytes=region[1])
    ready = b.add_counter()
    b.add_task("produce", signals=[ready], accesses=[access or (data, 0, 1, 4096, True)], **(task or {}))
    b.add_task("consume", waits=[ready], accesses=[(data, 0, 1, 4096, False)])
    return b.build()


@pytest.mark.parametrize("change, needle", [
    ({"task": {"flops": float("nan")}}, "flops=nan"),
    ({"task": {"flops": float("inf")}}, "flops=inf"),
    ({"task": {"flops": -1.0}}, "flops=-1.0"),
    ({"task": {"flops": "1e6"}}, "flops='1e6'"),
    ({"task": {"group": -1}}, "group=-1"),
    ({"task": {"group": 2 ** 40}}, "group=1099511627776"),
    ({"task": {"index": 1.5}}, "index=1.5"),
    ({"task": {"waits": [-1]}}, "waits counter=-1"),
    ({"task": {"waits": [5]}}, "waits counter=5"),
    ({"task": {"waits": [0, 9]}}, "waits counter=9"),
    ({"task": {"waits": 0}}, "waits=0"),
    ({"access": (0, 0, 1, float("nan"), True)}, "bytes=nan"),
    ({"access": (0, 0, 1, float("inf"), True)}, "bytes=inf"),
    ({"access": (0, 0, 1, -5, True)}, "bytes=-5"),
    ({"access": (0, 0, 1)}, "access 0=(0, 0, 1)"),
    ({"access": (0, 0.5, 1, 8, True)}, "part_lo=0.5"),
    ({"access": (3, 0, 1, 8, True)}, "region=3"),
    ({"access": (0, 0, 1, 8, "yes")}, "write='yes'"),
    ({"access": (0, 0, 1, 8, True, 0)}, "part_step=0"),
    ({"region": (0, 4096.0)}, "parts=0"),
    ({"region": (2 ** 40, 4096.0)}, "parts=1099511627776"),
    ({"region": (2, float("nan"))}, "part_bytes=nan"),
    ({"region": (2, -1.0)}, "part_bytes=-1.0"),
    ({"kind_kw": {"threads": 0}}, "threads=0"),
    ({"kind_kw": {"threads": 128.5}}, "threads=128.5"),
    ({"kind_kw": {"registers": -1}}, "registers=-1"),
    ({"kind_kw": {"shared_bytes": -1}}, "shared_bytes=-1"),
])
def test_builder_refuses_bad_values_naming_them(change, needle):
    """Before, NaN or negative flops and bytes vanished from the prediction, a wait on counter -1 was
    dropped, fractional parts were truncated and an out-of-range id raised a raw IndexError/OverflowError."""
    with pytest.raises(MegasimError) as info:
        _graph_with(**change)
    assert needle in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_builder_refuses_a_kind_name_that_is_not_a_string():
    with pytest.raises(MegasimError, match="name=3"):
        TaskGraphBuilder().add_kind(3)


def test_builder_refuses_an_empty_graph():
    with pytest.raises(MegasimError, match="no tasks"):
        TaskGraphBuilder().build()


@pytest.mark.parametrize("field, value, needle", [
    ("flops", np.array([np.nan, 0, 0, 0]), "TaskGraph.flops[0]=nan"),
    ("access_bytes", np.array([8192.0, np.inf, 4096, 64, 32]), "TaskGraph.access_bytes[1]=inf"),
    ("region_part_bytes", np.array([-1.0, 64]), "TaskGraph.region_part_bytes[0]=-1.0"),
    ("region_parts", np.array([2, 0], np.int32), "region_parts[1]=0"),
    ("kind_threads", np.array([0, 256], np.int32), "kind_threads=0 of kind 'produce'"),
    ("group", np.array([0, -3, 0, 0], np.int32), "group[1]=-3"),
])
def test_validate_refuses_non_finite_or_negative_arrays(field, value, needle):
    """A graph built with NumPy directly (as the lowerings do) gets the same checks from validate()."""
    g = dataclasses.replace(diamond(), **{field: value})
    with pytest.raises(MegasimError) as info:
        g.validate()
    assert needle in str(info.value), str(info.value)


def test_builder_accepts_numpy_integers_and_floats():
    b = TaskGraphBuilder()
    b.add_kind("k", threads=np.int64(64))
    r = b.add_region("x", parts=np.int32(2), part_bytes=np.float32(16))
    b.add_task("k", group=np.int64(1), flops=np.float64(2.0), accesses=[(r, np.int64(0), 2, 32.0, np.bool_(True))])
    g = b.build()
    assert g.group.tolist() == [1] and g.kind_threads.tolist() == [64] and g.access_write.tolist() == [True]


@pytest.mark.parametrize("order, needle", [
    (np.array([0.0, 1.0, 2.0, 3.0]), "dtype float64"),
    (np.array([[0, 1], [2, 3]]), "shape (2, 2)"),
    (np.array([True, False, True, True]), "dtype bool"),
    ("0123", "dtype <U4"),
])
def test_a_launch_order_must_be_integer_task_ids(order, needle):
    """Before: float ids raised NumPy's IndexError inside the engine."""
    with pytest.raises(MappingError) as info:
        Launch(order)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_a_launch_order_may_be_a_list_of_ints():
    """Before: a list reached the compiled engine and raised AttributeError ('list' has no 'astype')."""
    g = diamond()
    launch = Launch([0, 1, 2, 3])
    assert launch.order.dtype.kind == "i" and Launch([]).order.size == 0
    check_valid(g, Schedule("listed", (launch,)))


@pytest.mark.parametrize("args, needle", [((None, "s"), "graph None"), (("g", "fused"), "schedule 'fused'")])
def test_check_valid_refuses_arguments_of_the_wrong_type(args, needle):
    graph = diamond() if args[0] == "g" else args[0]
    schedule = args[1] if args[1] != "s" else Schedule("x", (Launch(np.arange(4)),))
    with pytest.raises(MappingError, match=needle):
        check_valid(graph, schedule)
