#!/bin/bash
# session 30 device script (untracked; deleted after use)
mkdir -p $OUT/r
run() { echo "=== $(date +%T) $*" | tee -a $OUT/r/log.txt; "$@" 2>&1 | tee -a $OUT/r/log.txt; (cd $OUT && tar czf r.tgz r); }
STEP=${1:-1}
if [ "$STEP" = 3 ]; then
  run bash gpu/on_device.sh python -m gpu.calibrate_occupancy --tiles-only \
    --base megasim/hardware/calibrated/h200.measurements.json --out $OUT/r/h200.measurements.json
fi
if [ "$STEP" = 4 ]; then
  run bash gpu/on_device.sh python -m experiments.winograd_bench --model-pairs megasim/hardware/calibrated/h200.json --out $OUT/r/bench_mp
  run bash gpu/on_device.sh python -m experiments.winograd_bench --ours-only --out $OUT/r/ctrl
fi
if [ "$STEP" = 5 ]; then
  run bash gpu/on_device.sh python -m experiments.winograd_bench --model-pairs experiments/results/nvidia-h100/calibration_s30/h100_from_h200_s30.json --out $OUT/r/bench_mp
  run bash gpu/on_device.sh python -m experiments.winograd_bench --ours-only --out $OUT/r/ctrl
fi
