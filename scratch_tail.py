"""Session 14 scratch: trace the GEMM's blocks (start, end, SM) on short and long grids, the non-fused
GEMM kernel (a traced copy) and the megakernel per task; saved raw for comparison with the model."""
import json, os, sys, tarfile
import numpy as np
from numba import cuda
from gpu import megakernel as mk
from gpu import executor as ex
from gpu.winograd_device import gemm_task, GEMM
from gpu.megakernel import T_GROUP, T_INDEX
from gpu.trace import globaltimer, smid
from gpu.calibrate import nonfused_workspaces, launch_orders, traced_alone
from gpu.timing import time_cuda
if os.environ.get('NUMBA_ENABLE_CUDASIM') == '1':
    from types import SimpleNamespace
    def time_cuda(fn, **kw):
        fn(0)
        return SimpleNamespace(median_ms=0.0)

@(cuda.jit if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else cuda.jit(max_registers=mk.GEMM_KERNEL_MAX_REGISTERS))
def gemm_kernel_traced(table, prm, V, U, M, trace):
    b = cuda.blockIdx.x
    if cuda.threadIdx.x == 0:
        trace[b, 0] = globaltimer()
        trace[b, 3] = smid()
    gemm_task(table[b, T_GROUP], table[b, T_INDEX], prm, V, U, M)
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        trace[b, 2] = globaltimer()

out = os.environ["OUT"] + "/tail"
os.makedirs(out, exist_ok=True)
layers = sys.argv[1:] or ["resnet-4", "yolov3-5", "N=64,C=256,K=256,H=9,W=9", "N=64,C=512,K=512,H=9,W=9", "resnet-1", "vgg-3", "resnet-3", "yolov3-4"]
summary = []
rng = np.random.default_rng(5)
for layer in layers:
    graph, schedule, wplan, wss = nonfused_workspaces(layer, "pairs=4", rng)
    orders = launch_orders(graph, schedule)
    order = orders["gemm"]
    d_prm = cuda.to_device(wplan.params)
    d_table = cuda.to_device(ex.task_table(graph, order))
    size = len(order)
    cfg = wplan.config
    plain = lambda i: mk.gemm_kernel[size, cfg.gemm_threads, 0, wplan.shared_bytes](d_table, d_prm, wss[i].V, wss[i].U, wss[i].M)
    st = time_cuda(plain, warmup=3, repeats=20, rotate=3)
    tr = cuda.to_device(np.zeros((size, 5), np.int64))
    for i in range(4):
        gemm_kernel_traced[size, cfg.gemm_threads, 0, wplan.shared_bytes](d_table, d_prm, wss[i % 3].V, wss[i % 3].U, wss[i % 3].M, tr)
    cuda.synchronize()
    t_kernel = tr.copy_to_host()
    traced = lambda i: gemm_kernel_traced[size, cfg.gemm_threads, 0, wplan.shared_bytes](d_table, d_prm, wss[i].V, wss[i].U, wss[i].M, tr)
    st_tr = time_cuda(traced, warmup=3, repeats=20, rotate=3)
    t_mega = traced_alone(wplan, wss, order, "gemm", "per_task", None, 4)
    t_pers = traced_alone(wplan, wss, order, "gemm", "persistent", 4, 4)
    np.savez(f"{out}/{layer.replace('=', '').replace(',', '_')}.npz", kernel=t_kernel, mega=t_mega, persistent=t_pers, order=order)
    span = lambda t: float((t[:, 2].max() - t[:, 0].min()) / 1e3)
    row = {"layer": layer, "tasks": size, "gemm_kernel_median_us": st.median_ms * 1e3, "traced_kernel_median_us": st_tr.median_ms * 1e3,
           "kernel_span_us": span(t_kernel), "mega_span_us": span(t_mega), "persistent_span_us": span(t_pers)}
    print(row, flush=True)
    summary.append(row)
    del wss
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
with tarfile.open(os.environ["OUT"] + "/tail.tar.gz", "w:gz") as tf:
    tf.add(out, arcname="tail")
