"""`megasim validate --gpus` and the GPU sweep's scheduling, on the CPU: Numba's CUDA simulator stands in
for the GPUs (two simulated devices, one Dask worker each) and the host's clock for CUDA events
(``gpu.runtime.timing.time_host``). Bad device lists are one-line errors; a run spread over the
workers gives the rows of a run in one process, in the same order, each tagged with its device;
``map_on_gpus`` hands out one task per GPU at a time and keeps a key's items on one worker."""

from __future__ import annotations

import csv
import functools
import json
import time
import types
from pathlib import Path

import pytest

pytest.importorskip("distributed", reason="dask[distributed] is not installed")
pytest.importorskip("numba", reason="numba is not installed (the [gpu] extra)")
if not __import__("numba").config.ENABLE_CUDASIM:
    pytest.skip("runs on the CUDA simulator only: two simulated devices stand in for the GPUs (on GPUs, megasim validate --gpus)", allow_module_level=True)

from megasim.cli import validate as cli_validate  # noqa: E402
from megasim.cli.main import main  # noqa: E402
from megasim.errors import InputError  # noqa: E402
from megasim.sweep.gpus import gpu_client, join_helps, map_on_gpus, next_item, parse_device_list, select_devices  # noqa: E402

pytestmark = pytest.mark.cudasim

REPO = Path(__file__).resolve().parents[1]
SPEC = str(REPO / "megasim/hardware/calibrated/h200.json")
TINY = ["N=1,C=4,K=4,H=4,W=4", "N=1,C=8,K=4,H=5,W=5"]
TIMES = ("measured_us", "spread_us", "min_us", "max_us", "round_us")


@pytest.fixture
def simulated_gpus(monkeypatch):
    """`megasim validate` on two simulated devices: the real measuring code with the host's clock."""
    from gpu.calibrate import validate
    from gpu.runtime.timing import time_host
    stand_in = types.SimpleNamespace(
        device_name=validate.device_name, device_count=lambda: 2,
        measure=functools.partial(validate.measure, timer=time_host),
        measure_on_gpus=functools.partial(validate.measure_on_gpus, timer=time_host))
    monkeypatch.setattr(cli_validate, "gpu_module", lambda name: stand_in)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return stand_in


def _one_line_error(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("megasim: error: ") and needle in err[0], err
    return err[0]


@pytest.mark.parametrize("value, needle", [("0,0", "device 0 is named more than once"), ("a", "'a' is not an integer"),
                                           ("-1", "'-1' is negative"), ("", "give 'all'"), ("1.5", "'1.5'"),
                                           ("0,,1", "'0,,1'")])
def test_bad_gpu_lists_are_one_line_errors(capsys, value, needle):
    line = _one_line_error(capsys, ["validate", "resnet-1", "--spec", SPEC, f"--gpus={value}"], needle)
    assert "--gpus" in line


def test_a_device_that_does_not_exist_and_flags_that_do_not_fit(capsys, simulated_gpus, tmp_path):
    base = ["validate", TINY[0], "--spec", SPEC, "--algo", "direct", "--no-predict"]
    _one_line_error(capsys, [*base, "--gpus", "0,2"], "--gpus device 2 does not exist: this machine has devices 0-1")
    _one_line_error(capsys, [*base, "--mappings-per-task", "2"], "--mappings-per-task 2 is not allowed without --gpus")
    _one_line_error(capsys, [*base[:-1], "--gpus", "all", "--measured", "x.csv", "--out", str(tmp_path / "v")],
                    "--gpus is not allowed with --measured")


def test_select_devices_counts_and_follows_cuda_visible_devices():
    assert select_devices("all", 3) == ("0", "1", "2")
    assert select_devices(parse_device_list("2,0"), 3) == ("2", "0")
    assert select_devices((1,), 2, visible="5,7") == ("7",)
    assert select_devices("all", 2, visible="GPU-aa,GPU-bb") == ("GPU-aa", "GPU-bb")
    for choice, count, match in [("all", 0, "no CUDA device"), ((1,), 1, "device 1 does not exist"),
                                 ((0,), 2, "lists 1 devices, but 2 are seen")]:
        with pytest.raises(InputError, match=match):
            select_devices(choice, count, visible="3" if "lists" in match else None)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_a_run_on_two_simulated_gpus_gives_the_rows_of_one_process(tmp_path, capsys, simulated_gpus):
    base = ["validate", *TINY, "--spec", SPEC, "--algo", "direct", "--mappings", "2", "--repeats", "1",
            "--rounds", "2", "--no-predict"]
    assert main([*base, "--out", str(tmp_path / "one")]) == 0
    assert main([*base, "--gpus", "0,1", "--mappings-per-task", "1", "--out", str(tmp_path / "two")]) == 0
    capsys.readouterr()
    one, two = _rows(tmp_path / "one/validation_measured.csv"), _rows(tmp_path / "two/validation_measured.csv")
    assert "cuda_device" not in one[0] and len(one) == 4
    # (git_sha aside: a commit between the two runs, in a working checkout, changes it)
    assert [{k: v for k, v in r.items() if k not in (*TIMES, "git_sha")} for r in one] == \
           [{k: v for k, v in r.items() if k not in (*TIMES, "cuda_device", "git_sha")} for r in two]
    assert all(r["status"] == "ok" and float(r["measured_us"]) > 0 for r in one + two)
    assert {r["cuda_device"] for r in two} <= {"0", "1"}
    meta = json.loads((tmp_path / "two/validation_measured.json").read_text())["meta"]
    assert meta["gpus"] == ["0", "1"] and meta["mappings_per_task"] == 1 and set(meta["cuda_devices"]) <= {"0", "1"}


def test_mapping_units_cover_each_layers_plans_in_order():
    from gpu.calibrate.validate import mapping_units
    assert mapping_units(["a", "b"], 5, 2) == [("a", 0, 2), ("a", 2, 4), ("a", 4, 5), ("b", 0, 2), ("b", 2, 4), ("b", 4, 5)]
    assert mapping_units(["a"], 5) == [("a", 0, 5)]
    with pytest.raises(ValueError, match="per_task=0"):
        mapping_units(["a"], 5, 0)


def _wait_for_the_others(item: tuple[str, int], folder: str, others: int) -> str:
    """Item 0 finishes only once the `others` items have (each leaves a file): it cannot, if any of them
    waits behind it on its worker (then it gives up after 60 s)."""
    key, index = item
    path = Path(folder)
    if key == "hold":
        deadline = time.monotonic() + 60
        while len(list(path.glob("done-*"))) < others and time.monotonic() < deadline:
            time.sleep(0.05)
        return "released" if len(list(path.glob("done-*"))) >= others else "stuck"
    (path / f"done-{key}-{index}").write_text("")
    return "done"


def test_map_on_gpus_hands_out_one_task_per_gpu_at_a_time(tmp_path):
    items = [("hold", 0)] + [("free", i) for i in range(1, 6)]
    with gpu_client([0, 1], env={"NUMBA_ENABLE_CUDASIM": "1"}) as client:
        results = map_on_gpus(client, _wait_for_the_others, items, str(tmp_path), len(items) - 1)
    assert results[0][1] == "released"                 # nothing queued behind the held item: all ran elsewhere
    assert {device for device, _ in results[1:]} == {"0", "1"} - {results[0][0]}


def test_next_item_keeps_a_key_on_its_worker_and_starts_free_keys_first():
    keys = ["x", "x", "y", "y", "z"]
    assert next_item([0, 1, 2, 3, 4], None, {}, "A") == 0
    assert next_item([0, 1, 2, 3, 4], keys, {}, "A") == 0                    # nothing taken: the first
    assert next_item([1, 2, 3, 4], keys, {"A": "x"}, "B") == 1               # x is A's: B starts y
    assert next_item([1, 3, 4], keys, {"A": "x", "B": "y"}, "A") == 0        # A stays on x
    assert next_item([3, 4], keys, {"A": "x", "B": "y"}, "A") == 1           # x done: the free z, not B's y
    assert next_item([3], keys, {"A": "z", "B": "y"}, "A") == 0              # only B's y left: A joins in


def test_an_idle_worker_joins_a_key_only_where_that_ends_it_sooner():
    keys = ["x", "x", "y", "y"]
    last = {"A": "x", "B": "y"}
    assert next_item([1, 3], keys, last, "C", may_join=lambda k: False) is None         # C waits
    assert next_item([1, 3], keys, last, "C", may_join=lambda k: k == "y") == 1         # joins y, not x
    assert next_item([1, 3], keys, last, "C") == 0                                      # no rule: the first
    # one item left, its owner free in 1 s and 2 s an item; a joiner whose first item takes 5 s: no
    assert not join_helps(1, [1.0], 2.0, 5.0)
    assert join_helps(1, [1.0], 2.0, 2.5)                # 2.5 s < 1 + 2 s
    assert join_helps(4, [0.5], 2.0, 5.0)                # the owner needs 8.5 s for all four
    assert not join_helps(4, [0.5, 0.5, 0.5, 0.5], 2.0, 5.0)   # four owners: 2.5 s
    assert join_helps(3, [], 2.0, 5.0) and not join_helps(0, [1.0], 2.0, 0.1)


def _sleep_item(item: tuple[str, float]) -> str:
    time.sleep(item[1])
    return item[0]


def test_map_on_gpus_timeline_has_each_items_worker_side_times():
    items = [("x", 0.05), ("x", 0.05), ("y", 0.05)]
    timeline: list = []
    with gpu_client([0, 1], env={"NUMBA_ENABLE_CUDASIM": "1"}) as client:
        results = map_on_gpus(client, _sleep_item, items, affinity=lambda it: it[0], timeline=timeline)
    assert [r for _, r in results] == ["x", "x", "y"]
    assert [t["item"] for t in timeline] == [0, 1, 2] and [t["key"] for t in timeline] == ["x", "x", "y"]
    for t, (device, _) in zip(timeline, results):
        assert t["device"] == device and t["submitted"] <= t["received"] and t["start"] < t["end"] <= t["received"]
        assert t["end"] - t["start"] >= 0.04
    assert timeline[0]["first_of_key"] and timeline[2]["first_of_key"]


def test_units_of_one_layer_share_its_device_inputs():
    from gpu.calibrate import validate
    from gpu.runtime.table import kernel_table
    from gpu.runtime.timing import time_host
    table = kernel_table("direct")
    calls = []
    original = table.inputs

    def counted(problem, plan, index):
        calls.append((problem.spec_string(), index))
        return original(problem, plan, index)
    object.__setattr__(table, "inputs", counted)            # a frozen dataclass: put back below
    try:
        kw = dict(algorithm="direct", repeats=1, rounds=1, timer=time_host)
        validate.release_inputs()
        whole = validate.measure_unit((TINY[0], 0, 2), 2, **kw)
        assert len(calls) == 2                               # two sets, drawn once
        parts = validate.measure_unit((TINY[0], 0, 1), 2, **kw) + validate.measure_unit((TINY[0], 1, 2), 2, **kw)
        assert len(calls) == 2                               # the next units of the layer took them
        validate.measure_unit((TINY[1], 0, 1), 2, **kw)
        assert len(calls) == 4                               # another layer: its own, replacing them
        assert validate._SHARED_INPUTS["owner"][1].spec_string() == calls[-1][0]
        validate.release_inputs()
        assert validate._SHARED_INPUTS["owner"] is None
        validate.measure(TINY[:1], 1, **kw)
        assert len(calls) == 6 and validate._SHARED_INPUTS["owner"] is None   # measure releases them at the end
    finally:
        object.__setattr__(table, "inputs", original)
        validate.release_inputs()
    strip = lambda rows: [{k: v for k, v in r.items() if k not in TIMES} for r in rows]  # noqa: E731
    assert strip(whole) == strip(parts)


def test_validate_scaling_quick_runs_on_the_simulator(tmp_path, capsys):
    from experiments.benchmarks import validate_scaling
    assert validate_scaling.main(["--quick", "--out", str(tmp_path)]) == 0
    assert "validate_scaling: speedup" in capsys.readouterr().out
    rows = _rows(tmp_path / "validate_scaling.csv")
    assert [r["gpus"] for r in rows] == ["1", "2"] and all(r["rows_ok"] == r["rows"] != "0" for r in rows)
    points = _rows(tmp_path / "validate_scaling_points.csv")
    assert points and all(float(p["ratio"]) > 0 for p in points)
    meta = json.loads((tmp_path / "validate_scaling.json").read_text())["meta"]
    assert meta["simulator"] is True and meta["summary"]["same_plans_same_order"] is True and "git_sha" in meta
    assert {"measured_1gpu.csv", "measured_2gpu.csv"} <= {p.name for p in tmp_path.iterdir()}
    timeline = _rows(tmp_path / "validate_scaling_timeline.csv")
    assert sorted(r["gpus"] for r in timeline) == ["1", "1", "2", "2"]             # one per unit and run
    assert all(float(r["end_s"]) > float(r["start_s"]) >= 0 for r in timeline)
    idle = meta["workers_idle"]
    assert [w["device"] for w in idle["1_gpu"]] == ["0"] and sum(w["tasks"] for w in idle["2_gpu"]) == 2


def test_validate_scaling_without_warm_up_times_the_sweep_as_users_run_it(tmp_path):
    from experiments.benchmarks import validate_scaling
    assert validate_scaling.main(["--quick", "--warm-mappings", "0", "--kernel-cache", "off", "--out", str(tmp_path)]) == 0
    rows = _rows(tmp_path / "validate_scaling.csv")
    assert [float(r["warm_up_s"]) < 0.05 for r in rows] == [True, True]
    meta = json.loads((tmp_path / "validate_scaling.json").read_text())["meta"]
    assert meta["summary"]["kernel_cache"] == "off" and meta["summary"]["cache_fill_s"] is None
    assert [len(w) for w in meta["workers"].values()] == [1, 2]          # each worker's device, asked after the sweep
    assert meta["summary"]["target_speedup"] == 1.75                    # 2 GPUs: the 4-GPU bar's efficiency
    with pytest.raises(SystemExit, match="--warm-mappings -1"):
        validate_scaling.main(["--quick", "--warm-mappings", "-1", "--out", str(tmp_path)])
