#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The GPU checks and benchmarks, in one run on a lent NVIDIA machine (the device tool: H100/H200, Python 3.12 with
# its own torch, JAX and onnxruntime, no network). Run from the repository root:
#
#   OUT=/some/dir bash bench/gpu_run.sh
#
# Wheels missing there (BlackJAX) travel in .whl/ (pip download --no-deps blackjax==1.7.1 -d .whl). The repository
# root is the `ubench` package, so a symlink makes it importable without a build. Each step has its own time limit
# and writes its log (and its bench JSON) to $OUT as it finishes, so one failing step loses nothing else:
#   env.log             GPU, driver, library versions, ONNX Runtime's providers, where TensorRT is (or is not)
#   pytest.log          the CUDA tests: producers on the GPU, latency --device cuda, HMC on CUDA, TensorRT
#   bench_edge_cuda.*   bench/bench_edge.py --device cuda
#   bench_hmc_cuda.*    bench/bench_hmc.py --device cuda
#   cli.log             the README's edge commands on the GPU: produce --device cuda --save-models, latency --device
#                       cuda with what fits and --record-into, then score (in a temporary directory)
#   STEPS="env pytest cli edge hmc" (the default) chooses which of them run.
set -u
OUT=${OUT:?set OUT to a directory for the logs and results}
STEPS=" ${STEPS:-env pytest cli edge hmc} "
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
fi
mkdir -p /tmp/pkg && ln -sfn "$PWD" /tmp/pkg/ubench
export PYTHONPATH=/tmp/pkg:/tmp/site

[[ $STEPS == *" env "* ]] && {
    date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    python3 - <<'EOF'
import platform, torch, onnxruntime as ort, jax
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      torch.cuda.get_device_name(0))
print("onnxruntime", ort.__version__, ort.get_available_providers())
print("jax", jax.__version__, jax.default_backend())
try:
    import tensorrt
    print("tensorrt", tensorrt.__version__)
except ImportError as exc:
    print("tensorrt: not importable:", exc)
EOF
    echo "libnvinfer on this machine:"; find / -xdev -name 'libnvinfer*.so*' 2>/dev/null | head -5; echo "(end)"
} >"$OUT/env.log" 2>&1

[[ $STEPS == *" pytest "* ]] && { timeout 200 python3 -m pytest -q -p no:cacheprovider -rs --durations=10 tests/producers/test_cuda_producers.py \
    tests/edge/test_latency_device.py tests/edge/test_tensorrt.py \
    tests/producers/test_hmc.py::test_chain_on_cuda_with_a_cpu_or_a_cuda_generator \
    tests/producers/test_hmc.py::test_hmc_producer_on_cuda >"$OUT/pytest.log" 2>&1
echo "pytest exit $?" >>"$OUT/pytest.log"; }

[[ $STEPS == *" cli "* ]] && {
work=$(mktemp -d)
{ timeout 120 python3 -m ubench.cli produce deep_ensemble --dataset digits --members 3 --device cuda --save-models \
      --out "$work/de.h5" --no-progress &&
  timeout 60 python3 -m ubench.cli latency "$work/de.h5.models" --backend torch --device cuda --batch-size 1 \
      --batch-size 128 --latency-budget 0.5 --memory-budget 4G --record-into "$work/de.h5" &&
  timeout 60 python3 -m ubench.cli score "$work/de.h5"; echo "cli exit $?"
  # what the producers' configure_torch leaves in a process (the cuBLAS workspace, deterministic mode): its effect
  # on the same timing, as a command with only the workspace setting and in a process that called configure_torch
  timeout 60 env CUBLAS_WORKSPACE_CONFIG=:4096:8 python3 -m ubench.cli latency "$work/de.h5.models" --backend torch \
      --device cuda --json | python3 -c "import json, sys; r = json.load(sys.stdin)
print('command with CUBLAS_WORKSPACE_CONFIG=:4096:8: b1 p50', r['batches'][0]['p50_ms'])"
  timeout 60 python3 -c "from ubench.producers.torch_trainer import configure_torch; configure_torch(threads=1)
from ubench.edge.latency import load_models, measure
r = measure(load_models('$work/de.h5.models'), backend='torch', device='cuda')
print('in a process after configure_torch: b1 p50', r['batches'][0]['p50_ms'])"; } >"$OUT/cli.log" 2>&1; }

[[ $STEPS == *" edge "* ]] && {
timeout 170 python3 bench/bench_edge.py --device cuda --iters 100 >"$OUT/bench_edge_cuda.log" 2>&1
echo "bench_edge exit $?" >>"$OUT/bench_edge_cuda.log"
cp bench/results/bench_edge_cuda.json "$OUT/" 2>/dev/null; }

[[ $STEPS == *" hmc "* ]] && {
timeout 140 python3 bench/bench_hmc.py --device cuda --iterations 10 --repeats 3 >"$OUT/bench_hmc_cuda.log" 2>&1
echo "bench_hmc exit $?" >>"$OUT/bench_hmc_cuda.log"
cp bench/results/bench_hmc_cuda.json "$OUT/" 2>/dev/null; }
tail -n 3 "$OUT"/*.log
