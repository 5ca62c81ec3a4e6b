#!/usr/bin/env bash
# The KernelBench sample for bench/bench_reference.py, and the "before" harness to compare with.
# Run here, from the repository root; both go into .kb/ (git-ignored: never commit KernelBench
# files), which travels to the GPU machine with run(carry=[".whl", ".kb"]).
#
#   bash bench/fetch_kernelbench.sh [MIRROR]      # .kb/problems/: the sample, at published sizes
#   bash bench/fetch_kernelbench.sh --before REV  # .kb/before/: harness/ of commit REV (git archive)
#
# MIRROR: a bare git directory of github.com/ScalingIntelligence/KernelBench (the search tool's
# fetch puts one under /work/.mirror/); default: the first /work/.mirror/*KernelBench*/repo.
# .kb/problems/sample.txt lists the files in the order below (bench_reference's default order:
# the issue's three first, so a run cut short by a time limit still has them) and SOURCE the
# KernelBench commit they came from. --all puts every KernelBench/level1/*.py and level2/*.py
# into .kb/all/level1/ and .kb/all/level2/ (for bench/kb_sweep.py), with the commit in SOURCE.
set -euo pipefail

# The sample: large at KernelBench's published sizes (GiB of fp32 per case: inputs + outputs +
# parameters), a mix of pointwise, reductions and norms, matmul, conv.
SAMPLE=(
  level1/26_GELU_.py                                      # pointwise, 6 GiB in + 6 out; OOMs on an 80 GB H100
  level2/4_Conv2d_Mish_Mish.py                            # conv + 2 pointwise, 1 GiB in + 2 out; 71-102 s
  level2/59_Matmul_Swish_Scaling.py                       # Linear 32768^2: 4 GiB of weight per parameter set; 131 s
  level1/23_Softmax.py                                    # row reduction, 6 GiB in + 6 out
  level1/36_RMSNorm_.py                                   # norm over channels, 7 GiB in + 7 out
  level1/47_Sum_reduction_over_a_dimension.py             # reduction, 8 GiB in, a 32 KiB output (null answers)
  level1/9_Tall_skinny_matrix_multiplication_.py          # matmul, 16 MiB in, 4 GiB out (output-bound)
  level1/63_conv_standard_2D__square_input__square_kernel.py  # conv, 1 GiB in, 8 GiB out
  level1/97_ScaledDotProductAttention.py                  # attention, 6 GiB in (q, k, v) + 2 out
  level1/33_BatchNorm.py                                  # norm with running statistics (buffers), 4 GiB in + 4 out
  level2/56_Matmul_Sigmoid_Sum.py                         # 4 GiB weight, a 512 B output (matmul + reduction)
  level2/19_ConvTranspose2d_GELU_GroupNorm.py             # transposed conv + GroupNorm, 2 GiB in + 2 out
  level1/89_cumsum.py                                     # scan, 4 GiB in + 4 out
  level1/45_Average_Pooling_2D.py                         # pooling, 16 GiB in: the largest level-1 input
)

if [ "${1:-}" = --before ]; then
  rev=${2:?usage: bash bench/fetch_kernelbench.sh --before REV}
  rm -rf .kb/before && mkdir -p .kb/before
  git archive "$rev" harness | tar -x -C .kb/before
  git rev-parse "$rev" > .kb/before/COMMIT
  echo ".kb/before: harness/ of $(cat .kb/before/COMMIT)"
  exit 0
fi

all=
if [ "${1:-}" = --all ]; then
  all=1
  shift
fi

mirror=${1:-}
if [ -z "$mirror" ]; then
  mirror=$(ls -d /work/.mirror/*KernelBench*/repo 2>/dev/null | head -n 1 || true)
fi
if [ -z "$mirror" ] || ! git --git-dir="$mirror" rev-parse -q --verify HEAD > /dev/null; then
  echo "no KernelBench mirror (give the bare git directory as the argument)"; exit 2
fi
if [ -n "$all" ]; then
  rm -rf .kb/all && mkdir -p .kb/all
  git --git-dir="$mirror" archive HEAD KernelBench/level1 KernelBench/level2 \
    | tar -x -C .kb/all --strip-components=1 --wildcards 'KernelBench/level[12]/*.py'
  echo "KernelBench $(git --git-dir="$mirror" rev-parse HEAD)" > .kb/all/SOURCE
  echo ".kb/all: $(ls .kb/all/level1/*.py | wc -l) level-1 and $(ls .kb/all/level2/*.py | wc -l)" \
    "level-2 problems of $(cat .kb/all/SOURCE)"
  exit 0
fi
rm -rf .kb/problems && mkdir -p .kb/problems
git --git-dir="$mirror" archive HEAD "${SAMPLE[@]/#/KernelBench/}" | tar -x -C .kb/problems --strip-components=1
printf '%s\n' "${SAMPLE[@]}" > .kb/problems/sample.txt
echo "KernelBench $(git --git-dir="$mirror" rev-parse HEAD)" > .kb/problems/SOURCE
echo ".kb/problems: ${#SAMPLE[@]} problems of $(cat .kb/problems/SOURCE)"
