"""A corpus of malformed inputs, each answered by one domain error (docs/errors.md).

CLI cases run ``megasim.cli.main.main`` in-process and assert exit status 2, exactly one stderr line
starting ``megasim: error:``, and that the line names the offending value (the case's needle).
Python cases call the public API and assert a MegasimError (never a raw TypeError, AttributeError or
KeyError) whose message names the value. Every case is refused before any long work, so the whole
corpus runs in seconds.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from megasim.cli.main import main
from megasim.errors import MegasimError

REPO = Path(__file__).resolve().parents[1]
PRESET = json.loads((REPO / "megasim/hardware/presets/h100.json").read_text())
MEASURED = json.loads((REPO / "megasim/hardware/calibrated/h200.measurements.json").read_text())
CALIBRATED = str(REPO / "megasim/hardware/calibrated/h200.json")
SMALL = "N=2,C=8,K=8,H=8,W=8"
SIM = ["simulate", SMALL, "--gpu", "H100"]
OPT = ["optimize", SMALL, "--gpu", "H100"]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Bad input files, written once: name -> path."""
    d = tmp_path_factory.mktemp("bad_inputs")
    out: dict[str, str] = {}

    def write(name: str, content) -> None:
        path = d / name
        path.write_text(content if isinstance(content, str) else json.dumps(content))
        out[name] = str(path)

    out["out_dir"] = str(d / "validation_out")         # a folder the validate cases may name (none writes it)
    write("not_json.json", "{nope")
    write("list.json", [1, 2])
    write("empty.json", "")
    for field in PRESET["values"]:
        spec = copy.deepcopy(PRESET)
        spec["values"][field]["value"] = 1e999            # json writes Infinity, which json.loads reads back
        write(f"spec_inf_{field}.json", spec)
    for field in ("sm_count", "max_threads_per_sm", "max_blocks_per_sm", "registers_per_sm", "l2_partitions"):
        spec = copy.deepcopy(PRESET)
        spec["values"][field]["value"] = 10 ** 12
        write(f"spec_huge_{field}.json", spec)
    for field in ("dram_bw_gbps", "sm_count", "l2_bytes"):
        spec = copy.deepcopy(PRESET)
        spec["values"][field]["value"] = "fast"
        write(f"spec_text_{field}.json", spec)
        spec = copy.deepcopy(PRESET)
        spec["values"][field]["value"] = -5
        write(f"spec_negative_{field}.json", spec)
        spec = copy.deepcopy(PRESET)
        del spec["values"][field]
        write(f"spec_missing_{field}.json", spec)
    spec = copy.deepcopy(PRESET)
    spec["values"]["dram_bandwidth"] = {"value": 1, "source": "typo"}
    write("spec_unknown_field.json", spec)
    spec = copy.deepcopy(PRESET)
    spec["schema_version"] = 7
    write("spec_version.json", spec)
    for field, value in (("compute_efficiency", 1.5), ("fixed_ns", -1), ("block_sm_share", 0), ("launch_fixed_ns", -3),
                         ("memory_overlap", 2), ("coresident_stretch", 1.0), ("compute_efficiency", 1e999)):
        spec = copy.deepcopy(PRESET)
        spec["task_costs"]["default"][field] = {"value": value, "source": "test"}
        write(f"spec_cost_{field}_{value}.json", spec)
    # finite but absurd: these values ran the model for ever (even Ctrl-C) or gave meaningless times
    for field, value in (("kernel_launch_ns", 1e12), ("dram_latency_ns", 1e12), ("l2_bw_gbps", 1e-3),
                         ("fp32_peak_gflops", 1e-6), ("dram_bw_gbps", 1e12), ("tb_max_dram_bw_gbps", 1e-6)):
        spec = copy.deepcopy(PRESET)
        spec["values"][field]["value"] = value
        write(f"spec_absurd_{field}.json", spec)
    for field, value in (("fixed_ns", 1e10), ("block_sm_share", 1e-12), ("block_dram_bw_gbps", 1e-9),
                         ("launch_fixed_ns", 1e15), ("megakernel_claim_ns", 1e15)):
        spec = copy.deepcopy(PRESET)
        spec["task_costs"]["default"][field] = {"value": value, "source": "test"}
        write(f"spec_absurd_cost_{field}.json", spec)
    spec = copy.deepcopy(PRESET)
    spec["task_costs"]["default"]["speed"] = {"value": 1, "source": "test"}
    write("spec_cost_unknown.json", spec)
    m = copy.deepcopy(MEASURED)
    m["values"] = "fast"
    write("m_values_string.json", m)
    m = copy.deepcopy(MEASURED)
    m["values"]["dram_bw_gbps"] = {"value": "fast", "method": "test"}
    write("m_value_text.json", m)
    m = copy.deepcopy(MEASURED)
    m["values"]["dram_bw_gbps"] = {"value": 1e999, "method": "test"}
    write("m_value_inf.json", m)
    m = copy.deepcopy(MEASURED)
    m["kind_times"] = "many"
    write("m_kind_times_string.json", m)
    m = copy.deepcopy(MEASURED)
    m["kind_times"][3]["median_ms"] = "slow"
    write("m_median_text.json", m)
    m = copy.deepcopy(MEASURED)
    m["kind_times"][5]["median_ms"] = -1
    write("m_median_negative.json", m)
    m = copy.deepcopy(MEASURED)
    del m["preset"]
    write("m_no_preset.json", m)
    m = copy.deepcopy(MEASURED)
    m["device"] = 7
    write("m_device_number.json", m)
    m = copy.deepcopy(MEASURED)
    m["colour"] = "blue"
    write("m_unknown_key.json", m)
    header = "layer,schedule,params,measured_us,device\n"
    write("csv_no_rows.csv", header)
    write("csv_other_layer.csv", header + "vgg-1,fused,M=4,100,gpu\n")
    write("csv_no_column.csv", "layer,schedule,params\nresnet-1,fused,M=4\n")
    write("csv_bad_time.csv", header + "resnet-1,fused,M=4,fast,gpu\n")
    write("csv_negative_time.csv", header + "resnet-1,fused,M=4,-3,gpu\n")
    write("csv_bad_param.csv", header + "resnet-1,fused,M=abc,100,gpu\n")
    write("csv_bad_schedule.csv", header + "resnet-1,sideways,M=4,100,gpu\n")
    write("csv_all_failed.csv", header + "resnet-1,fused,M=4,,gpu\n")
    write("csv_dup_column.csv", "layer,schedule,params,measured_us,device,measured_us\nresnet-1,fused,M=4,100,gpu,200\n")
    write("csv_short_row.csv", header + "resnet-1,fused,M=4,100\n")
    write("csv_bom.csv", "\ufeff" + header + "resnet-1,fused,M=4,100,gpu\n")
    write("csv_unknown_layer.csv", header + "resnet-1,fused,M=4,100,gpu\nresnet-9,fused,M=4,100,gpu\n")
    write("csv_misfit.csv", header + "resnet-1,fused,M=4,100,gpu\nresnet-1,fused,\"D_IG=0,M=4\",100,gpu\n")
    write("csv_absurd_time.csv", header + "resnet-1,fused,M=4,1e300,gpu\n")
    write("csv_huge_int.csv", header + "resnet-1,fused,D_IG=99999999999999999999999,100,gpu\n")
    write("sparse_rows_missing.json", {"meta": {}})
    write("sparse_rows_bad.json", {"meta": {}, "rows": [{"op": "ecr", "kind": "ecr", "problem": "N=1,C=1,K=1,H=4,W=4",
                                                         "sparsity": 2.0, "pattern": "uniform", "seed": 0,
                                                         "median_ms": 0.1}]})
    write("tiny.toml", 'problems = ["N=1,C=8,K=8,H=8,W=8"]\ngpus = ["H100"]\n[[runs]]\nalgorithm = "winograd"\n')
    out["dir"] = str(d)
    return out


# (argv, needle); "{name}" is replaced by the path of the bad file `name`.

def _validate_measured(csv: str, *extra: str, layer: str = "resnet-1", spec: str = CALIBRATED) -> list[str]:
    """`megasim validate LAYER --spec SPEC --measured CSV ... --out DIR` (--measured needs --out)."""
    return ["validate", layer, "--spec", spec, "--measured", csv, *extra, "--out", "{out_dir}"]

CLI_CASES: list[tuple[list[str], str]] = [
    # the command line itself
    ([], "required: command"),
    (["bogus"], "'bogus'"),
    (["--bogus"], "required: command"),
    (["layers", "--bogus"], "--bogus"),
    (["simulate"], "layer"),
    (["simulate", SMALL, "--gpu"], "--gpu"),
    # layers
    *[(["simulate", layer, "--gpu", "H100"], needle) for layer, needle in [
        ("resnet-9", "'resnet-9'"), ("", "''"), ("N=64", "lacks C, K, H, W"), ("N=0,C=1,K=1,H=4,W=4", "N=0"),
        ("N=-1,C=1,K=1,H=4,W=4", "N=-1 is not allowed"), ("N=1.5,C=1,K=1,H=4,W=4", "'N=1.5'"),
        ("N=1,C=1,K=1,H=4,W=4,X=3", "'X'"), ("N=1,N=2,C=1,K=1,H=4,W=4", "'N' given twice"),
        ("N=1,C=1,K=1,H=1,W=1,R=5,padding=0", "filter 5x3"), ("N=99999999999,C=1,K=1,H=4,W=4", "N=99999999999"),
        ("N=1,C=1,K=1,H=4,W=4,stride=0", ": stride=0"), ("N=1,C=1,K=1,H=4,W=4,padding=-1", "padding=-1 is not allowed"),
        ("N=100000,C=1024,K=1024,H=1024,W=1024", "N*C*H*W"), ("N=1000000,C=64,K=64,H=56,W=56", "N*C*H*W"),
        ("N=1;C=1", "'N=1;C=1'"), ("=", "'='"), ("N=,C=1,K=1,H=4,W=4", "'N='"), ("x" * 2000, "2000 characters"),
        ("vgg99/conv1", "'vgg99/conv1'"), ("N=1,C=1,K=1,H=4,W=4,R=0", "R=0"),
        ("N=1,C=1,K=1,H=4,W=4,pad=x", "'pad=x'"), ("N=1,C=70000,K=70000,H=1,W=1,R=1,S=1,padding=0", "K*C*R*S")]],
    # GPU and spec files
    (["simulate", SMALL, "--gpu", "B100"], "'B100'"),
    (["simulate", SMALL, "--gpu", ""], "''"),
    (["simulate", SMALL], "--gpu NAME"),
    (["simulate", SMALL, "--gpu", "H100", "--spec", CALIBRATED], "given together"),   # before: --gpu ignored
    (["optimize", SMALL, "--gpu", "A100", "--spec", CALIBRATED], "--gpu 'A100' and --spec"),
    (["simulate", SMALL, "--spec", "/no/such/spec.json"], "/no/such/spec.json"),
    (["simulate", SMALL, "--spec", "{dir}"], "{dir}"),
    (["simulate", SMALL, "--spec", "{not_json.json}"], "not valid JSON"),
    (["simulate", SMALL, "--spec", "{list.json}"], "top level must be a JSON object"),
    (["simulate", SMALL, "--spec", "{empty.json}"], "not valid JSON"),
    *[(["simulate", SMALL, "--spec", "{spec_inf_%s.json}" % f], f"values.{f}.value=inf") for f in PRESET["values"]],
    *[(["simulate", SMALL, "--spec", "{spec_huge_%s.json}" % f], f"{f}=1000000000000") for f in
      ("sm_count", "max_threads_per_sm", "max_blocks_per_sm", "registers_per_sm", "l2_partitions")],
    *[(["simulate", SMALL, "--spec", "{spec_text_%s.json}" % f], "'fast'") for f in ("dram_bw_gbps", "sm_count", "l2_bytes")],
    *[(["simulate", SMALL, "--spec", "{spec_negative_%s.json}" % f], f"{f}=-5") for f in ("dram_bw_gbps", "sm_count", "l2_bytes")],
    *[(["simulate", SMALL, "--spec", "{spec_missing_%s.json}" % f], f"missing field '{f}'") for f in ("dram_bw_gbps", "sm_count", "l2_bytes")],
    (["simulate", SMALL, "--spec", "{spec_unknown_field.json}"], "'dram_bandwidth'"),
    (["simulate", SMALL, "--spec", "{spec_version.json}"], "schema_version=7"),
    *[(["simulate", SMALL, "--spec", "{spec_cost_%s_%s.json}" % (f, v)], needle) for f, v, needle in [
        ("compute_efficiency", 1.5, "compute_efficiency=1.5"), ("fixed_ns", -1, "fixed_ns=-1"),
        ("block_sm_share", 0, "block_sm_share=0"), ("launch_fixed_ns", -3, "launch_fixed_ns=-3"),
        ("memory_overlap", 2, "memory_overlap=2"), ("coresident_stretch", 1.0, "coresident_stretch=1.0"),
        ("compute_efficiency", 1e999, "compute_efficiency.value=inf")]],
    (["simulate", SMALL, "--spec", "{spec_cost_unknown.json}"], "'speed'"),
    *[(["simulate", SMALL, "--spec", "{spec_absurd_%s.json}" % f], f"{f}={v!r} is not allowed: it must be in") for f, v in
      (("kernel_launch_ns", 1e12), ("dram_latency_ns", 1e12), ("l2_bw_gbps", 1e-3), ("fp32_peak_gflops", 1e-6),
       ("dram_bw_gbps", 1e12), ("tb_max_dram_bw_gbps", 1e-6))],
    *[(["simulate", SMALL, "--spec", "{spec_absurd_cost_%s.json}" % f], f"{f}={v!r} is not allowed: it must be in")
      for f, v in (("fixed_ns", 1e10), ("block_sm_share", 1e-12), ("block_dram_bw_gbps", 1e-9), ("launch_fixed_ns", 1e15),
                   ("megakernel_claim_ns", 1e15))],
    # batch, limits
    *[(SIM + ["--batch", b], f"'{b}'") for b in ("0", "-1", "abc", "1.5", "")],
    (SIM + ["--batch", "1000000000"], "N=1000000000"),
    (["simulate", "resnet-1", "--gpu", "H100", "--batch", "4096", "--max-tasks", "100000"], "max_tasks=100,000"),
    (["simulate", "resnet-1", "--gpu", "H100", "--max-tasks", "10"], "max_tasks=10"),
    *[(SIM + ["--max-tasks", v], f"'{v}'") for v in ("0", "-5", "many")],
    # algorithm, schedule, parameters
    (SIM + ["--algo", "fft"], "'fft'"),
    (SIM + ["--schedule", "sideways"], "'sideways'"),
    (SIM + ["--algo", "ecr", "--schedule", "fused_twice"], "'fused_twice'"),
    (SIM + ["--placement", "diagonal"], "'diagonal'"),
    *[(SIM + ["--param", p], needle) for p, needle in [
        ("tile=3", "tile=3"), ("M=abc", "M='abc'"), ("foo=1", "'foo'"), ("M", "'M'"), ("M=4,M=8", "M is given twice"),
        ("style=weird", "style='weird'"), ("dispatch=x", "dispatch='x'"), ("style=persistent,blocks_per_sm=0", "blocks_per_sm=0"),
        ("blocks_per_sm=abc", "blocks_per_sm='abc'"), ("ready_window=3", "ready_window=3"), ("gemm_math=fp64", "gemm_math='fp64'"),
        ("t=abc", "t='abc'"), ("threads=1.5", "threads='1.5'"), ("tile=abc", "tile='abc'"), ("=4", "'=4'"),
        ("D_IG=x", "D_IG='x'"), ("sparsity=0.5", "'sparsity'"),
        # a GEMM block's shared memory beyond any spec's (before: OverflowError in the lowering's int32 tables)
        ("t=1000000000", "t=1,000,000,000 is not allowed"), ("t=0", "t=0"),
        ("gemm_k_tile=100000000", "gemm_k_tile=100,000,000 is not allowed"),
        # an integer beyond its range (before: an OverflowError traceback from Algorithm 1's plan)
        ("D_IG=99999999999999999999999", "D_IG=99999999999999999999999 is not allowed: it must be an integer from 0 to 2,147,483,647"),
        ("D_GO=9223372036854775808", "D_GO=9223372036854775808 is not allowed: it must be an integer from 0"),
        ("M=9223372036854775808", "M=9223372036854775808 is not allowed"),
        # the user's key named (before: the engine's bytes alone, the config's field names)
        ("t=524224", "t=524,224 is not allowed: a GEMM block would stage 67,108,864 bytes in shared memory, above the 232,448 H100 gives"),
        ("pairs=0", "--param pairs=0 is not allowed"), ("threads=0", "--param threads=0 is not allowed"),
        ("gemm_threads=33", "--param gemm_threads=33 is not allowed")]],
    (["simulate", "N=1,C=8,K=8,H=8,W=8,stride=0", "--gpu", "H100"], ": stride=0 is not allowed"),
    (["simulate", "conv1_1", "--gpu", "H100"], "vgg16/conv1_1, vgg19/conv1_1"),
    (["simulate", SMALL, "--spec", ""], "--spec '' is not allowed"),
    (SIM + ["--frobnicate"], "unrecognized arguments: --frobnicate (see megasim simulate --help)"),
    # no prefix matching: --gpu is not validate's --gpus
    (_validate_measured("{csv_no_rows.csv}", "--workers", "257"),
     "'257' is not allowed: it must be an integer in [1, 256]"),     # as optimize and sweep (was 1 to 1,024)
    (["validate", "resnet-1", "--spec", CALIBRATED, "--gpu", "H100"], "unrecognized arguments: --gpu H100 (see megasim validate --help)"),
    *[(SIM + ["--algo", "ecr", "--param", p], needle) for p, needle in [
        ("sparsity=2", "sparsity=2.0"), ("sparsity=abc", "sparsity='abc'"), ("pattern=stripes", "pattern='stripes'"),
        ("cluster_px=0", "cluster_px=0"), ("k_tile=abc", "k_tile='abc'"), ("style=persistent", "ecr"),
        ("sparsity=nan", "sparsity=nan"), ("seed=x", "seed='x'"), ("M=4", "'M'"),
        ("seed=-1", "seed=-1"), ("seed=18446744073709551616", "seed=18446744073709551616")]],
    # the sparse family materialises its tensors: a huge one is refused before lowering (before: NumPy's
    # MemoryError as a traceback, after seconds and gigabytes)
    *[(["simulate", layer, "--gpu", "H100", "--algo", algo], needle) for layer, algo, needle in [
        ("N=1,C=1000000000,K=1,H=1,W=1,R=1,S=1,padding=0", "direct", "input N*C*H*W = 1,000,000,000 is not allowed"),
        ("N=1,C=1,K=1000000000,H=1,W=1,R=1,S=1,padding=0", "ecr", "output N*K*P*Q = 1,000,000,000"),
        ("N=1,C=1,K=1,H=46340,W=46340", "pecr", "pixels N*H*W = 2,147,395,600 is not allowed: at most 16,777,216"),
        ("N=1,C=1,K=1,H=2147483647,W=1,R=1,S=1,padding=0", "direct_fused", "under direct_fused")]],
    (SIM + ["--algo", "pecr", "--param", "pool=3"], "'3'"),
    (SIM + ["--algo", "pecr", "--param", "pool=0x0"], "pool size=0"),
    (SIM + ["--trace", "/no/such/dir/t.json"], "/no/such/dir/t.json"),
    (SIM + ["--trace", "{dir}"], "{dir}"),
    (SIM + ["--trace", "/proc/t.json"], "--trace '/proc/t.json' is not allowed"),   # before: the run, then the write failed
    # a malformed scheduler address (before: distributed's ValueError as a traceback)
    (["sweep", "{tiny.toml}", "--scheduler", "foo", "--out", "{dir}/t.csv"], "scheduler 'foo' is not allowed"),
    (["sweep", "{tiny.toml}", "--scheduler", "bogus://x:1", "--out", "{dir}/t.csv"], "unknown address scheme"),
    (["sweep", "{tiny.toml}", "--scheduler", "tcp://host", "--out", "{dir}/t.csv"], "missing port number"),
    (["sweep", "{tiny.toml}", "--out", "/proc/t.csv"], "--out '/proc/t.csv' is not allowed"),
    # optimize
    *[(OPT + ["--workers", w], f"'{w}'") for w in ("0", "-1", "abc", "99999")],
    *[(OPT + ["--budget", b], f"'{b}'") for b in ("0", "-5", "1000000000", "x")],
    *[(OPT + ["--option", o], needle) for o, needle in [
        ("top=abc", "top='abc'"), ("top=0", "top='0'"), ("explore=-1", "explore='-1'"), ("explore=nan", "explore='nan'"),
        ("bogus=1", "bogus"), ("top", "'top'"), ("top=1,top=2", "top is given twice"), ("explore=inf", "explore='inf'"),
        # the strategy's own ranges, checked with the other flags (before: explore=5 passed the flag check)
        ("explore=5", "from 0 to 1"), ("top=100000", "from 1 to 10000"), ("screen=1.5", "screen='1.5'")]],
    *[(OPT + ["--strategy", s, "--option", o], needle) for s, o, needle in [
        ("annealing", "alpha=2", "alpha='2'"), ("annealing", "T0=0", "T0='0'"), ("diff_evo", "popsize=5000", "popsize='5000'"),
        ("diff_evo", "mutation=2", "mutation='2'"), ("random", "batch=0", "batch='0'"),
        ("exhaustive", "batch=1000000", "batch='1000000'")]],
    (OPT + ["--seed", "-1"], "'-1'"),
    (OPT + ["--space", "bogus"], "'bogus'"),
    (OPT + ["--strategy", "bogus"], "'bogus'"),
    (OPT + ["--landscape", "/no/such/dir/x.csv"], "/no/such/dir/x.csv"),
    (OPT + ["--cache", "{dir}"], "{dir}"),
    (OPT + ["--param", "tile=3"], "tile=3"),
    # a key the search sets (before: --param M=4 searched M anyway and returned a best M=2)
    (OPT + ["--param", "M=4"], "--param M=4 is not allowed with space 'default' of winograd: the search varies M"),
    (OPT + ["--param", "D_IG=100"], "D_IG=100 is not allowed with space 'default'"),
    (OPT + ["--param", "threads=256"], "the search holds threads at 128"),
    (OPT + ["--space", "algorithm1", "--param", "style=persistent"], "style=persistent is not allowed with space 'algorithm1'"),
    (["optimize", SMALL, "--gpu", "H100", "--algo", "ecr", "--param", "sparsity=0.5,k_tile=8"], "the search varies k_tile"),
    (["optimize", "resnet-1", "--gpu", "H100", "--batch", "4096", "--max-tasks", "1000"], "--max-tasks 1,000"),
    # transfer-spec, update-spec
    *[([cmd, "--spec", CALIBRATED, "--measurements", "{%s}" % name, "--out", "{dir}/out.json"], needle)
      for cmd in ("transfer-spec", "update-spec") for name, needle in [
          ("not_json.json", "not valid JSON"), ("list.json", "not a list"), ("m_values_string.json", "values"),
          ("m_value_text.json", "values.dram_bw_gbps"), ("m_value_inf.json", "values.dram_bw_gbps"),
          ("m_kind_times_string.json", "kind_times"), ("m_median_text.json", "kind_times[3].median_ms='slow'"),
          ("m_median_negative.json", "kind_times[5].median_ms=-1"), ("m_no_preset.json", "'preset'"),
          ("m_device_number.json", "device=7"), ("m_unknown_key.json", "'colour'")]],
    (["transfer-spec", "--spec", CALIBRATED, "--measurements", "/no/such.json", "--out", "x.json"], "/no/such.json"),
    (["update-spec", "--spec", CALIBRATED, "--measurements", str(REPO / "megasim/hardware/calibrated/h200.measurements.json"),
      "--out", "/no/such/dir/out.json"], "/no/such/dir/out.json"),
    (["update-spec", "--spec", CALIBRATED, "--measurements", str(REPO / "megasim/hardware/calibrated/h200.measurements.json"),
      "--out", "{dir}/o.json", "--refit", "bogus_ns"], "'bogus_ns'"),
    (["update-spec", "--spec", CALIBRATED, "--measurements", str(REPO / "megasim/hardware/calibrated/h200.measurements.json"),
      "--out", "{dir}/o.json", "--refit", "megakernel_fixed_ns@nokind"], "'megakernel_fixed_ns@nokind'"),
    (["update-spec", "--spec", CALIBRATED, "--measurements", str(REPO / "megasim/hardware/calibrated/h200.measurements.json"),
      "--out", "{dir}/o.json", "--layers", "resnet-9"], "'resnet-9'"),
    (["transfer-spec", "--spec", CALIBRATED, "--measurements", str(REPO / "megasim/hardware/calibrated/h200.measurements.json"),
      "--out", "{dir}/o.json", "--keep", "colour"], "'colour'"),
    (["transfer-spec", "--spec", "{spec_inf_dram_bw_gbps.json}", "--measurements",
      str(REPO / "megasim/hardware/calibrated/h200.measurements.json"), "--out", "{dir}/o.json"], "values.dram_bw_gbps.value=inf"),
    # calibrate (refused before any GPU is looked for)
    (["calibrate", "--out", "/no/such/dir/x.json"], "/no/such/dir/x.json"),
    (["calibrate", "--out", "{dir}/c.json", "--layers", "resnet-9"], "'resnet-9'"),
    (["calibrate", "--out", "{dir}/c.json", "--param", "tile=3"], "tile=3"),
    (["calibrate", "--out", "{dir}/c.json", "--layers", "vgg-1", "--from-measurements",
      str(REPO / "megasim/hardware/calibrated/h200.measurements.json")], "'vgg-1'"),
    (["calibrate", "--out", "{dir}/c.json", "--from-measurements", "{m_median_text.json}"], "kind_times[3].median_ms"),
    (["calibrate", "--out", "{dir}/c.json", "--algo", "ecr"], "--from-measurements"),
    (["calibrate", "--out", "{dir}/c.json", "--algo", "ecr", "--spec", CALIBRATED, "--from-measurements",
      "{sparse_rows_missing.json}"], "'rows'"),
    (["calibrate", "--out", "{dir}/c.json", "--algo", "ecr", "--spec", CALIBRATED, "--from-measurements",
      "{sparse_rows_bad.json}"], "rows[0].sparsity=2.0"),
    (["calibrate", "--out", "{dir}/c.json", "--algo", "fft"], "'fft'"),
    # validate (honest outcomes: no rows, no times)
    (_validate_measured("{csv_no_rows.csv}", layer="resnet-9"), "'resnet-9'"),
    (_validate_measured("{csv_no_rows.csv}"), "no winograd rows"),
    (_validate_measured("{csv_other_layer.csv}"), "no winograd rows for resnet-1"),
    (_validate_measured("{csv_no_column.csv}"), "'measured_us'"),
    (_validate_measured("{csv_bad_time.csv}"), "measured_us='fast'"),
    (_validate_measured("{csv_negative_time.csv}"), "measured_us='-3'"),
    (_validate_measured("{csv_bad_param.csv}"), "csv_bad_param.csv' row 2 schedule='fused' params='M=abc': M='abc'"),
    # a row's problems name the file and the row (before: '--param ...' alone, a misfit found when predicted
    # named no row, an unknown layer was dropped without a word, an int >= 2**63 a traceback)
    (_validate_measured("{csv_unknown_layer.csv}", "--workers", "1"),
     "csv_unknown_layer.csv' row 3 layer 'resnet-9'"),
    (["validate", "resnet-1", "--spec", CALIBRATED, "--measured", "{csv_misfit.csv}", "--workers", "1", "--out", "{dir}/v"],
     "csv_misfit.csv' row 3: D_IG=0 is too small for M=4"),
    # an absurd time (before: every ranking metric NaN, 'met regret<=5%', exit 0)
    (_validate_measured("{csv_absurd_time.csv}"),
     "row 2 measured_us='1e300' is not allowed: it must be a finite number > 0 and at most 1e+09"),
    (_validate_measured("{csv_huge_int.csv}"),
     "csv_huge_int.csv' row 2 schedule='fused' params='D_IG=99999999999999999999999': D_IG=99999999999999999999999 is not allowed"),
    (_validate_measured("{csv_bad_schedule.csv}"), "'sideways'"),
    (_validate_measured("{csv_all_failed.csv}"), "no measured times"),
    # a duplicated column (before: the last one read silently), a short row (before: accepted), a BOM
    (_validate_measured("{csv_dup_column.csv}"), "'measured_us' more than once"),
    (_validate_measured("{csv_short_row.csv}"), "row 2 is not allowed: it has fewer"),
    (_validate_measured("{csv_bom.csv}"), "byte-order mark"),
    (_validate_measured("/no/such.csv"), "/no/such.csv"),
    (_validate_measured("{csv_no_rows.csv}", spec="{spec_inf_sm_count.json}"), "sm_count"),
    (["validate", "resnet-1", "--spec", CALIBRATED, "--mappings", "0"], "'0'"),
    (["validate", "resnet-1", "--spec", CALIBRATED, "--rounds", "-2"], "'-2'"),
    (["validate", "resnet-1", "--spec", CALIBRATED, "--algo", "fft", "--measured", "{csv_no_rows.csv}", "--out", "{out_dir}"], "'fft'"),
]


def _fill(value: str, files: dict[str, str]) -> str:
    for name, path in files.items():
        value = value.replace("{%s}" % name, path)
    return value


def test_the_corpus_is_large_enough():
    assert len(CLI_CASES) + len(PY_CASES) >= 150


@pytest.mark.parametrize("argv, needle", CLI_CASES, ids=[" ".join(a)[:60] for a, _ in CLI_CASES])
def test_cli_answers_one_line_naming_the_value(capsys, files, argv, needle):
    code = main([_fill(a, files) for a in argv])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("megasim: error: "), err
    assert _fill(needle, files) in lines[0], lines[0]


def _py_cases():
    from megasim.calibration.measurements import Measurements
    from megasim.hardware import get_gpu, load_spec, spec_from_dict
    from megasim.hardware.spec import TaskCost
    from megasim.plan import Plan, build, estimate_tasks, predict
    from megasim.sim import SimOptions
    from megasim.sweep import load_sweep
    from megasim.workloads import ConvProblem, network_layers, parse_layer
    from megasim.workloads.sparse import SparsitySpec, relu_chain_maps, sparse_feature_map, vgg19_sparse_layers
    from megasim.orders import naive_fused
    from megasim.sim import simulate
    from megasim.taskgraph import TaskGraphBuilder
    small = parse_layer(SMALL)
    tiny = TaskGraphBuilder()
    tiny.add_kind("k")
    tiny.add_task("k", flops=10)
    tiny = tiny.build()
    return [
        ("simulate spec str", lambda: simulate(tiny, naive_fused(tiny), "H100"), "spec 'H100' (a str)"),
        ("simulate spec None", lambda: simulate(tiny, naive_fused(tiny), None), "spec None"),
        ("simulate options dict", lambda: simulate(tiny, naive_fused(tiny), get_gpu("H100"), {"engine": "simpy"}),
         "options {'engine': 'simpy'} (a dict)"),
        ("parse_layer(None)", lambda: parse_layer(None), "None"),
        ("parse_layer(3)", lambda: parse_layer(3), "3"),
        ("parse_layer(b'x')", lambda: parse_layer(b"resnet-1"), "b'resnet-1'"),
        ("parse_layer('x')", lambda: parse_layer("resnet-99"), "'resnet-99'"),
        ("parse_layer batch 0", lambda: parse_layer("resnet-1", batch=0), "batch=0"),
        ("parse_layer batch str", lambda: parse_layer("resnet-1", batch="8"), "batch='8'"),
        ("parse_layer batch float", lambda: parse_layer("resnet-1", batch=2.0), "batch=2.0"),
        ("Plan(m='4')", lambda: Plan(m="4"), "'m'"),
        ("Plan(algorithm=3)", lambda: Plan(algorithm=3), "algorithm=3"),
        ("Plan(schedule=3)", lambda: Plan(schedule=3), "schedule=3"),
        ("Plan(style=None)", lambda: Plan(style=None), "style=None"),
        ("Plan(params=dict)", lambda: Plan(params={"m": 4}), "{'m': 4}"),
        ("Plan(blocks_per_sm=-1)", lambda: Plan(style="persistent", blocks_per_sm=-1), "blocks_per_sm=-1"),
        ("Plan too many args", lambda: Plan(*range(9)), "9 positional"),
        ("Plan.parse(None, 5)", lambda: Plan.parse(None, 5), "5"),
        ("Plan.parse(3)", lambda: Plan.parse(3), "3"),
        ("Plan.parse algorithm", lambda: Plan.parse(None, None, algorithm="fft"), "'fft'"),
        ("predict spec str", lambda: predict(small, "H100"), "'H100'"),
        ("predict problem str", lambda: predict("resnet-1", get_gpu("H100")), "'resnet-1'"),
        ("predict plan str", lambda: predict(small, get_gpu("H100"), "fused"), "'fused'"),
        ("predict options str", lambda: predict(small, get_gpu("H100"), None, "fast"), "'fast'"),
        ("predict max_tasks 0", lambda: predict(small, get_gpu("H100"), max_tasks=0), "max_tasks=0"),
        ("predict max_tasks float", lambda: predict(small, get_gpu("H100"), max_tasks=1e6), "max_tasks=1000000.0"),
        ("predict progress int", lambda: predict(small, get_gpu("H100"), progress=5), "progress=5"),   # TypeError before
        ("build progress str", lambda: build(small, progress="log"), "progress='log'"),
        ("ConvProblem stride huge", lambda: ConvProblem(1, 1, 1, 8, 8, stride=10 ** 30), "stride=10000"),  # OverflowError before
        ("predict above max_tasks", lambda: predict(parse_layer("resnet-1"), get_gpu("H100"), max_tasks=100), "max_tasks=100"),
        ("build above max_tasks", lambda: build(parse_layer("resnet-1", batch=4096), max_tasks=1000), "N=4,096"),
        ("build tensor limit", lambda: build(parse_layer("resnet-1", batch=10 ** 9)), "200,704,000,000,000"),
        ("estimate_tasks tensor limit", lambda: estimate_tasks(parse_layer("resnet-1", batch=10 ** 7)), "N*C*H*W"),
        ("get_gpu(None)", lambda: get_gpu(None), "None"),
        ("get_gpu('x')", lambda: get_gpu("B100"), "'B100'"),
        ("load_spec missing", lambda: load_spec("/no/such/spec.json"), "/no/such/spec.json"),
        ("load_spec dict", lambda: load_spec({"a": 1}), "{'a': 1}"),
        ("load_spec None", lambda: load_spec(None), "spec file None"),
        ("load_sweep None", lambda: load_sweep(None), "sweep file None"),
        ("load_sweep int", lambda: load_sweep(3), "sweep file 3"),
        ("ConvProblem name int", lambda: ConvProblem(1, 1, 1, 4, 4, name=3), "name=3"),
        ("spec_from_dict list", lambda: spec_from_dict([1]), "top level"),
        ("spec_from_dict inf", lambda: spec_from_dict({**PRESET, "values": {**PRESET["values"],
                                                       "dram_bw_gbps": {"value": float("inf"), "source": "x"}}}),
         "dram_bw_gbps.value=inf"),
        ("TaskCost inf", lambda: TaskCost(compute_efficiency=float("inf")), "compute_efficiency=inf"),
        ("TaskCost str", lambda: TaskCost(fixed_ns="5"), "fixed_ns='5'"),
        ("TaskCost nan", lambda: TaskCost(ns_per_step=float("nan")), "ns_per_step=nan"),
        ("SimOptions placement", lambda: SimOptions(placement="diagonal"), "'diagonal'"),
        ("ConvProblem N=0", lambda: ConvProblem(0, 1, 1, 4, 4), "N=0"),
        ("ConvProblem str", lambda: ConvProblem("2", 1, 1, 4, 4), "N='2'"),
        ("ConvProblem padding", lambda: ConvProblem(1, 1, 1, 4, 4, padding=-1), "padding=-1"),
        ("SparsitySpec 2", lambda: SparsitySpec(2.0), "sparsity=2.0"),
        ("SparsitySpec pattern", lambda: SparsitySpec(0.5, "stripes"), "'stripes'"),
        ("SparsitySpec seed -1", lambda: SparsitySpec(0.5, seed=-1), "seed=-1"),
        ("SparsitySpec seed float", lambda: SparsitySpec(0.5, seed=1.5), "seed=1.5"),
        ("sparse_feature_map shape", lambda: sparse_feature_map((1, 2), 0.5), "(1, 2)"),
        ("vgg19_sparse_layers(0)", lambda: vgg19_sparse_layers(0), "batch=0"),
        ("relu_chain_maps(17)", lambda: relu_chain_maps(17), "image_hw=17"),
        ("network_layers('x')", lambda: network_layers("alexnet"), "'alexnet'"),
        ("Measurements.from_dict str", lambda: Measurements.from_dict("x"), "str"),
        ("Measurements.from_dict values", lambda: Measurements.from_dict({**MEASURED, "values": []}), "values"),
        ("Measurements.from_dict kind_times row", lambda: Measurements.from_dict(
            {**MEASURED, "kind_times": [{"layer": "resnet-1", "kind": "gemm", "median_ms": float("nan")}]}),
         "kind_times[0].median_ms=nan"),
    ]


PY_CASES = _py_cases()


@pytest.mark.parametrize("call, needle", [(c, n) for _, c, n in PY_CASES], ids=[name for name, _, _ in PY_CASES])
def test_python_api_raises_a_domain_error_naming_the_value(call, needle):
    with pytest.raises(MegasimError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and needle in message, message


def test_a_few_cases_through_the_installed_command(files):
    """The same answers from a separate process (the console script's path: sys.exit(main()))."""
    import subprocess
    import sys
    for argv, needle in [(["simulate", "resnet-9", "--gpu", "H100"], "'resnet-9'"),
                         (["simulate", SMALL, "--spec", files["spec_inf_dram_bw_gbps.json"]], "dram_bw_gbps"),
                         (["optimize", SMALL, "--gpu", "H100", "--workers", "0"], "'0'")]:
        proc = subprocess.run([sys.executable, "-m", "megasim.cli.main", *argv], capture_output=True, text=True)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1 and needle in proc.stderr, proc.stderr
