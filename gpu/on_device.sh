#!/usr/bin/env bash
# Runs a command on the GPU machine with the project's environment (shared/DEVICE.md's recipe):
# numpy 2.4.x (numba-cuda 0.30 cannot compile with the image's numpy 2.5) and simpy, carried as
# wheels in .wheels/ (see README: "On a GPU machine"), installed into /tmp/site ahead of the image's.
#   bash gpu/on_device.sh python -m experiments.benchmarks.winograd_bench
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -d .wheels ] && ls .wheels/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .wheels/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
# Byte-compile the project once, as an installed package is: the image sets no bytecode writing, so every
# new process (each Dask worker of a GPU sweep) would otherwise compile its ~900 modules' source again (2 s).
python3 -m compileall -q -j 0 megasim gpu experiments >/dev/null || true
# NUMBA_ENABLE_CUDASIM=0: the real GPU, also for pytest (tests/conftest.py picks the simulator only when unset)
export PYTHONUNBUFFERED=1 NUMBA_ENABLE_CUDASIM=0
# The device copy of the tree has no .git: write .git_sha first (git rev-parse HEAD > .git_sha); megasim.provenance reads it
python3 - <<'PY'
import numpy, numba, numba_cuda, simpy
from numba import cuda
dev = cuda.get_current_device()
print(f"device: {dev.name.decode() if isinstance(dev.name, bytes) else dev.name}, cc {dev.compute_capability}; "
      f"numpy {numpy.__version__}, numba {numba.__version__}, numba-cuda {numba_cuda.__version__}, simpy {simpy.__version__}")
PY
exec "$@"
