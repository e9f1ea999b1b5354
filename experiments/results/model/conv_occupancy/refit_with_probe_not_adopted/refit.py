"""The script that made this directory's refit (2026-11-25, committed in 6ea0382; run from the repository root, 10 min on
2 cores): the committed sparse calibration cases plus the occupancy probe's 82 H100 cases, fitted as
`megasim calibrate-sparse` fits. Its spec went through `python -m experiments.sparse_validate --spec ...`;
sparse_summary.json and sparse_crossover.csv here are that run. Not adopted (docs/findings.md, sparse convolution)."""
import json, sys, time
from megasim.hardware import load_spec, dump_spec
from megasim.calibration_sparse import calibrate_sparse
spec = load_spec('megasim/hardware/calibrated/h200_sparse.json')
base = json.load(open('megasim/hardware/calibrated/h200.sparse_measurements.json'))
probe = json.load(open('experiments/results/nvidia-h100/conv_occupancy/conv_occupancy_measured.json'))
rows = base['rows'] + probe['rows']
t = time.time()
new, report = calibrate_sparse(spec, rows, device='H200 + H100 probe', date='2026-11-25')
dump_spec(new, '/tmp/h200_sparse_round4.json')
json.dump(report, open('/tmp/h200_sparse_round4.fit.json', 'w'), indent=1, default=str)
for k, v in report['kinds'].items():
    print(k, {a: (round(b, 4) if isinstance(b, float) else b) for a, b in v.items() if a in ('compute_efficiency','ns_per_other_op','fixed_ns','block_sm_share','ns_per_step','ns_per_iteration','ns_per_replay','rms_log_error')})
print('took', time.time() - t)
