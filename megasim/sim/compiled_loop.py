"""The engine's event handlers compiled with Numba: the same model, events and arithmetic as the SimPy
handlers (``megasim.sim.claims``, ``.phases``, ``.l2``, ``.servers``), for runs that need nothing from
SimPy's loop (no user processes; ``megasim.sim.compiled_run`` decides and drives).

**The same run, bit for bit.** Every handler here is a transcription of its Python twin: the same
floating-point operations in the same order (no fast-math, no contraction; ``x ** k`` as ``pow``), the
same tie rules, and the same order of events. The Python engine orders its events by (time, insertion
id) on SimPy's queue, and its batches and reserved places are proven there to give the order of one
event per call (``megasim.sim.clock``); this loop posts one event per call on its own binary heap,
ordered by (time, insertion id), and takes an insertion id exactly where the Python engine does (every
``after`` and every server ``_schedule``). A server keeps one live entry as the Python one does
(``_queued``): a completion that moves later re-queues it in its reserved place when it fires.
``tests/test_compiled_loop.py`` runs both engines on the same programs and compares every record.

**What it covers.** Every server rule (``megasim.sim.servers``): shared (one group), capped
(water-filling over cap classes), readiness (a group per class, blocks counted while they move their
data) and age-weighted readiness (a group per block, weighted water-filling in age order); co-residence
stretch, overlapped memory phases, dependency waits; per-task, persistent, blockIdx and ready-queue
dispatch; the L2 model (a byte per part instead of a big-integer mask, and an intrusive LRU list
instead of an ``OrderedDict``: the same hits, misses and evictions). Not covered: user SimPy processes
and their transfers.

**State.** Three Numba structures of arrays (``structref``: handlers receive a pointer, not a copy of
~100 arrays): ``Tables`` (read-only per run), ``State`` (everything that changes, scalars in the
registers ``ireg`` / ``freg``) and ``Launch`` (one launch's map, claim costs and ready lists). ``run_events`` pops events until the launch ends, a progress report is due, the queue
empties (a stall), the queue needs room (the caller grows it and calls again) or a server's heaps
outgrow their pool (the caller runs the SimPy handlers instead); so a run is resumable at those points.
It runs without the GIL: simulations on threads of one process run at once (the optimiser's own cluster
is one process of threads for that reason).

**Compilation.** The first run on a machine compiles this module (then Numba's disk cache holds it), so
it is laid out for Numba's compile time as well as for speed. Numba compiles every jitted function a
caller reaches on its own, then optimises and generates machine code for it together with a copy of
everything it calls; a chain of handlers calling handlers was compiled once per link, each time with all
below it. So:

- A handler returns what its Python twin calls last, and its caller calls that, at the same point of
  the run: ``_fire`` returns the jobs it ended (in ``done_buf``), ``_on_mem_start`` whether the memory
  phase ends at once, ``_mem_done`` the handler it ends with (``_comp_done`` or ``_join``, both
  ``_ends``), ``_take`` and ``_release`` whether (when) the task is ready; ``run_events`` then calls
  ``_mem_done`` and ``_finish``, the claims ``_ready``. So the handlers that ``run_events`` calls have
  that one call site: they are ``in_loop``, inlined by Numba into ``run_events`` and compiled with it.
  A server's ``enter`` and ``leave`` are written out in ``_on_mem_start`` and ``_mem_done``.
- The other functions are helpers (``helper``): compiled once each, without the Python and C wrappers an
  entry point has, and no cache entry of their own (their code is in the entry points'). Their arguments
  are int64 wherever they are integers (event kinds are ``np.int64``, int32 table entries are converted):
  Numba compiles a function anew for each distinct argument type, a literal constant included.
- The structures are made by one intrinsic each (``_constructor``), not the proxy's constructor, which
  compiles a typed setattr per field; their symbols are named by a digest of their fields' types, not the
  types' 7 kB names.

With an empty cache, ``megasim optimize resnet-1 --gpu H100 --budget 200`` took 18.4 s and 414 MB on 2
cores before this layout (its compile about 14.7 s), about 12 s and 300 MB with it (compile about 8 s).
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.core.extending import intrinsic
from numba.experimental import structref
from numba.experimental.jitclass.base import imp_dtor

from megasim.sim.resources import STRETCH_LEVELS
from megasim.sim.servers import AgeWeightedReadinessServer, ProcessorSharingServer

INF = np.inf

# How each function is compiled (module docstring, "Compilation"). The entry points, what ``compiled_run``
# calls, are ``njit(cache=True, no_cfunc_wrapper=True)``.
helper = njit(no_cpython_wrapper=True, no_cfunc_wrapper=True)     # compiled once, linked into its callers
in_loop = njit(inline="always")         # one call site, in run_events: its code is compiled as part of it

# Server rules (Tables.s_rule).
RULE_ONE = 0                # one group (SharedServer, or a CappedSharedServer of one class): _add_one, _fire_one
RULE_CAPPED = 1             # CappedSharedServer: a group per cap class, water-filling
RULE_READY = 2              # ReadinessSharedServer: a group per readiness class, blocks counted
RULE_AGE = 3                # AgeWeightedReadinessServer: a group per block, weighted water-filling
TOLERANCE = ProcessorSharingServer.tolerance          # jobs this close to a group's head finish with it
AGE_TOLERANCE = AgeWeightedReadinessServer.tolerance

# Class rows (State.class_of, Tables.caps): per task, its class on a server of that row.
ROW_MEM = 0                 # the memory system's cap classes
ROW_SM = 1                  # the SMs' share classes
ROW_STRETCH = 2             # the memory system's (cap, level) classes, set when a memory phase starts
ROW_READY = 3               # the SMs' readiness classes

# Event kinds (payload a, b).
# (int64, not int: Numba compiles a function anew for each literal argument it is given, so constants that
# are passed are typed int64; arguments are int64 throughout, one compiled signature per function)
EV_SLOT = np.int64(0)       # a slot is free: (sm, slot) claims
EV_MEM = np.int64(1)        # a task's memory phase starts: (task, -)
EV_WAKE = np.int64(2)       # a server's entry: (server, -); the entry's insertion id tells which
EV_SIGNAL = np.int64(3)     # ready queue: (task, pool offset of its released list or -1)
NO_PAYLOAD = np.int64(0)    # (b of EV_MEM, EV_WAKE)

# What a memory phase's end leads to (``_mem_done``; ``run_events`` runs it).
NEXT_NONE = 0               # the task's compute phase runs on its SM
NEXT_COMPUTED = 1           # _comp_done: it had no compute work
NEXT_JOIN = 2               # _join: the overlapped rest of its memory phase ended

# Integer registers (State.ireg).
R_EV_N = 0                  # entries in the event heap
R_EID = 1                   # next insertion id
R_PUSHED = 2                # entries pushed (the run's events)
R_NEXT = 3                  # cur_next: next map position (ready queue: next root to queue)
R_DONE = 4                  # cur_done: tasks ended in this launch
R_LEN = 5                   # cur_len
R_REPORT_AT = 6             # next progress report (-1: none)
R_STOP = 7                  # why run_events stopped (STOP_*)
R_RQ_HEAD = 8               # ready queue: head and tail in Launch.queue
R_RQ_TAIL = 9
R_IDLE_HEAD = 10            # idle slots (ring buffer in State.idle_sm / idle_slot)
R_IDLE_TAIL = 11
R_POOL_N = 12               # used length of State.pool
R_LRU_HEAD = 13             # L2 LRU list: oldest, newest, length
R_LRU_TAIL = 14
R_LRU_LEN = 15
R_REPORTED = 16             # cur_done at the last report
R_MEM = 17                  # the launch's memory-system server
R_SM0 = 18                  # the launch's first SM server
R_READY = 19                # the launch uses ready-queue dispatch
R_REPORT_EVERY = 20         # tasks between progress reports
R_PRESENCE = 21             # the launch's blocks count on their SM while they move data
R_PERSISTENT = 22           # the launch is a persistent grid
R_DISPATCHED = 23           # blocks dispatched so far (their ages)
R_HTOP = 24                 # used length of the group heaps' pool (State.h_*)
R_EVENT_LIMIT = 25          # the most entries the run may push (megasim.sim.clock.event_limit)
N_IREG = 26

# Float registers (State.freg).
F_NOW = 0
F_USED = 1                  # L2 resident bytes
F_EVICTED = 2               # L2 evicted bytes
F_LAUNCH_END = 3
N_FREG = 4

# Constants (Tables.consts).
C_INV_DRAM_BW = 0
C_INV_L2_BW = 1
C_DRAM_LATENCY = 2
C_L2_LATENCY = 3
C_ATOMIC = 4
C_L2_CAPACITY = 5
C_MIXED = 6                 # readiness servers' mixing factor
C_OVERLAP_ON = 7            # a kind overlaps memory and compute
C_STRETCH_ON = 8            # a kind gives coresident_stretch
C_TRACK_AGE = 9             # the spec weighs blocks by age
C_HIT_ON = 10               # a block's memory cap depends on its hit fraction (not GPUSpec.l2_ratio_implied)
C_L2_RATIO = 11             # the spec's block_l2_bw_ratio
N_CONSTS = 12

# Why run_events returned (bits of R_STOP, or one of the last three alone).
STOP_LAUNCH = 1             # the launch's last task ended
STOP_PROGRESS = 2           # a progress report is due (R_REPORTED tasks of this launch ended)
STOP_EMPTY = 4              # the queue is empty and the launch has not ended: a stall
STOP_GROW = 8               # the event heap needs room: grow it and call again
STOP_OVERFLOW = 16          # the group heaps' pool or a block list is full: this run needs the SimPy handlers
STOP_RUNAWAY = 32           # the run pushed more than R_EVENT_LIMIT entries (megasim.sim.clock: runaway guard)


class _StructType(types.StructRef):
    """A structure's type, its fields' types unliteral. Its symbols are named by a digest of its fields: the
    plain name lists every field's type (some 7 kB) in every symbol of every function given one."""

    def preprocess_fields(self, fields):
        return tuple((field, types.unliteral(typ)) for field, typ in fields)

    @property
    def mangling_args(self):
        return f"{self._typename}_{hashlib.sha256(self.name.encode()).hexdigest()[:20]}", ()

    def get_data_type(self):
        """The payload's type, made once per structure type (lowering asks for it at every field access)."""
        try:
            return _DATA_TYPES[self]
        except KeyError:
            return _DATA_TYPES.setdefault(self, super().get_data_type())


_DATA_TYPES = {}


@structref.register
class TablesType(_StructType):
    """Numba's type of a ``Tables``."""


class Tables(structref.StructRefProxy):
    """Per run, read only. Fields:

    - ``consts``: f8: C_*
    - ``kind_of``: i2[T] (the graph's)
    - ``compute_ns``: f8[T]
    - ``task_bytes``: f8[T]
    - ``rptr``: i8[T+1]: the task's tracked accesses
    - ``waits``: i4[T, W]: counters waited on (-1 unused; the graph's)
    - ``signals``: i4[T, S]: counters signalled (-1 unused; the graph's)
    - ``acc_region``: i4[A]
    - ``acc_lo``: i4[A]
    - ``acc_hi``: i4[A]
    - ``acc_step``: i4[A]
    - ``acc_count``: i4[A]: parts in range(lo, hi, step)
    - ``acc_nbytes``: f8[A]
    - ``acc_write``: u1[A]
    - ``part_off``: i8[R]: the region's first part (bit) in State.l2_bits
    - ``part_bytes``: f8[R]
    - ``region_parts``: i8[R]
    - ``caps``: f8[4, K]: per class row, the classes' caps (readiness: first-block readiness)
    - ``further``: f8[K]: readiness classes' further-block readiness
    - ``overlap``: f8[kinds]: memory_overlap
    - ``stretch``: f8[kinds]: coresident_stretch
    - ``hit_scale``: f8[kinds]: the scale of a memory job's hit level (``resources.block_rates``)
    - ``mem_class``: i8[kinds, STRETCH_LEVELS + 1]: the stretch class of a kind at a level
    - ``weights``: f8[M]: rho ** k (the age-weighted servers' weights, as they grow them)
    - ``weight_sums``: f8[M + 1]: sums of the first k weights
    - ``s_rule``: i8[NS]: RULE_*
    - ``s_row``: i8[NS]: the server's class row
    - ``s_k``: i8[NS]: its groups (classes)
    - ``s_is_mem``: u1[NS]: the memory system (else an SM)
    - ``k_max``: the most groups of any server (the stride of the g_* arrays)
    """

    FIELDS = ("consts", "kind_of", "compute_ns", "task_bytes", "rptr", "waits", "signals", "acc_region", "acc_lo",
              "acc_hi", "acc_step", "acc_count", "acc_nbytes", "acc_write", "part_off", "part_bytes",
              "region_parts", "caps", "further", "overlap", "stretch", "hit_scale", "mem_class", "weights",
              "weight_sums", "s_rule", "s_row", "s_k", "s_is_mem", "k_max",)


structref.define_proxy(Tables, TablesType, Tables.FIELDS)


@structref.register
class StateType(_StructType):
    """Numba's type of a ``State``."""


class State(structref.StructRefProxy):
    """Everything a run changes (its arrays; the event heap's are replaced as it grows). Fields:

    - ``ireg``
    - ``freg``
    - ``ev_t``: event heap: time, insertion id, kind, payload a, b
    - ``ev_e``
    - ``ev_k``
    - ``ev_a``
    - ``ev_b``
    - ``class_of``: i4[4, T]: per class row, each task's class (ROW_STRETCH set as phases start)
    - ``remaining``: i8[C]: counter values
    - ``w_head``: i8[C]: waiters per counter, a FIFO list through w_next
    - ``w_tail``
    - ``w_next``: i8[T]
    - ``claim``: f8[T] records
    - ``ready``
    - ``mem_start``
    - ``comp_start``
    - ``end``
    - ``claim_cost``
    - ``check_at``
    - ``mem_work``
    - ``mem_rest``: f8[T]: the overlapped rest of a memory phase; -1 once it runs
    - ``pending``: i8[T]: overlapped phases still running beside the compute phase
    - ``age_of``: i8[T]: its block's dispatch number (with ages weighed; else i8[1])
    - ``block_age``: i8[SM, slots]: a persistent launch's blocks' ages (-1: none yet)
    - ``sm_of``: i4[T]
    - ``slot_of``: i4[T]
    - ``miss``: f8[A]: DRAM bytes of each access
    - ``l2_bits``: u8[sum of parts / 64]: resident parts, a bit each
    - ``l2_count``: i8[R]: resident parts per region
    - ``lru_prev``: i8[R]
    - ``lru_next``: i8[R]
    - ``in_lru``: u1[R]
    - ``s_t``: f8[NS] servers: last update, next completion, live entry, cap
    - ``s_due``
    - ``s_queued``
    - ``s_cap``
    - ``s_seq``: i8[NS]: arrivals, next completion's id, live entry's id, jobs computing
    - ``s_due_eid``
    - ``s_queued_eid``
    - ``s_n``
    - ``g_vt``: f8[NS * K]: per group, virtual time and rate
    - ``g_rate``
    - ``g_len``: i8[NS * K]: jobs in the group's heap
    - ``g_off``: i8[NS * K]: its heap's place in the pool h_*, and room
    - ``g_cap``
    - ``g_blocks``: i8[NS * K]: readiness servers: blocks on the SM per class
    - ``g_active``: i8[NS * K]: per server, its groups with jobs computing, ascending (``_active``)
    - ``s_active``: i8[NS]: how many
    - ``h_key``: f8[H]: group heaps of (finish virtual time, seq, job)
    - ``h_seq``
    - ``h_job``
    - ``j_vt``: f8[T]: age-weighted servers: a computing job's virtual time and rate (else f8[1])
    - ``j_rate``
    - ``j_on``: u1[T]: the job computes on an age-weighted server
    - ``a_job``: i8[NS, M]: age-weighted servers: blocks oldest first, their ages, classes
    - ``a_age``
    - ``a_cls``
    - ``a_n``: i8[NS]
    - ``a_act``: i8[NS, M]: computing blocks in the order the water-filling visits them
    - ``a_nact``: i8[NS]
    - ``a_cnt``: i8[NS, K]: blocks per class present
    - ``a_cord``: i8[NS, K]: the classes present, in order of arrival
    - ``a_ncls``: i8[NS]
    - ``a_order``: i8[M]: scratch: the water-filling's visiting order
    - ``done_buf``: i8: the jobs whose phase the event handled ends (a server's completion's; a memory phase
      with no work)
    - ``pool``: i8: ready queue: released lists ([length, entries...])
    - ``idle_sm``: i8: ready queue: idle slots (ring)
    - ``idle_slot``
    """

    FIELDS = ("ireg", "freg", "ev_t", "ev_e", "ev_k", "ev_a", "ev_b", "class_of", "remaining", "w_head", "w_tail",
              "w_next", "claim", "ready", "mem_start", "comp_start", "end", "claim_cost", "check_at",
              "mem_work", "mem_rest", "pending", "age_of", "block_age", "sm_of", "slot_of", "miss", "l2_bits",
              "l2_count", "lru_prev", "lru_next", "in_lru", "s_t", "s_due", "s_queued", "s_cap", "s_seq",
              "s_due_eid", "s_queued_eid", "s_n", "g_vt", "g_rate", "g_len", "g_off", "g_cap", "g_blocks",
              "g_active", "s_active", "h_key", "h_seq", "h_job", "j_vt", "j_rate", "j_on", "a_job", "a_age",
              "a_cls", "a_n", "a_act", "a_nact", "a_cnt", "a_cord", "a_ncls", "a_order", "done_buf", "pool",
              "idle_sm", "idle_slot",)


structref.define_proxy(State, StateType, State.FIELDS)


@structref.register
class LaunchType(_StructType):
    """Numba's type of a ``Launch``."""


class Launch(structref.StructRefProxy):
    """One launch. Fields:

    - ``order``: i8[L]: tasks in map order
    - ``check_ns``: f8[kinds]: claim -> ready when the parents are done
    - ``fixed_ns``: f8[T]: the task's fixed latency in this launch (plain or megakernel)
    - ``roots``: ready queue (megasim.ready.ReadyLists), as i8
    - ``counter_ptr``
    - ``counter_groups``
    - ``pending``: changes: a group's counters still pending
    - ``group_ptr``
    - ``group_positions``
    - ``is_root``: u1[L]: the map position is a root
    - ``pos_of``: i8[T]: ready queue: the map position a task was taken from (else i8[1])
    - ``queue``: i8[L + 1]: ready queue: queued map positions
    """

    FIELDS = ("order", "check_ns", "fixed_ns", "roots", "counter_ptr", "counter_groups", "pending", "group_ptr",
              "group_positions", "is_root", "pos_of", "queue",)


structref.define_proxy(Launch, LaunchType, Launch.FIELDS)


def _constructor(type_class, fields):
    """An intrinsic that makes a structure of `type_class` from a tuple of its `fields`' values, in order: what
    ``structref.new`` and a setattr per field do, in one function (the proxy's constructor compiles a setattr,
    with its typing, per field)."""

    @intrinsic
    def make(typingctx, values):
        inst_type = type_class(list(zip(fields, values.types)))

        def codegen(context, builder, signature, args):
            data_type = inst_type.get_data_type()
            alloc_type = context.data_model_manager[data_type].get_value_type()
            meminfo = context.nrt.meminfo_alloc_dtor(
                builder, context.get_constant(types.uintp, context.get_abi_sizeof(alloc_type)),
                imp_dtor(context, builder.module, inst_type))
            data_pointer = builder.bitcast(context.nrt.meminfo_data(builder, meminfo), alloc_type.as_pointer())
            builder.store(cgutils.get_null_value(alloc_type), data_pointer)
            data = cgutils.create_struct_proxy(data_type)(context, builder, ref=data_pointer)
            for i, (field, field_type) in enumerate(inst_type._fields):
                value = context.cast(builder, builder.extract_value(args[0], i), values.types[i], field_type)
                context.nrt.incref(builder, field_type, value)
                setattr(data, field, value)
            inst = context.make_helper(builder, inst_type)
            inst.meminfo = meminfo
            return inst._getvalue()

        return inst_type(values), codegen

    return make


_make_tables = _constructor(TablesType, Tables.FIELDS)
_make_state = _constructor(StateType, State.FIELDS)
_make_launch = _constructor(LaunchType, Launch.FIELDS)


@njit(cache=True, no_cfunc_wrapper=True)
def new_tables(*fields):
    """A ``Tables`` of its fields' values (in ``Tables.FIELDS`` order), made in compiled code (the proxy's own
    constructor compiles anew in every process)."""
    return _make_tables(fields)


@njit(cache=True, no_cfunc_wrapper=True)
def new_state(*fields):
    """A ``State`` of its fields' arrays (in ``State.FIELDS`` order), made in compiled code."""
    return _make_state(fields)


@njit(cache=True, no_cfunc_wrapper=True)
def new_launch(*fields):
    """A ``Launch`` of its fields' arrays (in ``Launch.FIELDS`` order), made in compiled code."""
    return _make_launch(fields)


# --- the event heap --------------------------------------------------------------------------------
@helper
def _push(st, t, eid, kind, a, b):
    ir = st.ireg
    i = ir[R_EV_N]
    ir[R_EV_N] = i + 1
    ir[R_PUSHED] += 1
    ev_t, ev_e = st.ev_t, st.ev_e
    while i > 0:
        p = (i - 1) >> 1
        if ev_t[p] < t or (ev_t[p] == t and ev_e[p] < eid):
            break
        ev_t[i] = ev_t[p]
        ev_e[i] = ev_e[p]
        st.ev_k[i] = st.ev_k[p]
        st.ev_a[i] = st.ev_a[p]
        st.ev_b[i] = st.ev_b[p]
        i = p
    ev_t[i] = t
    ev_e[i] = eid
    st.ev_k[i] = kind
    st.ev_a[i] = a
    st.ev_b[i] = b


@in_loop
def _pop_top(st):
    """Remove the heap's first entry (read it before)."""
    ir = st.ireg
    n = ir[R_EV_N] - 1
    ir[R_EV_N] = n
    if n == 0:
        return
    ev_t, ev_e = st.ev_t, st.ev_e
    t, e, k, a, b = ev_t[n], ev_e[n], st.ev_k[n], st.ev_a[n], st.ev_b[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        r = c + 1
        if r < n and (ev_t[r] < ev_t[c] or (ev_t[r] == ev_t[c] and ev_e[r] < ev_e[c])):
            c = r
        if t < ev_t[c] or (t == ev_t[c] and e < ev_e[c]):
            break
        ev_t[i] = ev_t[c]
        ev_e[i] = ev_e[c]
        st.ev_k[i] = st.ev_k[c]
        st.ev_a[i] = st.ev_a[c]
        st.ev_b[i] = st.ev_b[c]
        i = c
    ev_t[i] = t
    ev_e[i] = e
    st.ev_k[i] = k
    st.ev_a[i] = a
    st.ev_b[i] = b


@helper
def _after(st, delay, kind, a, b):
    """ModelEnvironment.after: call the handler `delay` ns from now (an insertion id now)."""
    ir = st.ireg
    eid = ir[R_EID]
    ir[R_EID] = eid + 1
    _push(st, st.freg[F_NOW] + delay, eid, kind, a, b)


# --- the servers (megasim.sim.servers) -------------------------------------------------------------
@helper
def _hpush(st, base, n, key, seq, job):
    """Push onto the group heap at `base` holding `n` entries."""
    hk, hs, hj = st.h_key, st.h_seq, st.h_job
    i = n
    while i > 0:
        p = (i - 1) >> 1
        if hk[base + p] < key or (hk[base + p] == key and hs[base + p] < seq):
            break
        hk[base + i] = hk[base + p]
        hs[base + i] = hs[base + p]
        hj[base + i] = hj[base + p]
        i = p
    hk[base + i] = key
    hs[base + i] = seq
    hj[base + i] = job


@helper
def _hpop(st, base, n):
    """Pop the first of the `n` entries of the group heap at `base`; its job."""
    hk, hs, hj = st.h_key, st.h_seq, st.h_job
    job = hj[base]
    n -= 1
    if n > 0:
        key, seq, last = hk[base + n], hs[base + n], hj[base + n]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            r = c + 1
            if r < n and (hk[base + r] < hk[base + c] or (hk[base + r] == hk[base + c] and hs[base + r] < hs[base + c])):
                c = r
            if key < hk[base + c] or (key == hk[base + c] and seq < hs[base + c]):
                break
            hk[base + i] = hk[base + c]
            hs[base + i] = hs[base + c]
            hj[base + i] = hj[base + c]
            i = c
        hk[base + i] = key
        hs[base + i] = seq
        hj[base + i] = last
    return job


@helper
def _group_push(tb, st, s, g, key, seq, job):
    """Push onto server s's group g's heap, moving it to a room twice as large at the pool's end when it
    is full (False: the pool is full too); a group that had no job joins the server's active groups."""
    gi = s * tb.k_max + g
    n = st.g_len[gi]
    if n == 0:                          # active.append(g); active.sort()
        a0 = s * tb.k_max
        i = st.s_active[s]
        while i > 0 and st.g_active[a0 + i - 1] > g:
            st.g_active[a0 + i] = st.g_active[a0 + i - 1]
            i -= 1
        st.g_active[a0 + i] = g
        st.s_active[s] += 1
    if n == st.g_cap[gi]:
        top = st.ireg[R_HTOP]
        cap = 2 * n if n > 0 else 8
        if top + cap > st.h_key.shape[0]:
            st.ireg[R_STOP] = STOP_OVERFLOW
            return False
        old = st.g_off[gi]
        for i in range(n):
            st.h_key[top + i] = st.h_key[old + i]
            st.h_seq[top + i] = st.h_seq[old + i]
            st.h_job[top + i] = st.h_job[old + i]
        st.g_off[gi] = top
        st.g_cap[gi] = cap
        st.ireg[R_HTOP] = top + cap
    _hpush(st, st.g_off[gi], n, key, seq, job)
    st.g_len[gi] = n + 1
    return True


@helper
def _schedule(st, s, due):
    """ProcessorSharingServer._schedule."""
    ir = st.ireg
    eid = ir[R_EID]
    ir[R_EID] = eid + 1
    st.s_due[s] = due
    st.s_due_eid[s] = eid
    if st.s_queued[s] > due:
        st.s_queued[s] = due
        st.s_queued_eid[s] = eid
        _push(st, due, eid, EV_WAKE, s, NO_PAYLOAD)


@helper
def _advance(tb, st, s, now):
    """ProcessorSharingServer._advance: the groups computing (an age-weighted server's: its computing
    blocks) receive dt * rate."""
    dt = now - st.s_t[s]
    if dt > 0.0:
        if tb.s_rule[s] == RULE_AGE:
            for i in range(st.a_nact[s]):
                j = st.a_act[s, i]
                st.j_vt[j] += dt * st.j_rate[j]
        else:
            g0 = s * tb.k_max
            for i in range(st.s_active[s]):
                gi = g0 + st.g_active[g0 + i]
                st.g_vt[gi] += dt * st.g_rate[gi]
    st.s_t[s] = now


@helper
def _next_delay(tb, st, s):
    """The least time to a completion at the current rates (jobs are computing)."""
    best = INF
    if tb.s_rule[s] == RULE_AGE:
        for i in range(st.a_nact[s]):
            j = st.a_act[s, i]
            d = (0.0 - st.j_vt[j]) / st.j_rate[j]
            if d < best:
                best = d
        return best
    g0 = s * tb.k_max
    for i in range(st.s_active[s]):
        gi = g0 + st.g_active[g0 + i]
        d = (st.h_key[st.g_off[gi]] - st.g_vt[gi]) / st.g_rate[gi]
        if d < best:
            best = d
    return best


@helper
def _post(tb, st, s, now):
    best = _next_delay(tb, st, s)
    _schedule(st, s, now + (best if best > 0.0 else 0.0))


@helper
def _capped_rates_next(tb, st, s):
    """CappedSharedServer._rates_next (classes in ascending cap order: classes_of sorts them)."""
    g0 = s * tb.k_max
    row = tb.s_row[s]
    active = st.s_active[s]
    if active == 1:
        only = st.g_active[g0]
        fair = 1.0 / st.s_n[s]
        cap = tb.caps[row, only]
        r = fair if fair < cap else cap
        st.g_rate[g0 + only] = r
        return (st.h_key[st.g_off[g0 + only]] - st.g_vt[g0 + only]) / r
    remaining = 1.0
    jobs = st.s_n[s]
    best = INF
    for i in range(active):
        c = st.g_active[g0 + i]
        n = st.g_len[g0 + c]
        fair = remaining / jobs
        cap = tb.caps[row, c]
        if cap < fair:
            st.g_rate[g0 + c] = cap
            remaining -= n * cap
            jobs -= n
            d = (st.h_key[st.g_off[g0 + c]] - st.g_vt[g0 + c]) / cap
        else:
            st.g_rate[g0 + c] = fair
            d = (st.h_key[st.g_off[g0 + c]] - st.g_vt[g0 + c]) / fair
            if d < best:
                best = d
            for i2 in range(i + 1, active):
                c2 = st.g_active[g0 + i2]
                st.g_rate[g0 + c2] = fair
                d = (st.h_key[st.g_off[g0 + c2]] - st.g_vt[g0 + c2]) / fair
                if d < best:
                    best = d
            return best
        if d < best:
            best = d
    return best


@helper
def _ready_rates(tb, st, s):
    """ReadinessSharedServer._rates: U over the blocks present, water-filled over their readiness."""
    g0 = s * tb.k_max
    k = tb.s_k[s]
    blocks = 0
    classes = 0
    idle = 1.0
    for c in range(k):
        n = st.g_blocks[g0 + c]
        blocks += n
        if n > 0:
            classes += 1
            idle *= (1.0 - tb.caps[ROW_READY, c]) * math.pow(1.0 - tb.further[c], float(n - 1))
    remaining = 1.0 - idle
    mixed = tb.consts[C_MIXED]
    if mixed < 1.0 and classes > 1:
        remaining *= mixed
    level = -1.0
    for c in range(k):
        n = st.g_blocks[g0 + c]
        if n == 0:
            continue
        if level < 0.0:
            fair = remaining / blocks
            ready = tb.caps[ROW_READY, c]
            if ready <= fair:
                st.g_rate[g0 + c] = ready
                remaining -= n * ready
                blocks -= n
                continue
            level = fair
        st.g_rate[g0 + c] = level


@helper
def _age_rates(tb, st, s):
    """AgeWeightedReadinessServer._rates: weighted water-filling of U over the blocks on the SM, the
    k-th oldest weighing rho ** k; the computing ones, in the order visited, become the active list."""
    n = st.a_n[s]
    idle = 1.0
    for i in range(st.a_ncls[s]):
        c = st.a_cord[s, i]
        m = st.a_cnt[s, c]
        idle *= (1.0 - tb.caps[ROW_READY, c]) * math.pow(1.0 - tb.further[c], float(m - 1))
    remaining = 1.0 - idle
    mixed = tb.consts[C_MIXED]
    if mixed < 1.0 and st.a_ncls[s] > 1:
        remaining *= mixed
    w = tb.weights
    order = st.a_order
    for r in range(n):              # stable insertion sort by demand / weight (one class: age order)
        order[r] = r
        if st.a_ncls[s] > 1:
            key = tb.caps[ROW_READY, st.a_cls[s, r]] / w[r]
            i = r
            while i > 0 and tb.caps[ROW_READY, st.a_cls[s, order[i - 1]]] / w[order[i - 1]] > key:
                order[i] = order[i - 1]
                i -= 1
            order[i] = r
    total_w = tb.weight_sums[n]
    level = -1.0
    nact = 0
    for i in range(n):
        r = order[i]
        job = st.a_job[s, r]
        if level < 0.0:
            demand = tb.caps[ROW_READY, st.class_of[ROW_READY, job]]
            if demand * total_w <= remaining * w[r]:
                if st.j_on[job]:
                    st.j_rate[job] = demand
                    st.a_act[s, nact] = job
                    nact += 1
                remaining -= demand
                total_w -= w[r]
                continue
            level = remaining / total_w
        if st.j_on[job]:
            st.j_rate[job] = level * w[r]
            st.a_act[s, nact] = job
            nact += 1
    st.a_nact[s] = nact


@helper
def _rates(tb, st, s):
    if tb.s_rule[s] == RULE_AGE:
        _age_rates(tb, st, s)
    else:
        _ready_rates(tb, st, s)


@helper
def _arrive(tb, st, s, job):
    """A block comes onto a readiness or age-weighted SM."""
    c = st.class_of[ROW_READY, job]
    if tb.s_rule[s] == RULE_READY:
        st.g_blocks[s * tb.k_max + c] += 1
        return
    n = st.a_n[s]
    if n >= st.a_job.shape[1]:
        st.ireg[R_STOP] = STOP_OVERFLOW
        return
    age = st.age_of[job]
    i = n                           # bisect_right: after every block as old or older
    while i > 0 and st.a_age[s, i - 1] > age:
        st.a_job[s, i] = st.a_job[s, i - 1]
        st.a_age[s, i] = st.a_age[s, i - 1]
        st.a_cls[s, i] = st.a_cls[s, i - 1]
        i -= 1
    st.a_job[s, i] = job
    st.a_age[s, i] = age
    st.a_cls[s, i] = c
    st.a_n[s] = n + 1
    if st.a_cnt[s, c] == 0:
        st.a_cord[s, st.a_ncls[s]] = c
        st.a_ncls[s] += 1
    st.a_cnt[s, c] += 1


@helper
def _depart(tb, st, s, job):
    """A block leaves a readiness or age-weighted SM."""
    c = st.class_of[ROW_READY, job]
    if tb.s_rule[s] == RULE_READY:
        st.g_blocks[s * tb.k_max + c] -= 1
        return
    n = st.a_n[s]
    i = 0
    while st.a_job[s, i] != job:
        i += 1
    for r in range(i, n - 1):
        st.a_job[s, r] = st.a_job[s, r + 1]
        st.a_age[s, r] = st.a_age[s, r + 1]
        st.a_cls[s, r] = st.a_cls[s, r + 1]
    st.a_n[s] = n - 1
    st.a_cnt[s, c] -= 1
    if st.a_cnt[s, c] == 0:
        m = st.a_ncls[s]
        i = 0
        while st.a_cord[s, i] != c:
            i += 1
        for r in range(i, m - 1):
            st.a_cord[s, r] = st.a_cord[s, r + 1]
        st.a_ncls[s] = m - 1
    st.j_on[job] = 0


@helper
def _idle_beside(tb, st, s, job):
    """The SM's idle fraction without one block of `job`'s class (``idle_beside``)."""
    leave_out = st.class_of[ROW_READY, job]
    idle = 1.0
    if tb.s_rule[s] == RULE_READY:
        g0 = s * tb.k_max
        for c in range(tb.s_k[s]):
            n = st.g_blocks[g0 + c]
            if c == leave_out:
                n -= 1
            if n > 0:
                idle *= (1.0 - tb.caps[ROW_READY, c]) * math.pow(1.0 - tb.further[c], float(n - 1))
        return idle
    present = False
    for i in range(st.a_n[s]):
        if st.a_job[s, i] == job:
            present = True
    if not present:
        leave_out = -1
    for i in range(st.a_ncls[s]):
        c = st.a_cord[s, i]
        n = st.a_cnt[s, c]
        if c == leave_out:
            n -= 1
        if n > 0:
            idle *= (1.0 - tb.caps[ROW_READY, c]) * math.pow(1.0 - tb.further[c], float(n - 1))
    return idle


@helper
def _start_computing(tb, st, s, job, work):
    """``leave`` then ``add`` in one change: the block stays on the SM."""
    now = st.freg[F_NOW]
    _advance(tb, st, s, now)
    if tb.s_rule[s] == RULE_AGE:
        st.j_vt[job] = -work
        st.j_on[job] = 1
    else:
        g = np.int64(st.class_of[ROW_READY, job])
        st.s_seq[s] += 1
        if not _group_push(tb, st, s, g, st.g_vt[s * tb.k_max + g] + work, st.s_seq[s], job):
            return
    st.s_n[s] += 1
    _rates(tb, st, s)
    _post(tb, st, s, now)


@helper
def _add(tb, st, s, job, work):
    """The server's ``add``."""
    now = st.freg[F_NOW]
    rule = tb.s_rule[s]
    if rule == RULE_AGE:
        _arrive(tb, st, s, job)
        _start_computing(tb, st, s, job, work)
        return
    g0 = s * tb.k_max
    if rule == RULE_ONE:                # _add_one, SharedServer._rates
        if st.g_len[g0] > 0:
            dt = now - st.s_t[s]
            if dt > 0.0:
                st.g_vt[g0] += dt * st.g_rate[g0]
        st.s_t[s] = now
        st.s_seq[s] += 1
        if not _group_push(tb, st, s, np.int64(0), st.g_vt[g0] + work, st.s_seq[s], job):
            return
        st.s_n[s] += 1
        fair = 1.0 / st.s_n[s]
        cap = st.s_cap[s]
        rate = fair if fair < cap else cap
        st.g_rate[g0] = rate
        delay = (st.h_key[st.g_off[g0]] - st.g_vt[g0]) / rate
        due = now + (delay if delay > 0.0 else 0.0)
    else:                               # _add with the rule's _rates_next
        _advance(tb, st, s, now)
        if rule == RULE_READY:
            _arrive(tb, st, s, job)
        g = np.int64(st.class_of[tb.s_row[s], job])
        st.s_seq[s] += 1
        if not _group_push(tb, st, s, g, st.g_vt[g0 + g] + work, st.s_seq[s], job):
            return
        st.s_n[s] += 1
        if rule == RULE_CAPPED:
            best = _capped_rates_next(tb, st, s)
        else:
            _ready_rates(tb, st, s)
            best = _next_delay(tb, st, s)
        due = now + (best if best > 0.0 else 0.0)
    if st.s_due[s] <= due:              # keep_earlier: a pending completion that is not later stays
        return
    _schedule(st, s, due)


@helper
def _snap(tb, st, s, now):
    """ProcessorSharingServer._snap: a fire that ended no job would fire again at `now` for ever (the
    least work left takes less than the clock's resolution there); the jobs (groups) whose finish
    rounds to `now` get their work, and the next fire ends them."""
    if tb.s_rule[s] == RULE_AGE:
        for i in range(st.a_nact[s]):
            j = st.a_act[s, i]
            if now + (0.0 - st.j_vt[j]) / st.j_rate[j] == now:
                st.j_vt[j] = 0.0
        return
    g0 = s * tb.k_max
    for i in range(st.s_active[s]):
        gi = g0 + st.g_active[g0 + i]
        head = st.h_key[st.g_off[gi]]
        if now + (head - st.g_vt[gi]) / st.g_rate[gi] == now:
            st.g_vt[gi] = head


@in_loop
def _fire(tb, st, s):
    """The server's next completion is due: its rule's ``_fire``. Returns how many jobs it ended (the first of
    ``done_buf``); ``run_events`` runs their handlers."""
    now = st.freg[F_NOW]
    g0 = s * tb.k_max
    done = st.done_buf
    nd = 0
    rule = tb.s_rule[s]
    if rule == RULE_ONE:                # _fire_one
        base = st.g_off[g0]
        dt = now - st.s_t[s]
        st.s_t[s] = now
        if dt > 0.0:
            st.g_vt[g0] += dt * st.g_rate[g0]
        v = st.g_vt[g0]
        head = st.h_key[base]
        tolerance = TOLERANCE * (head if head > 1.0 else 1.0)
        if head > v + tolerance:        # early: re-arm
            delay = (head - v) / st.g_rate[g0]
            due = now + (delay if delay > 0.0 else 0.0)
            if due == now:              # (_snap)
                st.g_vt[g0] = head
            _schedule(st, s, due)
            return 0
        if head > v:
            st.g_vt[g0] = head
        limit = head + tolerance
        n = st.g_len[g0]
        done[nd] = _hpop(st, base, n)
        nd += 1
        n -= 1
        while n > 0 and st.h_key[base] <= limit:
            done[nd] = _hpop(st, base, n)
            nd += 1
            n -= 1
        st.g_len[g0] = n
        if n > 0:
            st.s_n[s] -= nd
            fair = 1.0 / st.s_n[s]
            cap = st.s_cap[s]
            rate = fair if fair < cap else cap
            st.g_rate[g0] = rate
            delay = (st.h_key[base] - st.g_vt[g0]) / rate
            _schedule(st, s, now + (delay if delay > 0.0 else 0.0))
        else:
            st.s_n[s] = 0
            st.s_active[s] = 0
            st.s_due[s] = INF
    elif rule == RULE_AGE:              # AgeWeightedReadinessServer._fire_groups
        dt = now - st.s_t[s]
        st.s_t[s] = now
        for i in range(st.a_nact[s]):
            j = st.a_act[s, i]
            if dt > 0.0:
                st.j_vt[j] += dt * st.j_rate[j]
            v = st.j_vt[j]
            if 0.0 > v + AGE_TOLERANCE:
                continue
            if 0.0 > v:
                st.j_vt[j] = 0.0
            done[nd] = j
            nd += 1
        if nd > 0:
            st.s_n[s] -= nd
            for i in range(nd):
                _depart(tb, st, s, done[i])
            if st.s_n[s]:
                _age_rates(tb, st, s)
            else:
                st.a_nact[s] = 0
        if st.s_n[s]:
            best = _next_delay(tb, st, s)
            due = now + (best if best > 0.0 else 0.0)
            if nd == 0 and due == now:
                _snap(tb, st, s, now)
            _schedule(st, s, due)
        else:
            st.s_due[s] = INF
    else:                               # _fire_groups
        dt = now - st.s_t[s]
        st.s_t[s] = now
        active = st.s_active[s]
        for i in range(active):
            gi = g0 + st.g_active[g0 + i]
            n = st.g_len[gi]
            if dt > 0.0:
                st.g_vt[gi] += dt * st.g_rate[gi]
            base = st.g_off[gi]
            head = st.h_key[base]
            tolerance = TOLERANCE * (head if head > 1.0 else 1.0)
            if head > st.g_vt[gi] + tolerance:
                continue
            if head > st.g_vt[gi]:
                st.g_vt[gi] = head
            limit = head + tolerance
            done[nd] = _hpop(st, base, n)
            nd += 1
            n -= 1
            while n > 0 and st.h_key[base] <= limit:
                done[nd] = _hpop(st, base, n)
                nd += 1
                n -= 1
            st.g_len[gi] = n
        if nd > 0:
            st.s_n[s] -= nd
            kept = 0                    # the groups emptied leave the active ones
            for i in range(active):
                g = st.g_active[g0 + i]
                if st.g_len[g0 + g] > 0:
                    st.g_active[g0 + kept] = g
                    kept += 1
            st.s_active[s] = kept
            if rule == RULE_READY:
                for i in range(nd):
                    _depart(tb, st, s, done[i])
        if st.s_n[s] > 0:
            if nd == 0:
                best = _next_delay(tb, st, s)
            elif rule == RULE_CAPPED:
                best = _capped_rates_next(tb, st, s)
            else:
                _ready_rates(tb, st, s)
                best = _next_delay(tb, st, s)
            due = now + (best if best > 0.0 else 0.0)
            if nd == 0 and due == now:
                _snap(tb, st, s, now)
            _schedule(st, s, due)
        else:
            st.s_due[s] = INF
    return nd


@in_loop
def _on_wake(st, s, eid):
    """ProcessorSharingServer._on_wake up to ``_fire``: whether the server fires now (``run_events`` fires it)."""
    if eid != st.s_queued_eid[s]:
        return False
    st.s_queued[s] = INF
    st.s_queued_eid[s] = -1
    if eid == st.s_due_eid[s]:
        return True
    if st.s_due[s] != INF:
        st.s_queued[s] = st.s_due[s]
        st.s_queued_eid[s] = st.s_due_eid[s]
        _push(st, st.s_due[s], st.s_due_eid[s], EV_WAKE, s, NO_PAYLOAD)
    return False


# --- the L2 (megasim.sim.l2) -----------------------------------------------------------------------
@helper
def _lru_unlink(st, r):
    ir = st.ireg
    p, n = st.lru_prev[r], st.lru_next[r]
    if p >= 0:
        st.lru_next[p] = n
    else:
        ir[R_LRU_HEAD] = n
    if n >= 0:
        st.lru_prev[n] = p
    else:
        ir[R_LRU_TAIL] = p


@helper
def _lru_append(st, r):
    ir = st.ireg
    tail = ir[R_LRU_TAIL]
    st.lru_prev[r] = tail
    st.lru_next[r] = -1
    if tail >= 0:
        st.lru_next[tail] = r
    else:
        ir[R_LRU_HEAD] = r
    ir[R_LRU_TAIL] = r


@helper
def _l2_access(tb, st, j):
    """L2Cache.access_parts of tracked access j: its DRAM bytes."""
    region = np.int64(tb.acc_region[j])
    nbytes = tb.acc_nbytes[j]
    write = tb.acc_write[j] != 0
    base = tb.part_off[region]
    bits = st.l2_bits
    n_new = 0
    for p in range(tb.acc_lo[j], tb.acc_hi[j], tb.acc_step[j]):
        b = base + p
        word = b >> 6
        bit = np.uint64(1) << np.uint64(b & 63)
        if bits[word] & bit == 0:
            bits[word] |= bit
            n_new += 1
    if n_new:
        st.l2_count[region] += n_new
        st.freg[F_USED] += n_new * tb.part_bytes[region]
        miss = nbytes if write else nbytes * n_new / tb.acc_count[j]
    else:
        miss = nbytes if write else 0.0
    ir = st.ireg
    if st.in_lru[region]:
        if ir[R_LRU_TAIL] != region:
            _lru_unlink(st, region)
            _lru_append(st, region)
    else:
        st.in_lru[region] = 1
        ir[R_LRU_LEN] += 1
        _lru_append(st, region)
    if st.freg[F_USED] > tb.consts[C_L2_CAPACITY]:
        _evict(tb, st, region)
    return miss


@helper
def _clear_bits(bits, lo, hi):
    """Clear bits [lo, hi) of the bit array (whole words where it can: mask = 0 in L2Cache)."""
    if lo >= hi:
        return
    first, last = lo >> 6, (hi - 1) >> 6
    low = np.uint64(lo & 63)
    high = np.uint64((hi - 1) & 63)
    ones = ~np.uint64(0)
    if first == last:
        span = (ones >> (np.uint64(63) - high)) & (ones << low)
        bits[first] &= ~span
        return
    bits[first] &= ~(ones << low)
    for w in range(first + 1, last):
        bits[w] = np.uint64(0)
    bits[last] &= ~(ones >> (np.uint64(63) - high))


@helper
def _evict(tb, st, keep):
    ir, fr = st.ireg, st.freg
    capacity = tb.consts[C_L2_CAPACITY]
    while fr[F_USED] > capacity and ir[R_LRU_LEN] > 1:
        victim = ir[R_LRU_HEAD]
        if victim == keep:
            _lru_unlink(st, victim)
            _lru_append(st, victim)
            continue
        _lru_unlink(st, victim)
        st.in_lru[victim] = 0
        ir[R_LRU_LEN] -= 1
        freed = st.l2_count[victim] * tb.part_bytes[victim]
        fr[F_USED] -= freed
        fr[F_EVICTED] += freed
        _clear_bits(st.l2_bits, tb.part_off[victim], tb.part_off[victim] + tb.region_parts[victim])
        st.l2_count[victim] = 0


# --- phases (megasim.sim.phases) -------------------------------------------------------------------
@helper
def _ready(tb, st, ln, task, at):
    st.ready[task] = at
    dram = 0.0
    for j in range(tb.rptr[task], tb.rptr[task + 1]):
        miss = _l2_access(tb, st, j)
        st.miss[j] = miss
        dram += miss
    l2_bytes = tb.task_bytes[task]
    c = tb.consts
    work = dram * c[C_INV_DRAM_BW]
    if l2_bytes * c[C_INV_L2_BW] > work:
        work = l2_bytes * c[C_INV_L2_BW]
    latency = (c[C_DRAM_LATENCY] if dram > 0.0 else c[C_L2_LATENCY]) if l2_bytes > 0.0 else 0.0
    if c[C_OVERLAP_ON] != 0.0:
        o = tb.overlap[tb.kind_of[task]]
        if o > 0.0:
            st.mem_rest[task] = o * work
            work -= o * work
    st.mem_work[task] = work
    _after(st, at - st.freg[F_NOW] + latency + ln.fixed_ns[task], EV_MEM, task, NO_PAYLOAD)


@in_loop
def _on_mem_start(tb, st, task):
    """Phases._on_mem_start; True where the memory phase has no work: it ends now (``run_events`` runs
    ``_mem_done``)."""
    work = st.mem_work[task]
    st.mem_start[task] = st.freg[F_NOW]
    if work > 0.0 or st.mem_rest[task] > 0.0:
        sm = st.ireg[R_SM0] + st.sm_of[task]
        if st.ireg[R_PRESENCE]:         # the block competes for its SM while it loads too: its ``enter``
            now = st.freg[F_NOW]
            _advance(tb, st, sm, now)
            _arrive(tb, st, sm, task)
            if st.s_n[sm]:
                _rates(tb, st, sm)
                _post(tb, st, sm, now)
        if tb.consts[C_STRETCH_ON] != 0.0:  # its memory class (the overlapped rest keeps it)
            kind = tb.kind_of[task]
            gamma = tb.stretch[kind]
            q = _hit_q(tb, st, task) if tb.consts[C_HIT_ON] != 0.0 else 1.0
            if gamma <= 0.0 and q == 1.0:
                st.class_of[ROW_STRETCH, task] = tb.mem_class[kind, STRETCH_LEVELS]
            else:
                if gamma <= 0.0:
                    level = int(np.rint(q * STRETCH_LEVELS))
                else:
                    idle = _idle_beside(tb, st, sm, task)
                    level = int(np.rint(q * (1.0 - gamma * (1.0 - idle)) * STRETCH_LEVELS))
                st.class_of[ROW_STRETCH, task] = tb.mem_class[kind, level if level > 1 else 1]
    if work > 0.0:
        _add(tb, st, st.ireg[R_MEM], task, work)
        return False
    return True


@helper
def _hit_q(tb, st, task):
    """Phases._hit_q: the fraction of its kind's largest memory cap the task's memory phase may take."""
    dram = 0.0
    for j in range(tb.rptr[task], tb.rptr[task + 1]):
        dram += st.miss[j]
    l2_bytes = tb.task_bytes[task]
    c = tb.consts
    work = dram * c[C_INV_DRAM_BW]
    if l2_bytes * c[C_INV_L2_BW] > work:
        work = l2_bytes * c[C_INV_L2_BW]
    per = l2_bytes / c[C_L2_RATIO]
    q = work * tb.hit_scale[tb.kind_of[task]] / (dram if dram > per else per)
    return q if q < 1.0 else 1.0


@in_loop
def _mem_done(tb, st, task):
    """Phases._mem_done up to the handler it ends with: NEXT_JOIN (``_join``), NEXT_COMPUTED (``_comp_done``: no
    compute work) or NEXT_NONE (its compute phase runs on its SM); ``run_events`` runs that handler."""
    rest = st.mem_rest[task]
    if rest < 0.0:                      # the overlapped rest of the memory phase ended
        return NEXT_JOIN
    st.comp_start[task] = st.freg[F_NOW]
    sm = st.ireg[R_SM0] + st.sm_of[task]
    work = tb.compute_ns[task]
    present = st.ireg[R_PRESENCE] != 0 and (st.mem_work[task] > 0.0 or rest > 0.0)
    track_age = tb.consts[C_TRACK_AGE] != 0.0
    if present and not (track_age and work > 0.0):     # its ``leave``
        now = st.freg[F_NOW]
        _advance(tb, st, sm, now)
        _depart(tb, st, sm, task)
        if st.s_n[sm]:
            _rates(tb, st, sm)
            _post(tb, st, sm, now)
    if rest > 0.0:                      # the rest of its memory work runs beside its compute
        st.mem_rest[task] = -1.0
        st.pending[task] = 1
        _add(tb, st, st.ireg[R_MEM], task, rest)
    if work > 0.0:
        if present and track_age:
            _start_computing(tb, st, sm, task, work)
        else:
            _add(tb, st, sm, task, work)
        return NEXT_NONE
    return NEXT_COMPUTED


@in_loop
def _ends(tb, st, task, nxt):
    """Phases._comp_done (nxt NEXT_COMPUTED) and ._join (NEXT_JOIN: one of a task's overlapped phases ended)
    up to ``_finish``: whether the task ends now (with overlapped phases, with the last of them)."""
    if nxt == NEXT_COMPUTED and tb.consts[C_OVERLAP_ON] == 0.0:
        return True
    if st.pending[task]:
        st.pending[task] -= 1
        return False
    return True


# --- claims and waits (megasim.sim.claims) ---------------------------------------------------------
@helper
def _claim(tb, st, ln, sm, slot):
    ir = st.ireg
    if ir[R_READY]:
        task = _claim_ready(st, ln, sm, slot)
    elif ir[R_NEXT] < ir[R_LEN]:
        task = ln.order[ir[R_NEXT]]
        ir[R_NEXT] += 1
    else:
        task = -1
    if task >= 0 and _take(tb, st, ln, task, sm, slot):
        _ready(tb, st, ln, task, st.check_at[task])


@helper
def _claim_ready(st, ln, sm, slot):
    """The ready queue's claim up to ``_take``: the task the slot takes (its caller takes it), or -1 (none
    queued: the slot waits idle while tasks remain)."""
    ir = st.ireg
    if ir[R_RQ_HEAD] < ir[R_RQ_TAIL]:
        pos = ln.queue[ir[R_RQ_HEAD]]
        ir[R_RQ_HEAD] += 1
    else:
        if ir[R_DONE] < ir[R_LEN]:
            t = ir[R_IDLE_TAIL]
            size = st.idle_sm.shape[0]
            st.idle_sm[t % size] = sm
            st.idle_slot[t % size] = slot
            ir[R_IDLE_TAIL] = t + 1
        return -1
    task = ln.order[pos]
    ln.pos_of[task] = pos
    return task


@helper
def _take(tb, st, ln, task, sm, slot):
    """Claims._take up to ``_ready``: the task takes the slot; True when no counter it waits on is pending
    (its caller calls ``_ready`` at ``check_at``), else it waits on the first pending one."""
    now = st.freg[F_NOW]
    st.claim[task] = now
    st.sm_of[task] = sm
    st.slot_of[task] = slot
    if tb.consts[C_TRACK_AGE] != 0.0:   # its block's dispatch number (a persistent block keeps its first)
        ir = st.ireg
        if ir[R_PERSISTENT]:
            age = st.block_age[sm, slot]
            if age < 0:
                age = st.block_age[sm, slot] = ir[R_DISPATCHED]
                ir[R_DISPATCHED] += 1
        else:
            age = ir[R_DISPATCHED]
            ir[R_DISPATCHED] += 1
        st.age_of[task] = age
    cost = ln.check_ns[tb.kind_of[task]]
    st.claim_cost[task] = cost
    st.check_at[task] = now + cost
    for i in range(tb.waits.shape[1]):
        c = tb.waits[task, i]
        if c >= 0 and st.remaining[c] > 0:
            _wait(st, c, task)
            return False
    return True


@helper
def _wait(st, c, task):
    """waiters.setdefault(c, []).append(task)"""
    st.w_next[task] = -1
    tail = st.w_tail[c]
    if tail >= 0:
        st.w_next[tail] = task
    else:
        st.w_head[c] = task
    st.w_tail[c] = task


@helper
def _release(tb, st, task, now):
    """A counter the task waited on reached zero: it waits on the next one still pending (-1.0), or is
    ready at the time returned (its caller calls ``_ready``)."""
    for i in range(tb.waits.shape[1]):
        c = tb.waits[task, i]
        if c >= 0 and st.remaining[c] > 0:
            _wait(st, c, task)
            return -1.0
    resume = now + tb.consts[C_ATOMIC]
    check = st.check_at[task]
    return resume if resume > check else check


@in_loop
def _finish(tb, st, ln, task):
    ir = st.ireg
    now = st.freg[F_NOW]
    st.end[task] = now
    ready_dispatch = ir[R_READY] != 0
    off = -1                    # the released list, built in the pool
    n_rel = 0
    signalled = False
    if ready_dispatch:
        off = ir[R_POOL_N]
    for i in range(tb.signals.shape[1]):
        c = tb.signals[task, i]
        if c < 0:
            continue
        signalled = True
        st.remaining[c] -= 1
        if st.remaining[c] == 0:
            w = st.w_head[c]
            st.w_head[c] = -1
            st.w_tail[c] = -1
            while w >= 0:
                nxt = st.w_next[w]
                at = _release(tb, st, w, now)
                if at >= 0.0:
                    _ready(tb, st, ln, w, at)
                w = nxt
            if ready_dispatch:
                for j in range(ln.counter_ptr[c], ln.counter_ptr[c + 1]):
                    g = ln.counter_groups[j]
                    ln.pending[g] -= 1
                    if ln.pending[g] == 0:
                        n_rel += 1
                        st.pool[off + n_rel] = g
    ir[R_DONE] += 1
    if ir[R_DONE] == ir[R_REPORT_AT]:
        ir[R_REPORTED] = ir[R_DONE]
        ir[R_REPORT_AT] += ir[R_REPORT_EVERY]
        ir[R_STOP] |= STOP_PROGRESS
    if ir[R_DONE] == ir[R_LEN]:
        st.freg[F_LAUNCH_END] = now
        ir[R_STOP] |= STOP_LAUNCH
    elif ready_dispatch:
        atomic = tb.consts[C_ATOMIC]
        delay = (atomic if signalled else 0.0) + (2.0 * atomic if n_rel > 0 else 0.0)
        if ln.is_root[ln.pos_of[task]]:
            delay += 2.0 * atomic
            if ir[R_NEXT] < ln.roots.shape[0]:
                n_rel += 1
                st.pool[off + n_rel] = -1 - ln.roots[ir[R_NEXT]]
                ir[R_NEXT] += 1
        if n_rel > 0:
            st.pool[off] = n_rel
            ir[R_POOL_N] = off + 1 + n_rel
        else:
            off = -1
        _after(st, delay, EV_SIGNAL, task, off)
    else:
        _claim(tb, st, ln, np.int64(st.sm_of[task]), np.int64(st.slot_of[task]))


@in_loop
def _on_ready_signal(tb, st, ln, task, off):
    ir = st.ireg
    if off >= 0:
        for i in range(off + 1, off + 1 + st.pool[off]):
            g = st.pool[i]
            if g >= 0:
                for j in range(ln.group_ptr[g], ln.group_ptr[g + 1]):
                    ln.queue[ir[R_RQ_TAIL]] = ln.group_positions[j]
                    ir[R_RQ_TAIL] += 1
            else:
                ln.queue[ir[R_RQ_TAIL]] = -1 - g
                ir[R_RQ_TAIL] += 1
    size = st.idle_sm.shape[0]
    while ir[R_IDLE_HEAD] < ir[R_IDLE_TAIL] and ir[R_RQ_HEAD] < ir[R_RQ_TAIL]:
        h = ir[R_IDLE_HEAD] % size
        ir[R_IDLE_HEAD] += 1
        sm, slot = st.idle_sm[h], st.idle_slot[h]
        claimed = _claim_ready(st, ln, sm, slot)
        if claimed >= 0 and _take(tb, st, ln, claimed, sm, slot):
            _ready(tb, st, ln, claimed, st.check_at[claimed])
    sm, slot = np.int64(st.sm_of[task]), np.int64(st.slot_of[task])
    claimed = _claim_ready(st, ln, sm, slot)
    if claimed >= 0 and _take(tb, st, ln, claimed, sm, slot):
        _ready(tb, st, ln, claimed, st.check_at[claimed])


@njit(cache=True, no_cfunc_wrapper=True)
def grow_events(st):
    """Give the event heap twice the room, its entries kept."""
    n = st.ev_t.shape[0]
    ev_t = np.zeros(2 * n)
    ev_t[:n] = st.ev_t
    st.ev_t = ev_t
    ev_e = np.zeros(2 * n, np.int64)
    ev_e[:n] = st.ev_e
    st.ev_e = ev_e
    ev_k = np.zeros(2 * n, np.int64)
    ev_k[:n] = st.ev_k
    st.ev_k = ev_k
    ev_a = np.zeros(2 * n, np.int64)
    ev_a[:n] = st.ev_a
    st.ev_a = ev_a
    ev_b = np.zeros(2 * n, np.int64)
    ev_b[:n] = st.ev_b
    st.ev_b = ev_b


# --- the loop --------------------------------------------------------------------------------------
@njit(cache=True, no_cfunc_wrapper=True)
def place_first_blocks(st, first, n_sm, per_sm, round_robin, delay):
    """The launch's first blocks claim `delay` ns from now (``_Launches._place_first_blocks``)."""
    for b in range(first):
        if round_robin:
            sm, slot = b % n_sm, b // n_sm
        else:
            sm, slot = b // per_sm, b % per_sm
        _after(st, delay, EV_SLOT, sm, slot)


# (runs without the GIL: simulations on threads of one process run at once)
@njit(cache=True, nogil=True, no_cfunc_wrapper=True)
def run_events(tb, st, ln, margin):
    """Handle events in (time, insertion id) order until a STOP_* reason; returns it."""
    ir = st.ireg
    ir[R_STOP] = 0
    capacity = st.ev_t.shape[0]
    while ir[R_EV_N] > 0:
        if ir[R_EV_N] + margin > capacity:
            return STOP_GROW
        if ir[R_PUSHED] > ir[R_EVENT_LIMIT]:
            return STOP_RUNAWAY
        t = st.ev_t[0]
        eid = st.ev_e[0]
        kind = st.ev_k[0]
        a = st.ev_a[0]
        b = st.ev_b[0]
        _pop_top(st)
        st.freg[F_NOW] = t
        ended = 0           # the jobs whose phase ends now (done_buf): a server's completion, or no memory work
        mem = True          # their memory phases (else their compute phases)
        if kind == EV_WAKE:
            if _on_wake(st, a, eid):
                ended = _fire(tb, st, a)
                mem = tb.s_is_mem[a] != 0
        elif kind == EV_MEM:
            if _on_mem_start(tb, st, a):
                st.done_buf[0] = a
                ended = 1
        elif kind == EV_SLOT:
            _claim(tb, st, ln, a, b)
        else:
            _on_ready_signal(tb, st, ln, a, b)
        # Their handlers, one job after another (a job's handler may add to a server, never fire one: one
        # done buffer serves every server).
        for i in range(ended):
            task = st.done_buf[i]
            nxt = _mem_done(tb, st, task) if mem else NEXT_COMPUTED
            if nxt != NEXT_NONE and _ends(tb, st, task, nxt):
                _finish(tb, st, ln, task)
        if ir[R_STOP]:
            return STOP_OVERFLOW if ir[R_STOP] & STOP_OVERFLOW else ir[R_STOP]
    return STOP_EMPTY
