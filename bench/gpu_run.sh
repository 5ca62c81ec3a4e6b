#!/usr/bin/env bash
# The GPU runs, in stages, on a CUDA machine (nvidia-smi, nvcc and a CUDA build of torch for
# Python 3.12), from the repository root:
#
#   bash bench/gpu_run.sh STAGE...        # default: build
#
# What the machine needs beside this checkout:
# - .whl/: wheels of the packages its Python lacks (pydantic, click, pytest, PyGithub, matplotlib
#   and their dependencies), made on any machine with internet access by
#   bash bench/fetch_gpu_wheels.sh; KP_WHEELS=DIR installs DIR/*.whl instead (.whl-core/: the
#   same without matplotlib's, enough for every stage but nightly's plots). Installed into
#   /tmp/site, not into the machine's Python.
# - .sbx/ (optional): bubblewrap for the sandbox, where the machine has none (also made by
#   bench/fetch_gpu_wheels.sh).
# - .kb/ (kbref, kbsweep, kbfiles): the KernelBench problems, from bash bench/fetch_kernelbench.sh.
# - the build cache: .kp-cache/ (git-ignored); every stage but build, pack and the few that
#   build their own needs it. A machine that starts bare can be given the cache of an earlier
#   run as .kp-cache-parts/kp-cache.tgz.part-* (what the pack stage writes): it is unpacked first,
#   and ninja then finds every build up to date.
# Each stage runs under a time limit (timeout; SIGINT first, so a run keeps what it measured).
#
# Stages: build (parallel prebuild of every CUDA candidate), builds (python -m bench builds on
# cuda: build times by candidate form and precompiled headers, KP_BUILDS_ARGS), gpu (tests/test_gpu.py: the
# examples end to end, a sticky CUDA error), offline (the offline proposer's GPU tests: its
# generated kernels against their references on cuda, row kernels and every pointwise path), redteam / honest / corpus (the CUDA red-team
# kernels, the honest ones, both; select: the entries matching KP_SELECT, a pytest -k
# expression), sandbox (the sandbox's tests), sandboxcost (python -m bench sandbox),
# bench (python -m bench offline on cuda, KP_BENCH_ARGS), overhead (python -m bench
# verify-overhead), timer (python -m bench timer: where the timed window goes, KP_TIMER_ARGS),
# kbref (python -m bench reference: reference + audit time of the KernelBench sample in
# .kb/problems; the harness of .kb/before, where there, and this checkout's, into
# $OUT/kbref-before.json and kbref-after.json; KP_KBREF_SIDES: "before after" by default,
# KP_KBREF_LIMIT=500 s a side; KP_KBREF_ARGS, e.g. --only 26_GELU_), kbsweep (python -m bench
# kb-sweep: every level-1 and level-2 problem at its published size, two sweeps at once,
# resumed run after run from .kb/sweep/), kbfiles (kb-sweep on the files in KP_KB_FILES),
# layouts (python -m bench layouts on KP_KB_FILES: where eager's and compile's time goes),
# busy (python -m bench busy: the honest corpus quiet and under CPU load, KP_BUSY_ARGS), rows
# (python -m bench rows: the row kernel against eager and compile by row width, KP_ROWS_ARGS),
# throughput (python -m bench throughput: candidates per hour, serial loop against kernelpilot
# on 1 and every visible GPU, and without the timing worker's prestart; KP_THROUGHPUT_ARGS),
# streamgate (bench/gpu_stream_gate.py: the stream entries, the gate on and off), scripted (the
# agent team with scripted replies), prflow (the pull-request flow against the fake GitHub on a
# cuda module: tests/test_gpu_flows.py -k pull_request_flow, its comment, review and follow-up
# files into $OUT/prflow.tgz), nightly (tests/test_gpu_flows.py -k three_nights: three nights
# over a shipped kernel and the examples, the history and its plots into $OUT/nightly.tgz), pack
# (.kp-cache/ into $OUT/kp-cache.tgz.part-* in parts of 15 MB).
# Logs and results go to $OUT (or /tmp/kp-out), the environment record to $OUT/env.txt.
set -uo pipefail
OUT=${OUT:-/tmp/kp-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site "${KP_WHEELS:-.whl}"/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 KERNELPILOT_CACHE=$PWD/.kp-cache
# The sandbox's bwrap, where the machine has none: .sbx/ (git-ignored) holds a bwrap binary and
# its libraries (bench/fetch_gpu_wheels.sh makes it).
if ! command -v bwrap >/dev/null && [ -x .sbx/bin/bwrap ]; then
  export KERNELPILOT_BWRAP=$PWD/.sbx/bin/bwrap
fi
# The machine's torch has no compiled bytecode (.pyc) where Python can use it, so every process
# compiled the modules it imports from source: 5 s of the profiler's and torch.compile's imports
# per worker (docs/measurement-notes.md). A pip-installed torch on a runner has them; a
# bytecode cache of our own gives every worker here the same.
export PYTHONPYCACHEPREFIX=/tmp/kp-pycache
unset PYTHONDONTWRITEBYTECODE
{
  nvidia-smi
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
  nvcc --version | tail -2
  python3 --version
  nproc
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
if [ -d .kp-cache-parts ]; then  # the build cache of an earlier run
  rm -rf .kp-cache && cat .kp-cache-parts/kp-cache.tgz.part-* | tar xzf - && du -sh .kp-cache
fi

stage() {  # stage NAME SECONDS COMMAND...: run with a time limit, log to $OUT/NAME.log
  local name=$1 limit=$2
  shift 2
  echo "=== $name (limit ${limit}s)"
  local started=$SECONDS
  timeout --signal=INT --kill-after=20 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "=== $name: exit $rc after $((SECONDS - started))s"
  tail -n 40 "$OUT/$name.log"
}

set -- "${@:-build}"
corpus() {  # corpus NAME LIMIT SELECTION: the CUDA corpus entries whose id matches SELECTION
  stage "$1" "$2" python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_corpus.py -rA \
    --durations=0 -k "$3" --junitxml="$OUT/$1.xml"
}
flows() {  # flows NAME LIMIT SELECTION: the test of tests/test_gpu_flows.py matching SELECTION,
  # its files kept under $OUT/NAME
  stage "$1" "$2" python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_flows.py -rA \
    -k "$3" --basetemp "$OUT/$1" --junitxml="$OUT/$1.xml"
}
kbref() {  # kbref SIDE OPTIONS...: bench_reference on .kb/problems, one column of the table
  local side=$1
  shift
  stage "kbref-$side" "${KP_KBREF_LIMIT:-500}" python3 -m bench reference --device cuda "$@" \
    --out "$OUT/kbref-$side.json"
}
for what in "$@"; do
  if [ "$what" != build ] && [ "$what" != pack ] && [ "$what" != kbref ] && [ "$what" != kbsweep ] && [ "$what" != kbfiles ] && [ "$what" != layouts ] && [ "$what" != scripted ] && [ "$what" != prflow ] && [ "$what" != nightly ] && [ "$what" != sandbox ] && [ "$what" != sandboxcost ] && [ "$what" != offline ] && [ "$what" != builds ] && [ "$what" != realrepos ] && [ ! -d .kp-cache ]; then
    echo "no build cache (.kp-cache): run the build stage or bring .kp-cache-parts from the pack stage"; exit 3
  fi
  case $what in
    build) stage prebuild 450 python3 -m bench.prebuild_gpu ;;  # 56 candidates cold: over 300 s
    builds)  # python -m bench builds on cuda: a candidate's build time by form and headers;
      # KP_BUILDS_ARGS: its options (default: both forms, 3 builds a side)
      # shellcheck disable=SC2086  # KP_BUILDS_ARGS: options (word-split)
      stage builds "${KP_BUILDS_LIMIT:-300}" python3 -m bench builds --device cuda \
        ${KP_BUILDS_ARGS:---count 3 --form torch --form split} --out "$OUT/builds.json" ;;
    throughput)  # python -m bench throughput: candidates per hour, a serial loop against
      # kernelpilot's pipeline on 1 and every visible GPU; KP_THROUGHPUT_ARGS: its options
      # shellcheck disable=SC2086  # KP_THROUGHPUT_ARGS: options (word-split)
      stage throughput "${KP_THROUGHPUT_LIMIT:-560}" python3 -m bench throughput \
        ${KP_THROUGHPUT_ARGS:-examples/fused_gelu_block.py --candidates 3 --without-prestart} --out "$OUT/throughput.json" ;;
    convlayout)  # the channels-last conv path (agents/offline/conv_layout.py): every kernel of
      # each KP_KB_FILES problem's candidate (bench variants, a no-op variant), then its GPU tests
      for file in ${KP_KB_FILES:?KP_KB_FILES=<problem files>}; do
        name=$(basename "$file" .py)
        stage "variants-$name" "${KP_VARIANTS_LIMIT:-80}" python3 -m bench variants "$file" \
          --set kRowwiseItems=4 --out "$OUT/variants-$name.json"
      done
      stage conv_layout_tests "${KP_CONV_TESTS_LIMIT:-150}" python3 -m pytest -q -m gpu -x \
        -p no:cacheprovider -rA tests/test_offline_conv_layout_gpu.py ;;
    sandbox) stage sandbox_tests 150 python3 -m pytest -q -p no:cacheprovider -rA \
               tests/test_isolation.py tests/test_buildstore.py tests/test_trust_levels.py \
               -k "not failures_are_contained and not planted_library_with" ;;
    sandboxcost) stage sandbox_cost 400 python3 -m bench sandbox --device cuda \
                   --rounds "${KP_SANDBOX_ROUNDS:-3}" --out "$OUT/sandbox_cost.json" ;;
    gpu) stage gpu_tests 280 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -rA \
           --durations=0 --junitxml="$OUT/gpu_tests.xml" ;;
    rows)  # shellcheck disable=SC2086  # python -m bench rows: the row kernel by width; KP_ROWS_ARGS:
      # its options, e.g. --kind l1_norm --widths 4096,65535
      stage rows "${KP_ROWS_LIMIT:-400}" python3 -m bench rows --device cuda ${KP_ROWS_ARGS:-} \
        --out "$OUT/rows.json" ;;
    offline) stage offline_tests 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rA \
               tests/test_offline_rows.py tests/test_offline_cuda.py --junitxml="$OUT/offline_tests.xml" ;;
    redteam) corpus redteam_tests 520 "redteam" ;;
    honest) corpus honest_tests 200 "honest" ;;
    corpus) corpus corpus_tests 560 "redteam or honest" ;;
    select) corpus selected_tests 400 "${KP_SELECT:?KP_SELECT=<pytest -k expression>}" ;;
    bench)  # all 8 targets took 40-60 s each on an H100: 500 s holds them in one stage
      # shellcheck disable=SC2086  # KP_BENCH_ARGS: more options, e.g. --only NAME (word-split)
      stage bench_offline 500 python3 -m bench offline --device cuda --time-budget 0.3 ${KP_BENCH_ARGS:-} \
        --out "$OUT/bench_offline.json" ;;
    overhead) stage verify_overhead 90 python3 -m bench verify-overhead --device cuda \
                --out "$OUT/verify_overhead.json" ;;
    busy)  # shellcheck disable=SC2086  # the honest corpus quiet and under CPU load (issue 28);
      # KP_BUSY_ARGS: its options, e.g. --rounds 3 --load cpu
      stage bench_busy 560 python3 -m bench busy --device cuda ${KP_BUSY_ARGS:-} \
        --out "$OUT/bench_busy.json" ;;
    timer)  # shellcheck disable=SC2086  # KP_TIMER_ARGS: more options, e.g. --only NAME
      stage bench_timer 400 python3 -m bench timer --device cuda ${KP_TIMER_ARGS:-} \
        --out "$OUT/bench_timer.json" ;;
    kbref)  # shellcheck disable=SC2086  # KP_KBREF_ARGS: more options (word-split)
      [ -d .kb/problems ] || { echo "no .kb/problems: run bench/fetch_kernelbench.sh here and bring .kb along"; exit 3; }
      for side in ${KP_KBREF_SIDES:-before after}; do
        case $side in
          after) kbref after ${KP_KBREF_ARGS:-} ;;
          before) if [ -d .kb/before ]; then kbref before --repo .kb/before ${KP_KBREF_ARGS:-}
                  else echo "no .kb/before (bench/fetch_kernelbench.sh --before REV): skipped"; fi ;;
          *) echo "KP_KBREF_SIDES: before and/or after, not $side"; exit 2 ;;
        esac
      done ;;
    kbsweep)  # python -m bench kb-sweep over .kb/all (bench/fetch_kernelbench.sh --all): one
      # sweep per word of KP_SWEEP_LEVELS (default "level1 level2"), all at once, each --beside
      # the others, resuming .kb/sweep/LEVEL.json (the last run's $OUT/kb_sweep-LEVEL.json,
      # copied back here) and starting no problem after KP_SWEEP_LIMIT-70 s (default 540)
      [ -d .kb/all ] || { echo "no .kb/all: run bench/fetch_kernelbench.sh --all here and bring .kb along"; exit 3; }
      read -ra levels <<< "${KP_SWEEP_LEVELS:-level1 level2}"
      limit=${KP_SWEEP_LIMIT:-540}
      for level in "${levels[@]}"; do
        [ -f ".kb/sweep/$level.json" ] && cp ".kb/sweep/$level.json" "$OUT/kb_sweep-$level.json"
        timeout --signal=INT --kill-after=20 "$limit" python3 -m bench kb-sweep ".kb/all/$level" \
          --device cuda --resume --limit-s $((limit - 70)) --beside $((${#levels[@]} - 1)) \
          --out "$OUT/kb_sweep-$level.json" > "$OUT/kbsweep-$level.log" 2>&1 &
      done
      wait
      for level in "${levels[@]}"; do echo "=== kbsweep $level"; tail -n 12 "$OUT/kbsweep-$level.log"; done ;;
    streamgate)  # the CUDA stream-order entries with the stream gate on and off
      # (bench/gpu_stream_gate.py; KP_GATE_ROUNDS evaluations per entry and side, default 1;
      # KP_GATE_SELECT: only entries whose name contains it)
      stage stream_gate "${KP_GATE_LIMIT:-420}" python3 -m bench.gpu_stream_gate --rounds "${KP_GATE_ROUNDS:-1}" \
        --select "${KP_GATE_SELECT:-}" --out "$OUT/stream_gate.json" ;;
    layouts)  # python -m bench layouts on KP_KB_FILES: eager, channels-last, compile, their kernels
      # shellcheck disable=SC2086  # KP_KB_FILES: a list of paths (word-split)
      stage layouts "${KP_LAYOUTS_LIMIT:-300}" python3 -m bench layouts ${KP_KB_FILES:?KP_KB_FILES=<problem files>} \
        --out "$OUT/layouts.json" ;;
    kbfiles)  # python -m bench kb-sweep on the KernelBench files named in KP_KB_FILES (paths under
      # .kb/all), with KP_KB_CANDIDATE (copy or offline), into $OUT/kbfiles.json, resuming
      # .kb/sweep/kbfiles.json where there (the last run's record, copied back here); with
      # KP_KB_PREBUILD=1 every candidate is built first, as many at once as there are cores
      [ -d .kb/all ] || { echo "no .kb/all: run bench/fetch_kernelbench.sh --all here and bring .kb along"; exit 3; }
      [ -f .kb/sweep/kbfiles.json ] && cp .kb/sweep/kbfiles.json "$OUT/kbfiles.json"
      limit=${KP_KB_LIMIT:-400}
      prebuild=()
      [ "${KP_KB_PREBUILD:-0}" = 1 ] && prebuild=(--prebuild)
      # shellcheck disable=SC2086  # KP_KB_FILES: a list of paths (word-split)
      stage kbfiles "$limit" python3 -m bench kb-sweep ${KP_KB_FILES:?KP_KB_FILES=<problem files>} \
        --device cuda --candidate "${KP_KB_CANDIDATE:-copy}" --limit-s $((limit - 60)) --verbose \
        --resume "${prebuild[@]}" --out "$OUT/kbfiles.json" ;;
    scripted)  # the agent team on cuda with scripted replies (bench/scripted/README.md)
      (cd bench/scripted && stage scripted 240 python3 -m bot.cli optimize \
        ../../tests/redteam/problems/gelu_scale_residual.py --device cuda --llm scripted \
        --script gelu_scale_residual_cuda.json --seed 1 --out /tmp/kp-scripted)
      cp /tmp/kp-scripted/report.json "$OUT/scripted-report.json"
      cp /tmp/kp-scripted/trajectory-*.json "$OUT/scripted-trajectory.json" ;;
    prflow)  # the PR flow against the fake GitHub on a cuda module (tests/test_gpu_flows.py);
      # --basetemp keeps what GitHub would show and the jobs' logs under $OUT/prflow
      flows prflow 540 pull_request_flow
      tar -czf "$OUT/prflow.tgz" -C "$OUT" prflow && rm -rf "$OUT/prflow" ;;  # one file comes back
    nightly)  # the nightly run over a shipped kernel and the examples, three nights (the same file)
      flows nightly 540 three_nights
      tar -czf "$OUT/nightly.tgz" -C "$OUT" nightly && rm -rf "$OUT/nightly" ;;
    realrepos)  # python -m bench real-repos on cuda over the repositories in .rr/ (owner+name/repo
      # git folders: each one's HEAD, files over 400 KB left out), KP_RR_ONLY: name prefixes,
      # ';'-separated (default: every pull request). The packages the repositories import come as
      # wheels in .whl-repos/ (einops; tiktoken, regex, tqdm, more-itertools for whisper) and
      # .whl-tv/ (torchvision, installed only where the machine has none: vit_pytorch imports it).
      # numba (whisper imports it at import, for its word-timing DTW, which no module under test
      # calls) is a stand-in whose jit returns the function where the machine has none: its
      # llvmlite wheel alone is 60 MB, more than the machine's copy of the checkout may carry.
      [ -d .rr ] || { echo "no .rr: the repositories' mirrors (bench/real_repos.py) must come along"; exit 3; }
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
        .whl-repos/*.whl || exit 1
      python3 -c "import torchvision" 2>/dev/null || python3 -m pip install -q --no-index --no-deps \
        --no-compile --no-cache-dir --target /tmp/site .whl-tv/*.whl || exit 1
      if ! python3 -c "import numba" 2>/dev/null; then
        mkdir -p /tmp/site-shim/numba
        printf 'def jit(*args, **kwargs):\n    if args and callable(args[0]):\n        return args[0]\n    return lambda fn: fn\n' \
          > /tmp/site-shim/numba/__init__.py
        export PYTHONPATH=$PYTHONPATH:/tmp/site-shim
      fi
      only=()
      IFS=';' read -ra prefixes <<< "${KP_RR_ONLY:-}"
      for prefix in "${prefixes[@]}"; do only+=(--only "$prefix"); done
      stage real_repos "${KP_RR_LIMIT:-540}" python3 -m bench real-repos --mirrors .rr --device cuda \
        "${only[@]}" --out "$OUT/rr-cuda.json" ;;
    pack) tar -czf - .kp-cache | split -b 15m - "$OUT/kp-cache.tgz.part-"
          ls -la "$OUT"/kp-cache.tgz.part-* ;;
    *) echo "unknown stage $what (build, gpu, offline, redteam, honest, corpus, select, sandbox, sandboxcost, bench, overhead, timer, kbref, kbsweep, kbfiles, layouts, streamgate, scripted, prflow, nightly, realrepos, pack)"; exit 2 ;;
  esac
done
