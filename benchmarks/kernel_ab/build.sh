#!/bin/sh
# Kernel A/B harness: two versions of synet's deconvolution kernel source, timed in one process.
#
#   benchmarks/kernel_ab/build.sh SRC_A SRC_B [LEVEL]      (SRC_A, SRC_B: copies of synet/src, one changed)
#   python benchmarks/kernel_ab/dump.py D5 /tmp/D5.plan    (a bench workload's plan)
#   /tmp/kernel_ab/harness /tmp/D5.plan [SECONDS] [SRC_OFFSET] [PLAN_B]
#
# PLAN_B (B runs it instead of PLAN): a plan of the same workload made differently, e.g. by dump.py with
# synet._deconvolution_plan.WIDE_MAX patched (the FP32 weights as pairs or float32 rows); the weights are
# random bits either way, so "same bits" then compares nothing meaningful across the two layouts.
#
# On a VM whose core runs 2-3x slower for seconds at a time, whole builds timed in turn (benchmarks/ab.py)
# resolve about 5 %; this harness alternates the two kernels every ~20 ms on the same plan and data, and two
# copies of the same source give B/A 1.00 with quartiles within 2-3 %. It times the kernel alone (no
# Python, no argument checks), serially, at one CPU level (default amx; its flags as setup.py's LEVELS).
set -e
here=$(cd "$(dirname "$0")" && pwd)
level=${3:-amx}
case $level in
  amx) flags="-march=x86-64-v4 -mavx512bf16 -mavx512vnni -mamx-tile -mamx-bf16 -mprefer-vector-width=512" ;;
  avx512_bf16) flags="-march=x86-64-v4 -mavx512bf16 -mavx512vnni -mprefer-vector-width=512" ;;
  avx512) flags="-march=x86-64-v4 -mprefer-vector-width=512" ;;
  avx2) flags="-march=x86-64-v3" ;;
  *) echo "level: amx, avx512_bf16, avx512 or avx2" >&2; exit 2 ;;
esac
flags="-O3 -g0 -ffp-contract=off -std=gnu11 -fvisibility=hidden -mtune=generic $flags -DSYNET_LEVEL_SUFFIX=$level"
out=/tmp/kernel_ab
mkdir -p $out
for side in a b; do
  if [ $side = a ]; then src=$1; else src=$2; fi
  gcc $flags -I"$src" -DENTRY=run_$side -c "$here/wrap.c" -o $out/wrap_$side.o
  gcc $flags -I"$src" -c "$src/deconvolution_depthwise.c" -o $out/depthwise_$side.o
  ld -r $out/wrap_$side.o $out/depthwise_$side.o -o $out/kernel_$side.o
  objcopy --keep-global-symbol=run_$side $out/kernel_$side.o   # each side's statics and tables stay its own
done
gcc -O2 -std=gnu11 -I"$1" "$here/main.c" $out/kernel_a.o $out/kernel_b.o -lm -o $out/harness
echo "$out/harness"
