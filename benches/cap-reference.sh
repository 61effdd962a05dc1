#!/usr/bin/env bash
# A copy of the reference's onnxruntime that runs as on a CPU without AVX-512 or AVX-VNNI, for
# benchmarks that cap our kernels to AVX2 (SPEECHSTREAM_SIMD=avx2) and need the reference capped
# alike.
#
#   benches/cap-reference.sh          # prints the environment to run the reference with
#   benches/cap-reference.sh avxvnni  # the same with AVX-VNNI left on (Alder Lake's class:
#                                     # AVX2 + AVX-VNNI, no AVX-512), for SPEECHSTREAM_SIMD=avxvnni
#   benches/cap-reference.sh native   # prints nothing: the reference as it is (so that the
#                                     # benchmarks' REF_SIMD=native|avx2|avxvnni is one call)
#
# onnxruntime's MLAS (and the cpuinfo it carries) pick their kernels from CPUID and from XCR0,
# the register that says which vector state the OS saves; AVX-512 kernels need XCR0 bits 5-7.
# There is no switch to cap them and no CPUID faulting in our VMs, so this copies the installed
# onnxruntime package to target/ref-LEVEL/ and replaces each `xgetbv` in its library with
# `push 7; pop rax` (XCR0 = x87 | SSE | AVX: AVX2 and FMA stay, AVX-512 and AMX go), followed
# by `xor edx, edx` where the code widens the result to 64 bits. AVX-VNNI (256-bit `vpdpbusd`,
# Intel since Alder Lake and Sapphire Rapids) needs no state beyond AVX's, and MLAS picks its
# u8s8 kernels by CPUID leaf 7 sub-leaf 1 alone (EAX bit 4): each `mov eax, 7; mov ecx, 1;
# cpuid` asks for sub-leaf 255 instead, which CPUs answer with zeros (an invalid sub-leaf), so
# the copy sees no AVX-VNNI either (without this, on such a CPU the "capped" reference ran MLAS's
# AVX-VNNI kernels against our AVX2 ones; `avxvnni` leaves this step out). numpy, which hibari's
# DSP uses, and its OpenBLAS have their own switches (NPY_DISABLE_CPU_FEATURES, for numpy 2.x's
# names, and OPENBLAS_CORETYPE). The copy is rebuilt when the installed libraries change. Prints
# `PYTHONPATH=... NPY_DISABLE_CPU_FEATURES=... OPENBLAS_CORETYPE=...` for `env`. A benchmark
# aid only: nothing the server or its tests run uses it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "cap-reference: $*" >&2; exit 1; }
LEVEL="${1:-avx2}"
case "$LEVEL" in
  native) exit 0 ;;
  avx2) VNNI=off ;;
  avxvnni) VNNI=on ;;
  *) die "level $LEVEL: native, avx2 or avxvnni" ;;
esac
# CAP_PY: the python whose onnxruntime is copied (default .venv-hibari's; scripts/bench-kokoro.sh
# gives .venv-kokoro's)
PY="${CAP_PY:-$ROOT/.venv-hibari/bin/python}"
[[ -x "$PY" ]] || die "$PY missing (.venv-hibari: benches/setup-hibari-python.sh)"
command -v objdump >/dev/null || die "objdump missing (Debian: binutils)"
PKG="$("$PY" -c 'import onnxruntime, os; print(os.path.dirname(onnxruntime.__file__))')"
VENV="$(basename "$(dirname "$(dirname "$PY")")")"
OUT="$ROOT/target/ref-$LEVEL$([[ $VENV == .venv-hibari ]] || echo "-${VENV#.venv-}")"
STAMP="v2 $LEVEL $(stat -c '%n %s %Y' "$PKG"/capi/*.so* | sha256sum | cut -c1-16)"
if [[ ! -f "$OUT/stamp" || "$(cat "$OUT/stamp")" != "$STAMP" ]]; then
  rm -rf "$OUT"
  mkdir -p "$OUT"
  cp -r "$PKG" "$OUT/onnxruntime"
  patched=0
  for LIB in "$OUT"/onnxruntime/capi/*.so*; do
    # the xgetbv instructions (0f 01 d0) objdump decodes in .text, as file offsets
    objdump -h "$LIB" | awk '$2 == ".text" { print $4, $6 }' >"$OUT/text.txt"
    objdump -d --section=.text "$LIB" | awk -F: '/\txgetbv/ { print $1 }' >"$OUT/sites.txt"
    [[ -s "$OUT/sites.txt" ]] || continue
    # (the sub-leaf 1 queries are few and written the same way: counted, not disassembled)
    python3 - "$LIB" "$OUT/text.txt" "$OUT/sites.txt" "$VNNI" <<'PY'
import sys
lib, text, sites, vnni = sys.argv[1:5]
vma, off0 = (int(x, 16) for x in open(text).read().split())
data = bytearray(open(lib, "rb").read())
n = 0
for line in open(sites):
    off = int(line.strip(), 16) - vma + off0
    assert data[off:off + 3] == b"\x0f\x01\xd0", hex(off)
    if data[off + 3:off + 5] == b"\x89\xc0":  # mov eax, eax (then rdx:rax widened)
        data[off:off + 5] = b"\x6a\x07\x58\x31\xd2"
    else:
        data[off:off + 3] = b"\x6a\x07\x58"
    n += 1
leaf7_1 = b"\xb8\x07\x00\x00\x00\xb9\x01\x00\x00\x00\x0f\xa2"
v = data.count(leaf7_1)
if vnni == "off":
    data = data.replace(leaf7_1, leaf7_1[:6] + b"\xff" + leaf7_1[7:])
open(lib, "wb").write(data)
done = v if vnni == "off" else 0
print(f"cap-reference: {n} xgetbv and {done} CPUID 7.1 queries patched in {lib}", file=sys.stderr)
if vnni == "off" and v == 0 and "avx_vnni" in open("/proc/cpuinfo").read().split():
    sys.exit(f"cap-reference: no CPUID 7.1 query in {lib}: its AVX-VNNI kernels would stay on")
PY
    patched=$((patched + 1))
  done
  [[ $patched -gt 0 ]] || die "no xgetbv found in $PKG/capi: cannot cap this onnxruntime"
  echo "$STAMP" >"$OUT/stamp"
fi
echo "PYTHONPATH=$OUT NPY_DISABLE_CPU_FEATURES=X86_V4,AVX512_ICL,AVX512_SPR OPENBLAS_CORETYPE=Haswell"
