"""Algorithm 1 of the megakernel paper (Sec. 5.5): the task mapping of the fused Winograd megakernel.

Inputs are the graph's counts N_F, S_I, S_G, S_O (from the lowering) and three parameters:

- ``D_IG``: input transforms placed before the first GEMM (the distance a GEMM keeps from its
  input-transform parents, Sec. 5.3);
- ``D_GO``: the span of the initial part, in blocks, in which GEMMs run but no output transform
  does yet; the algorithm emits ``D_GO // (M (S_I + S_G))`` initial iterations;
- ``M``: groups per GEMM batch; the M GEMM tasks sharing one filter matrix (column j) are placed
  together (reuse type b, Sec. 5.4).

The map is: the N_F filter transforms; D_IG input transforms; then steps, each emitting
``M S_I / S_G`` input transforms (rounded so the running total is exact), the M GEMMs of the next
column of the current batch and, after the initial iterations, ``M S_O / S_G`` output transforms; when
the input transforms run out the steps go on with GEMMs and output transforms (the tail), and the
remaining output transforms close the map.

Parameters that would put a child before its parents are rejected with the smallest D_IG or D_GO
that works for the others.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from megasim.errors import MappingError
from megasim.schedule import Launch, Schedule, first_violation
from megasim.taskgraph import TaskGraph

ROLES = ("ftrans", "itrans", "gemm", "otrans")


@dataclass(frozen=True)
class Algorithm1Params:
    d_ig: int
    d_go: int
    m: int

    def __post_init__(self) -> None:
        for name, low in (("d_ig", 0), ("d_go", 0), ("m", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
                raise MappingError(f"{name.upper()}={v!r} is not allowed: it must be an integer >= {low}")

    def as_dict(self) -> dict[str, int]:
        return {"D_IG": int(self.d_ig), "D_GO": int(self.d_go), "M": int(self.m)}


@dataclass(frozen=True)
class _Streams:
    ftrans: np.ndarray
    itrans: np.ndarray
    gemm: np.ndarray      # (N_G, S_G): GEMM task id of group g, column j
    otrans: np.ndarray
    s_i: int
    s_o: int

    @property
    def n_g(self) -> int:
        return self.gemm.shape[0]

    @property
    def s_g(self) -> int:
        return self.gemm.shape[1]


def _streams(graph: TaskGraph) -> _Streams:
    missing = [r for r in ROLES if r not in graph.kind_names]
    if missing:
        raise MappingError(f"Algorithm 1 needs task kinds {', '.join(ROLES)}; this graph lacks {', '.join(missing)}")
    ids = {r: graph.tasks_of_kind(r) for r in ROLES}
    for r in ("itrans", "gemm", "otrans"):
        key = graph.group[ids[r]].astype(np.int64) * (1 << 31) + graph.index_in_group[ids[r]]
        ids[r] = ids[r][np.argsort(key, kind="stable")]
    g_groups = graph.group[ids["gemm"]]
    n_g = int(g_groups.max()) + 1 if g_groups.size else 0
    counts = np.bincount(g_groups, minlength=n_g)
    if n_g == 0 or np.any(counts != counts[0]):
        raise MappingError("Algorithm 1 needs the same number of GEMM tasks in every group")
    s_i = int(np.bincount(graph.group[ids["itrans"]]).max())
    s_o = int(np.bincount(graph.group[ids["otrans"]]).max())
    return _Streams(ids["ftrans"], ids["itrans"], ids["gemm"].reshape(n_g, counts[0]), ids["otrans"], s_i, s_o)


def _build(st: _Streams, d_ig: int, iters: int, m: int) -> np.ndarray:
    """The map, as one array of task ids: the module docstring's order, computed per step at once.

    Step s (1-based) emits the input transforms up to ``I(s) = min(N_I, D_IG + round(s q_i))`` (from where
    the previous step stopped; ``I(0) = min(D_IG, N_I)``), then column j of GEMM batch b, then, from the
    first step past the initial iterations, the output transforms up to ``O(k) = min(N_O, round(k q_o))``
    for its k-th such step. Both bounds never decrease, so every task of a stream belongs to the first
    step whose bound passes it, and the map is the tasks sorted by (step, part, position).
    """
    ni, no, s_g = st.itrans.size, st.otrans.size, st.s_g
    q_i = m * st.s_i / s_g
    q_o = m * st.s_o / s_g
    n_steps = -(-st.n_g // m) * s_g
    steps = np.arange(1, n_steps + 1)
    i_bound = np.minimum(ni, d_ig + np.rint(steps * q_i).astype(np.int64))
    i_head = min(d_ig, ni)
    i_step = np.searchsorted(i_bound, np.arange(i_head, ni), side="right") + 1   # n_steps + 1: the tail
    init_steps = iters * s_g
    body = np.arange(1, max(0, n_steps - init_steps) + 1)
    o_bound = np.minimum(no, np.rint(body * q_o).astype(np.int64))
    o_step = np.searchsorted(o_bound, np.arange(no), side="right") + 1 + init_steps
    g = np.arange(st.n_g)
    g_step = (g // m)[:, None] * s_g + np.arange(1, s_g + 1)[None, :]         # (N_G, S_G)
    ids = np.concatenate([st.itrans[i_head:], st.gemm.ravel(), st.otrans])
    step = np.concatenate([i_step, g_step.ravel(), o_step])
    part = np.concatenate([np.zeros(ni - i_head, np.int64), np.ones(st.gemm.size, np.int64),
                           np.full(no, 2, np.int64)])
    within = np.concatenate([np.arange(i_head, ni), np.broadcast_to(g[:, None], st.gemm.shape).ravel(),
                             np.arange(no)])
    body_order = ids[np.lexsort((within, part, step))]
    return np.concatenate([st.ftrans, st.itrans[:i_head], body_order]).astype(np.int64)


def _build_reference(st: _Streams, d_ig: int, iters: int, m: int) -> np.ndarray:
    """The map step by step, as Algorithm 1 states it (tests check ``_build`` against it)."""
    out: list[np.ndarray] = [st.ftrans]
    ni, no = st.itrans.size, st.otrans.size
    i_pos = min(d_ig, ni)
    out.append(st.itrans[:i_pos])
    o_pos = 0
    q_i = m * st.s_i / st.s_g
    q_o = m * st.s_o / st.s_g
    batches = [st.gemm[b:b + m] for b in range(0, st.n_g, m)]
    step = 0          # GEMM steps emitted
    body = 0          # steps that also emit output transforms
    init_steps = iters * st.s_g
    for batch in batches:
        for j in range(st.s_g):
            step += 1
            if i_pos < ni:          # initial and body: input transforms before this column
                target = min(ni, d_ig + int(round(step * q_i)))
                out.append(st.itrans[i_pos:target])
                i_pos = max(i_pos, target)
            out.append(batch[:, j])
            if step > init_steps:   # body and tail: output transforms after it
                body += 1
                target = min(no, int(round(body * q_o)))
                out.append(st.otrans[o_pos:target])
                o_pos = max(o_pos, target)
    out.append(st.itrans[i_pos:])   # cannot happen for valid inputs, kept so every task is placed
    out.append(st.otrans[o_pos:])
    return np.concatenate(out).astype(np.int64)


def counts(graph: TaskGraph) -> dict[str, int]:
    """The paper's N_F, S_I, S_G, S_O, N_G for this graph."""
    st = _streams(graph)
    return {"N_F": int(st.ftrans.size), "S_I": st.s_i, "S_G": st.s_g, "S_O": st.s_o, "N_G": st.n_g}


def _valid(graph: TaskGraph, order: np.ndarray) -> bool:
    return first_violation(graph, Schedule("a1", (Launch(order),))) is None


def _min_d_ig(graph: TaskGraph, st: _Streams, m: int) -> int:
    """Smallest D_IG that puts every GEMM after its input transforms.

    Before GEMM step s (1-based, batch b) the map holds min(#itrans, D_IG + round(s M S_I / S_G)) input
    transforms, and batch b needs all those of its groups: D_IG >= max_s(needed(s) - round(s q_i)).
    """
    per_group = np.bincount(graph.group[st.itrans], minlength=st.n_g)
    needed_by_group = np.cumsum(per_group)
    last_group = np.minimum(np.arange(0, st.n_g, m) + m, st.n_g) - 1
    steps = np.arange(1, len(last_group) * st.s_g + 1)
    needed = needed_by_group[last_group[(steps - 1) // st.s_g]]
    interleaved = np.rint(steps * m * st.s_i / st.s_g).astype(np.int64)   # round(s M S_I / S_G), half to even
    return int(max(0, np.max(needed - interleaved)))


def _gemms_after_itrans(graph: TaskGraph, order: np.ndarray) -> bool:
    pos = np.empty(graph.num_tasks, np.int64)
    pos[order] = np.arange(order.size)
    it = graph.tasks_of_kind("itrans")
    gm = graph.tasks_of_kind("gemm")
    last_i = np.zeros(int(graph.group.max()) + 1, np.int64)
    np.maximum.at(last_i, graph.group[it], pos[it])
    return bool(np.all(pos[gm] > last_i[graph.group[gm]]))


def algorithm1(graph: TaskGraph, params: Algorithm1Params) -> Schedule:
    """The Algorithm 1 schedule (one megakernel launch); MappingError if the parameters cannot hold."""
    st = _streams(graph)
    m = int(params.m)
    if m > st.n_g:
        raise MappingError(f"M={m} is not allowed: it must be at most the number of groups N_G={st.n_g}")
    step_blocks = m * (st.s_i + st.s_g)
    iters = params.d_go // step_blocks
    order = _build(st, params.d_ig, iters, m)
    if not _valid(graph, order):
        if not _gemms_after_itrans(graph, order):
            need = _min_d_ig(graph, st, m)
            raise MappingError(f"D_IG={params.d_ig} is too small for M={m}: GEMMs would precede their input "
                               f"transforms; D_IG >= {need} is needed (S_I={st.s_i}, S_G={st.s_g})")
        need_iters = next((i for i in range(iters + 1, st.n_g + 2) if _valid(graph, _build(st, params.d_ig, i, m))),
                          None)
        if need_iters is None:  # pragma: no cover - every GEMM precedes every output transform at n_g iterations
            raise MappingError(f"D_GO={params.d_go}: no valid map for D_IG={params.d_ig}, M={m}")
        raise MappingError(f"D_GO={params.d_go} is too small for M={m}: output transforms would precede their GEMMs; "
                           f"D_GO >= {need_iters * step_blocks} is needed (= {need_iters} x M(S_I+S_G))")
    return Schedule("fused", (Launch(order, name="megakernel"),), {"algorithm": "algorithm1", **params.as_dict()})


def default_params(graph: TaskGraph, m: int = 4) -> Algorithm1Params:
    """The tightest valid parameters for M (default 4, at most N_G): the smallest D_IG and D_GO."""
    st = _streams(graph)
    m = max(1, min(m, st.n_g))
    step_blocks = m * (st.s_i + st.s_g)
    d_ig = _min_d_ig(graph, st, m)
    for iters in range(1, st.n_g + 2):
        if _valid(graph, _build(st, d_ig, iters, m)):
            return Algorithm1Params(d_ig, iters * step_blocks, m)
    raise MappingError("no valid Algorithm 1 parameters found")  # pragma: no cover


# The GPU API's default mapping (``gpu.winograd.conv2d(mapping=None)``): M = 8 (at most N_G), D_IG = the
# smallest valid one plus 7 units, D_GO = 4x the smallest valid one (``scaled_params``'s multiples). Chosen
# on the H200 3xTF32 bench sweep of 2026-11-26 (the optimiser's 60-point space on the 13 Table-2 layers,
# nvidia-h200/gemm_3xtf32/winograd_bench.json in git at 871d7d7, 244dde8) as the fixed point with the
# least time over each layer's best: +1.0% geometric mean, at most +3.2%. On the sweeps it was not chosen
# on: H200 FP32 +0.9% (max 2.5%), H100 (2b51f5e) 3xTF32 +2.1% (4.3%), FP32 +1.5% (4.4%). The tightest
# parameters (``default_params``, M = 4, the model's default) measure +14% to +21% there (max +69%).
RECOMMENDED_M, RECOMMENDED_D_IG_X, RECOMMENDED_D_GO_X = 8, 8, 4


def recommended_params(graph: TaskGraph) -> Algorithm1Params:
    """The GPU API's default Algorithm 1 parameters for this graph (see RECOMMENDED_M above)."""
    return scaled_params(graph, min(RECOMMENDED_M, _streams(graph).n_g), RECOMMENDED_D_IG_X, RECOMMENDED_D_GO_X)


def scaled_params(graph: TaskGraph, m: int, d_ig_x: float = 1, d_go_x: float = 1) -> Algorithm1Params:
    """Parameters as multiples of the tightest valid ones for M (the optimiser's coordinates).

    ``D_IG = min + (d_ig_x - 1) * unit``, the unit being the smallest valid D_IG, or one step's worth
    of input transforms (``M * S_I``) when that is 0; ``D_GO = d_go_x * min``. Multiples >= 1 keep
    every point valid. MappingError when M exceeds the number of groups N_G.
    """
    st = _streams(graph)
    if m > st.n_g:
        raise MappingError(f"M={m} is not allowed: it must be at most the number of groups N_G={st.n_g}")
    for name, x in (("d_ig_x", d_ig_x), ("d_go_x", d_go_x)):
        if not x >= 1:
            raise MappingError(f"{name}={x!r} is not allowed: it must be a number >= 1")
    base = default_params(graph, m)
    unit = base.d_ig if base.d_ig > 0 else m * st.s_i
    return Algorithm1Params(int(base.d_ig + round((float(d_ig_x) - 1) * unit)),
                            int(round(float(d_go_x) * base.d_go)), m)
