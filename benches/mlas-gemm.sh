#!/usr/bin/env bash
# The reference's int8 matrix products alone: onnxruntime's MLAS (the engine of hibari's Python
# package) on one `MatMulInteger` (u8 activations × s8 weights → int32, as the voice's graph runs
# them) per shape, one thread, on the shapes `target/release/int8-gemm` times for our kernels, so
# the two can be read side by side.
#
#   benches/mlas-gemm.sh               # with the kernels onnxruntime picks on this CPU
#   REF_SIMD=avx2 benches/mlas-gemm.sh # onnxruntime capped to AVX2 (benches/cap-reference.sh)
#   REF_SIMD=avxvnni benches/mlas-gemm.sh # capped to AVX2 + AVX-VNNI
#
# Needs .venv-hibari (benches/setup-hibari-python.sh). The `onnx` package that builds the one-node
# models is installed into target/mlas-gemm/ (pinned, from PyPI), not into .venv-hibari.
# Prints one row per shape: M N K, GMAC/s (best of 5 rounds), µs per product.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY=.venv-hibari/bin/python
[[ -x "$PY" ]] || benches/setup-hibari-python.sh
PKGS=target/mlas-gemm
if [[ ! -d "$PKGS/onnx" ]]; then
  "$PY" -m pip install --quiet --disable-pip-version-check --target "$PKGS" \
    "onnx==1.23.2" "protobuf==7.36.2" "ml_dtypes==0.7.0" "typing_extensions==4.16.0" --no-deps
fi
caps="$(benches/cap-reference.sh "${REF_SIMD:-native}")" || exit 1
read -r -a ENV <<<"$caps"
pin=()
if command -v taskset >/dev/null && (($(nproc) >= 2)); then pin=(taskset -c 1); fi
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); REF_SIMD=${REF_SIMD:-native}"
"${pin[@]}" env "${ENV[@]}" OMP_NUM_THREADS=1 MLAS_PKGS="$PKGS" "$PY" - <<'PY'
import os, sys, time
import numpy as np
sys.path.append(os.environ["MLAS_PKGS"])  # after the venv's own numpy
import onnx
from onnx import TensorProto, helper, numpy_helper
import onnxruntime as ort

print("onnxruntime", ort.__version__, "from", os.path.dirname(ort.__file__))
shapes = [("dec pw1", 768, 256), ("dec pw2", 256, 768), ("head", 3005, 256),
          ("pro pw1", 384, 192), ("pro pw2", 192, 384), ("attn in", 576, 192)]
rng = np.random.default_rng(1)
print(f"{'shape':9} {'M':>4} {'N':>5} {'K':>4} {'GMAC/s':>8} {'us':>9}")
for m in (16, 19, 70, 83, 134, 229, 254):
    for name, n, k in shapes:
        # weights spread like the voice's (as int8-gemm draws them), activations uniform u8
        b = np.clip(np.round(rng.standard_normal((k, n)) * 19), -127, 127).astype(np.int8)
        graph = helper.make_graph(
            [helper.make_node("MatMulInteger", ["A", "B", "az"], ["Y"])], "g",
            [helper.make_tensor_value_info("A", TensorProto.UINT8, [m, k])],
            [helper.make_tensor_value_info("Y", TensorProto.INT32, [m, n])],
            [numpy_helper.from_array(b, "B"), numpy_helper.from_array(np.array(128, np.uint8), "az")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        a = rng.integers(0, 256, (m, k), dtype=np.uint8)
        reps = max(20, int(2e8 / (m * n * k)))
        best = float("inf")
        sess.run(None, {"A": a})
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(reps):
                sess.run(None, {"A": a})
            best = min(best, (time.perf_counter() - t) / reps)
        print(f"{name:9} {m:>4} {n:>5} {k:>4} {m * n * k / best / 1e9:>8.1f} {best * 1e6:>9.1f}")
PY
