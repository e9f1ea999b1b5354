"""Sweep files, their expansion and the results table, without a cluster (megasim.sweep).

Bad sweep files give one InputError line naming the key, the file and what is allowed; a point's key
depends on what it computes, not on names; the table round-trips through CSV and Parquet; the CLI
reports errors in one line with status 2; `megasim layers` and `megasim simulate` never import Dask.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from megasim.errors import InputError
from megasim.sweep import load_sweep, parse_sweep
from megasim.sweep.points import expand
from megasim.sweep.table import COLUMNS, ResultsTable, have_pyarrow, read_table, write_table

GOOD = """
name = "t"
problems = ["N=2,C=8,K=8,H=8,W=8", "N=2,C=8,K=16,H=8,W=8"]
gpus = ["H100"]

[[runs]]
algorithm = "winograd"
schedules = ["fused"]
grid = {M = [1, 2]}

[[runs]]
algorithm = "winograd"
schedules = ["nonfused", "naive"]
"""


def _write(tmp_path, text, name="s.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_expansion_is_the_product_of_problems_gpus_and_mappings(tmp_path):
    points = expand(load_sweep(_write(tmp_path, GOOD)))
    assert len(points) == 2 * 1 * (2 + 2)
    assert [p.index for p in points] == list(range(len(points)))
    assert len({p.key for p in points}) == len(points)
    assert {(p.schedule, p.param) for p in points} == {("fused", "M=1"), ("fused", "M=2"), ("nonfused", ""),
                                                       ("naive", "")}


def test_networks_expand_to_their_distinct_layers_and_a_space_to_its_valid_points(tmp_path):
    from megasim.search import spaces_of
    from megasim.workloads import network_layers, parse_layer
    text = ('problems = ["resnet-1"]\nnetworks = ["resnet50"]\nbatch = 2\ngpus = ["H100"]\n'
            '[[runs]]\nalgorithm = "winograd"\nspace = "algorithm1"\n')
    points = expand(load_sweep(_write(tmp_path, text)))
    shapes = {parse_layer("resnet-1", batch=2).spec_string()} | {
        p.spec_string().replace("N=64", "N=2") for p in network_layers("resnet50")}
    assert {p.problem.spec_string() for p in points} == shapes
    first = [p for p in points if p.layer == "resnet-1"]
    space = spaces_of("winograd")["algorithm1"]().bind(first[0].problem)
    assert len(first) == len(space.valid_points()) and all(p.mode == "space" for p in first)


def test_a_point_key_depends_on_what_is_computed_not_on_names(tmp_path):
    a = expand(load_sweep(_write(tmp_path, GOOD, "a.toml")))
    b = expand(load_sweep(_write(tmp_path, GOOD.replace('name = "t"', 'name = "other"'), "b.toml")))
    assert [p.key for p in a] == [p.key for p in b]
    c = expand(load_sweep(_write(tmp_path, GOOD.replace("H100", "A100"), "c.toml")))
    assert not {p.key for p in a} & {p.key for p in c}


_RUN = 'problems = ["resnet-1"]\ngpus = ["H100"]\n[[runs]]\nalgorithm = "winograd"\n'
BAD = [
    ('name = "x"\ngpus = ["H100"]\n[[runs]]\nalgorithm = "winograd"\n', "problems"),
    ('problems = ["resnet-1"]\n[[runs]]\nalgorithm = "winograd"\n', "gpus"),
    ('problems = ["resnet-1"]\ngpus = ["H100"]\n', "runs"),
    ('problems = ["resnet-1"]\ngpus = ["H100"]\ngpu = "A100"\n[[runs]]\nalgorithm = "winograd"\n', "'gpu'"),
    ('problems = ["nolayer"]\ngpus = ["H100"]\n[[runs]]\nalgorithm = "winograd"\n', "'nolayer'"),
    ('networks = ["alexnet"]\ngpus = ["H100"]\n[[runs]]\nalgorithm = "winograd"\n', "'alexnet'"),
    ('problems = ["resnet-1"]\ngpus = ["H1000"]\n[[runs]]\nalgorithm = "winograd"\n', "'H1000'"),
    ('problems = ["resnet-1"]\ngpus = ["no/such.json"]\n[[runs]]\nalgorithm = "winograd"\n', "no/such.json"),
    ('problems = ["resnet-1"]\ngpus = ["H100"]\n[[runs]]\nalgorithm = "fft"\n', "'fft'"),
    ('problems = ["resnet-1"]\ngpus = ["H100"]\n[[runs]]\nalgorithm = "winograd"\nschedules = ["fast"]\n', "'fast'"),
    ('problems = ["resnet-1"]\ngpus = ["H100"]\n[[runs]]\nalgorithm = "winograd"\ngrid = {Q = [1]}\n', "'Q'"),
    ('problems = ["resnet-1"]\ngpus = ["H100"]\n[[runs]]\nalgorithm = "winograd"\nspace = "huge"\n', "'huge'"),
    ('problems = ["resnet-1"]\ngpus = ["H100"]\n[[runs]]\nalgorithm = "winograd"\nspace = "default"\n'
     'optimize = {budget = 5}\n', "space and optimize"),
    ('problems = ["resnet-1"]\ngpus = ["H100"]\n[[runs]]\nalgorithm = "winograd"\noptimize = {budget = 0}\n', "budget=0"),
    ('problems = ["resnet-1"]\ngpus = ["H100"]\n[[runs]]\nalgorithm = "winograd"\noptimize = {seed = 1}\n', "budget"),
    ('problems = ["resnet-1"]\ngpus = ["H100"]\n[[runs]]\nalgorithm = "winograd"\n'
     'optimize = {budget = 5, strategy = "magic"}\n', "'magic'"),
    ('problems = ["resnet-1"]\ngpus = ["H100"]\nbatch = 0\n[[runs]]\nalgorithm = "winograd"\n', "batch=0"),
    ('problems = ["resnet-1"\n', "not valid TOML"),
    # a grid value or key that would smuggle other --param items into the string
    (_RUN + 'grid = {M = ["4,t=32"]}\n', "grid.M=['4,t=32']"),
    (_RUN + 'grid = {M = ["t=32"]}\n', "grid.M=['t=32']"),
    (_RUN + 'grid = {"M=4,t" = [32]}\n', "grid key 'M=4,t'"),
    (_RUN + 'grid = {"" = [1]}\n', "grid key ''"),
    (_RUN + 'grid = {M = [nan]}\n', "M='nan'"),
    # the search's options against the strategy's ranges, before any search starts
    (_RUN + 'optimize = {budget = 5, options = {top = 0}}\n', "top=0"),
    (_RUN + 'optimize = {budget = 5, strategy = "annealing", options = {T0 = inf}}\n', "T0=inf"),
    (_RUN + 'optimize = {budget = 5, strategy = "annealing", options = {alpha = nan}}\n', "alpha=nan"),
    (_RUN + 'optimize = {budget = 5, options = {top = "x"}}\n', "top='x'"),
    # an integer parameter beyond its range (before: a row 'model error: OverflowError')
    (_RUN + 'param = "D_IG=99999999999999999999999"\n', "D_IG=99999999999999999999999 is not allowed: it must be an integer from 0"),
    (_RUN + 'grid = {D_GO = [9223372036854775808]}\n', "D_GO=9223372036854775808 is not allowed"),
    # a base param of a key the search sets, which it would replace without a word
    (_RUN + 'param = "M=4"\noptimize = {budget = 5}\n', "param M=4 is not allowed with space 'default'"),
    (_RUN + 'param = "t=64"\nspace = "algorithm1"\n', "the search varies t"),
]


@pytest.mark.parametrize("text, named", BAD, ids=[n for _, n in BAD])
def test_a_bad_sweep_file_is_one_line_naming_the_key_and_the_file(tmp_path, text, named):
    path = _write(tmp_path, text)
    with pytest.raises(InputError) as err:
        expand(load_sweep(path))
    message = str(err.value)
    assert named in message and str(path) in message and "\n" not in message


def test_a_missing_sweep_file_and_a_non_table_are_errors(tmp_path):
    with pytest.raises(InputError, match="cannot be read"):
        load_sweep(tmp_path / "none.toml")
    with pytest.raises(InputError, match="table of keys"):
        parse_sweep(["resnet-1"])


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_the_table_round_trips_and_never_holds_a_key_twice(tmp_path, suffix):
    if suffix == ".parquet" and not have_pyarrow():
        pytest.skip("pyarrow is not installed: Parquet tables are not available")
    path = tmp_path / f"t{suffix}"
    table = ResultsTable(path)
    rows = [{"point_key": "a", "status": "ok", "predicted_us": 1.5, "tasks": 10, "layer": "x"},
            {"point_key": "b", "status": "failed", "reason": "no", "layer": "y"}]
    assert [table.add(r) for r in rows] == [True, True]
    assert not table.add({"point_key": "a", "status": "ok", "predicted_us": 9.0})
    table.flush()
    back = read_table(path)
    assert [r["point_key"] for r in back] == ["a", "b"]
    assert back[0]["predicted_us"] == 1.5 and back[0]["tasks"] == 10 and back[1]["predicted_us"] is None
    assert list(back[0]) == list(COLUMNS)
    again = ResultsTable(path)
    assert again.keys() == {"a", "b"} and again.keys(include_failed=False) == {"a"}


def test_a_table_with_a_bad_name_or_not_a_sweep_table_is_refused(tmp_path):
    with pytest.raises(InputError, match=r"\.parquet or \.csv"):
        write_table(tmp_path / "t.txt", [])
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="not a sweep table"):
        read_table(other)


def test_the_command_reports_a_bad_file_in_one_line_and_counts_points_dry(tmp_path):
    from megasim.cli.main import main
    bad = _write(tmp_path, 'problems = ["resnet-1"]\ngpus = ["H100"]\n[[runs]]\nalgorithm = "fft"\n', "bad.toml")
    out = subprocess.run([sys.executable, "-m", "megasim.cli.main", "sweep", str(bad)], capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "'fft'" in out.stderr
    good = _write(tmp_path, GOOD)
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["sweep", str(good), "--dry-run", "--json", "--out", str(tmp_path / "t.csv")]) == 0
    summary = json.loads(buf.getvalue())
    assert summary["points"] == 8 and summary["to_do"] == 8


def test_layers_and_simulate_do_not_import_dask():
    code = ("import io, contextlib, sys\nfrom megasim.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert main(['layers']) == 0\n"
            "    assert main(['simulate', 'N=2,C=8,K=8,H=8,W=8', '--gpu', 'H100']) == 0\n"
            "import megasim.sweep, megasim.search\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'dask', 'distributed'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_without_pyarrow_the_table_is_csv_and_parquet_is_refused(tmp_path, monkeypatch):
    from megasim.sweep import table
    from megasim.sweep.runner import table_path
    monkeypatch.setattr(table, "have_pyarrow", lambda: False)
    sweep = load_sweep(_write(tmp_path, GOOD))
    assert table_path(sweep) == tmp_path / "t.csv"
    with pytest.raises(InputError, match="needs pyarrow"):
        table_path(sweep, tmp_path / "t.parquet")


def test_options_without_a_range_name_no_infinite_range():
    """Before: 'it must be an integer from -inf to inf'."""
    from megasim.search.budget import check_options
    with pytest.raises(Exception) as err:
        check_options("s", {"top": "x"}, {"top": 3})
    assert "it must be an integer" in str(err.value) and "inf" not in str(err.value)


@pytest.mark.parametrize("run, needle", [
    ('grid = {D_IG = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], D_GO = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]}', "121 combinations"),
    ('space = "algorithm1"', "more than 100 points"),
])
def test_a_sweep_above_max_points_is_refused_before_it_is_built(tmp_path, monkeypatch, run, needle):
    """The limit is checked on the grid's size before its product is taken, and on the running count of a
    space's points problem by problem (before: a `full` space over a few networks expanded for minutes)."""
    import megasim.sweep.points as points
    monkeypatch.setattr(points, "MAX_POINTS", 100)
    path = _write(tmp_path, 'problems = ["resnet-1"]\ngpus = ["H100"]\n[[runs]]\nalgorithm = "winograd"\n' + run + "\n")
    with pytest.raises(InputError) as err:
        expand(load_sweep(path))
    assert needle in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)
    monkeypatch.setattr(points, "MAX_POINTS", 1_000)
    assert len(expand(load_sweep(path))) in (120, 121)


@pytest.mark.parametrize("where", ["--out", "out"])
def test_a_table_in_a_folder_that_does_not_exist_is_refused_and_not_made(capsys, tmp_path, where):
    from megasim.cli.main import main
    missing = tmp_path / "no_such_folder" / "t.csv"
    text = (f'out = "{missing}"\n' if where == "out" else "") + GOOD
    args = ["sweep", str(_write(tmp_path, text)), "--workers", "1"] + (["--out", str(missing)] if where == "--out" else [])
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "does not exist" in err, err
    assert str(missing.parent) in err and not missing.parent.exists()


def test_a_free_spec_under_batch_is_labelled_as_it_runs(tmp_path):
    """`batch = 4` ran problems = ["N=8,..."] at N=4, and the layer column said N=8."""
    text = 'problems = ["N=8,C=8,K=8,H=8,W=8", "resnet-4"]\nbatch = 4\ngpus = ["H100"]\n[[runs]]\nalgorithm = "winograd"\n'
    points = expand(load_sweep(_write(tmp_path, text)))
    assert {p.layer for p in points} == {"N=4,C=8,K=8,H=8,W=8,R=3,S=3,stride=1,padding=1", "resnet-4"}
    assert all(p.problem.n == 4 for p in points)



def test_a_rows_prediction_is_the_whole_run_for_every_algorithm():
    """A table compares algorithms: its predicted_us is what `megasim simulate` prints as 'predicted', also for
    the sparse plug-ins, whose own measured time (plan.algo.time_us) is their kernels' span alone."""
    from megasim.hardware import get_gpu
    from megasim.plan import Plan, predict
    from megasim.sweep.evaluate import _params
    from megasim.sweep.points import SweepPoint, spec_hash
    from megasim.workloads import parse_layer
    problem, spec = parse_layer("N=1,C=32,K=32,H=14,W=14"), get_gpu("H100")
    point = SweepPoint(index=0, key="k", layer="N=1,C=32,K=32,H=14,W=14", problem=problem, gpu="H100", spec=spec,
                       gpu_spec_hash=spec_hash(spec), algorithm="ecr", schedule="kernel", param="k_tile=8")
    result, plan = predict(problem, spec, Plan.parse("kernel", "k_tile=8", algorithm="ecr"))
    assert _params(point)["predicted_us"] == result.predicted_us > plan.algo.time_us(result)
