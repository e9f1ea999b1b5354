"""Reading the files a user gives megasim, with a cap on their size.

Every input file (a spec, a sweep's TOML, a measurements JSON, an optimizer cache, a measured CSV) is
read through ``read_text`` (a CSV file through ``read_csv``; any of them gzip-compressed when its name ends in
``.gz``), which reads at most the cap of the file's kind plus one byte: a file above
it is refused in one line naming the file and the limit, before it is parsed, so `--spec /dev/zero`
costs 64 MiB at most, not all the memory there is. The caps are far above any file megasim writes or
reads in its experiments (the largest, a sparse benchmark CSV, is 0.35 MB; a spec with its
measurements 0.27 MB; docs/errors.md lists them).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

from megasim.errors import InputError, MegasimError

MiB = 1 << 20

# kind -> the most bytes read from one file of that kind (docs/errors.md, "Input files").
MAX_INPUT_BYTES = {
    "spec file": 64 * MiB,      # GPU spec JSON (--spec)
    "sweep file": 64 * MiB,     # sweep TOML
    "JSON file": 64 * MiB,      # measurements JSON (--measurements, --from-measurements) and other JSON inputs
    "cache file": 256 * MiB,    # optimizer cache (--cache): ~0.3 kB per evaluation, 100,000 evaluations at most
    "CSV file": 256 * MiB,      # measured CSVs (--measured, --from-measurements)
}


def size_text(n: int) -> str:
    return f"{n // MiB:,} MiB" if n >= MiB and n % MiB == 0 else f"{n:,} bytes"


def read_text(path: str | Path, origin: str, kind: str, error: type[MegasimError] = InputError,
              limit: int | None = None) -> str:
    """The text (UTF-8) of the file `path` (gzip-compressed if its name ends in ``.gz``), read only up to the
    cap of `kind` (MAX_INPUT_BYTES, or `limit`; decompressed bytes); `error` (one line naming `origin` and the
    limit) when the file holds more. OSError and
    UnicodeDecodeError pass through, for the caller to name as it names its other failures."""
    cap = MAX_INPUT_BYTES[kind] if limit is None else limit
    # a path ending in .gz is read through gzip, the cap counting its decompressed bytes (a corrupt stream:
    # gzip.BadGzipFile, an OSError)
    with (gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")) as fh:
        data = fh.read(cap + 1)
    if len(data) > cap:
        raise error(f"{origin} is not allowed: it is larger than {size_text(cap)}, the limit for a {kind} "
                    f"(docs/errors.md)")
    return data.decode("utf-8")


def read_csv(path: str | Path, origin: str, error: type[MegasimError] = InputError) -> tuple[list[str], list[dict]]:
    """(header, rows as dicts) of the CSV file `path`, read through ``read_text`` (the CSV cap). The header
    is the file's first line as written (duplicates kept, which ``csv.DictReader`` would merge); OSError,
    UnicodeDecodeError and csv.Error pass through, as ``read_text``'s do."""
    reader = csv.DictReader(io.StringIO(read_text(path, origin, "CSV file", error), newline=""))
    rows = list(reader)
    return list(reader.fieldnames or []), rows


def parse_json(text: str, origin: str, error: type[MegasimError] = InputError) -> Any:
    """The JSON value of `text`, read from `origin`; `error`, one line naming `origin`, when the text is not
    JSON, nests deeper than the parser recurses, holds an integer of more digits than Python converts
    (``sys.get_int_max_str_digits()``, 4,300) or names one key twice in an object (``json`` would keep the
    last of them without a word: a spec's second ``dram_bw_gbps`` replaced the first)."""
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise error(f"{origin} is not allowed: its JSON names key {key!r} twice in one object (give each "
                            f"key once)")
            out[key] = value
        return out
    try:
        return json.loads(text, object_pairs_hook=unique)
    except json.JSONDecodeError as err:
        raise error(f"{origin} is not valid JSON: {err.msg} at line {err.lineno}") from None
    except RecursionError:
        raise error(f"{origin} is not allowed: its JSON nests too deeply") from None
    except MegasimError:
        raise
    except ValueError:      # int() of a number with more digits than Python converts
        raise error(_too_many_digits(origin)) from None


def parse_toml(text: str, origin: str, error: type[MegasimError] = InputError) -> dict[str, Any]:
    """The TOML table of `text`, read from `origin`; `error`, one line naming `origin`, when the text is not
    TOML, nests deeper than the parser recurses or holds an integer of more digits than Python converts."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise error(f"{origin} is not valid TOML: {' '.join(str(err).split())}") from None
    except RecursionError:
        raise error(f"{origin} is not allowed: its TOML nests too deeply") from None
    except ValueError:      # int() of a number with more digits than Python converts
        raise error(_too_many_digits(origin)) from None


def _too_many_digits(origin: str) -> str:
    return f"{origin} is not allowed: it holds an integer of more than {sys.get_int_max_str_digits():,} digits"
