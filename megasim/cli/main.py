"""The `megasim` command: its entry point (``megasim.cli.main:main``) and the table of its commands.

    megasim layers [--json]
    megasim gpus [--json]
    megasim algorithms [--json]
    megasim simulate LAYER [--algo NAME] --gpu GPU [--batch N] [--schedule S] [--param K=V,..]
                     [--spec FILE] [--json] [--trace FILE] [--max-tasks N]
    megasim optimize LAYER [--algo NAME] --gpu GPU [--param K=V,..] [--spec FILE] [--budget N] [--strategy S]
                     [--option K=V,..] [--seed N] [--workers N] [--cache FILE] [--landscape FILE.csv] [--json]
                     [--space NAME] [--evaluator simulator|gpu] [--max-tasks N]
    megasim calibrate [--algo NAME] --out FILE [--from-measurements FILE] [...]                    (GPU)
    megasim validate LAYER.. --spec FILE [--algo NAME] [--mappings N] [--out DIR] [--measured CSV] [--no-predict]  (GPU)
    megasim transfer-spec --spec FILE --measurements FILE.measurements.json --out FILE [--keep FIELD ..]
    megasim update-spec --spec FILE --measurements FILE.measurements.json --out FILE [--refit FIELD[@KIND] ..]
    megasim sweep SPEC.toml [--out TABLE] [--workers N | --scheduler ADDRESS] [--batch-size N] [--retry-failed]
                  [--dry-run] [--json]

Each command lives in a module of ``megasim.cli`` with ``add_<command>(parser)`` and
``run_<command>(args) -> int``; only the module of the command being run is imported, and its heavy
imports (the engine, SciPy, Numba) happen inside it, so `megasim layers` starts about as fast as
Python imports NumPy (tests/test_inputs_startup.py keeps it so).

User errors (an unknown layer or GPU, a malformed spec, impossible parameters, a bad file, work above a
documented limit, a run without data) print one line, ``megasim: error: ...``, naming the value, where
it came from and what is allowed, and exit with status 2 (docs/errors.md).
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from typing import Sequence

from megasim import __version__
from megasim.errors import MegasimError

# name -> (module, help); the module defines add_<name>(parser) and run_<name>(args) ('-' as '_').
COMMANDS = {
    "layers": ("megasim.cli.info", "list the built-in layers"),
    "gpus": ("megasim.cli.info", "list the GPU presets"),
    "algorithms": ("megasim.cli.info", "list the algorithms, their schedules and parameters"),
    "simulate": ("megasim.cli.simulate", "predict the runtime of one layer under one schedule"),
    "optimize": ("megasim.cli.optimize", "search the mapping parameters of one layer with the model"),
    "calibrate": ("megasim.cli.calibrate", "measure this GPU with microbenchmarks and write a spec file (needs a GPU)"),
    "transfer-spec": ("megasim.cli.specs", "a calibrated spec moved to another GPU of the same architecture: its "
                      "measured values from that GPU's microbenchmarks, the task costs kept (no GPU needed)"),
    "update-spec": ("megasim.cli.specs", "a calibrated spec after a kernel change: the traced claims and the named "
                    "task-cost fields refitted from new measurements, every other cost kept (no GPU needed)"),
    "validate": ("megasim.cli.validate", "predicted vs measured runtimes of many mappings (needs a GPU)"),
    "sweep": ("megasim.cli.sweep", "evaluate a sweep file (problems x GPUs x mappings) on a Dask cluster into one table"),
}


class UsageError(Exception):
    """A command line argparse cannot read (an unknown flag, a value of the wrong form)."""


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)   # `validate --gpu` is not `--gpus`, nor `--spec` `--specs`
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:   # one line, exit status 2 (argparse's own convention), via main
        raise UsageError(f"{message} (see {self.prog} --help)")


def _function(command: str, prefix: str):
    module, _ = COMMANDS[command]
    return getattr(importlib.import_module(module), f"{prefix}_{command.replace('-', '_')}")


def make_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with `argv`, only the arguments of the command it names are declared (so only that
    command's module is imported); without, every command's (for documentation and tests)."""
    parser = _Parser(prog="megasim", description="Predict the runtime of megakernel task mappings on GPUs.")
    parser.add_argument("--version", action="version", version=f"megasim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    chosen = next((a for a in argv if not a.startswith("-")), None) if argv is not None else None
    for name, (_, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if argv is None or name == chosen:
            _function(name, "add")(p)
    return parser


LONG_DIGITS = re.compile(r"\d{41,}")     # a number echoed from the input, e.g. a spec's 10**400


def _one_line(text: str) -> str:
    """The message on one line, any run of more than 40 digits cut to its first 12 and its length."""
    line = " ".join(str(text).split())
    return LONG_DIGITS.sub(lambda m: f"{m.group()[:12]}...({len(m.group())} digits)", line)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (0, or 2 for a user error) and never raises for one."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args, unknown = make_parser(argv).parse_known_args(argv)
        if unknown:     # argparse names the top parser here: point to the command's own --help
            raise UsageError(f"unrecognized arguments: {' '.join(unknown)} (see megasim {args.command} --help)")
        return _function(args.command, "run")(args)
    except UsageError as err:
        print(f"megasim: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except SystemExit as done:   # --help, --version
        return done.code if isinstance(done.code, int) else 0
    except MegasimError as err:
        print(f"megasim: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `megasim layers | head`
        return 0
    except KeyboardInterrupt:
        print("megasim: interrupted", file=sys.stderr)
        return 130
    except OSError as err:  # an output (or input) path that cannot be opened: --trace, --out, --landscape
        where = f" {err.filename!r}" if err.filename else ""
        print(f"megasim: error: cannot open{where}: {_one_line(err.strerror or err)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
