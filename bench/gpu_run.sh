#!/usr/bin/env bash
# The GPU runs, in stages that each fit one device call (10 minutes at most).
#
#   here:  bash bench/fetch_gpu_wheels.sh          # once: .whl/ (git-ignored)
#   (KP_WHEELS=DIR installs DIR/*.whl instead: a smaller set, without matplotlib's, leaves room
#   in a call's 64 MiB carry for .kp-cache-parts; only the nightly stage plots)
#   there: run(carry=[".whl"], command="bash bench/gpu_run.sh build pack")  # cold: 300-450 s
#   here:  rm -rf .kp-cache-parts && mkdir .kp-cache-parts && cp <files_at>/kp-cache.tgz.part-* .kp-cache-parts/
#   there: run(carry=[".whl", ".kp-cache-parts"], command="bash bench/gpu_run.sh gpu honest")
#   (a call made within the machine's 30 s warm period finds .kp-cache still there)
#
# Stages: build (parallel prebuild of every CUDA candidate), gpu (tests/test_gpu.py: the
# examples end to end, a sticky CUDA error), redteam / honest / corpus (the CUDA red-team
# kernels, the honest ones, both: one device call does not hold the whole corpus; select:
# the entries matching KP_SELECT, a pytest -k expression),
# bench (bench_offline on cuda, KP_BENCH_ARGS), overhead (bench_verify_overhead on cuda),
# timer (bench_timer: where the timed window goes, KP_TIMER_ARGS), kbref (bench_reference:
# reference + audit time of the KernelBench sample in .kb/problems, carry .kb, made by
# bench/fetch_kernelbench.sh; the harness of .kb/before, where there, and this checkout's, into
# $OUT/kbref-before.json and kbref-after.json; KP_KBREF_SIDES: "before after" by default, one
# side per device call at KP_KBREF_LIMIT=500 s a side; KP_KBREF_ARGS, e.g. --only 26_GELU_),
# kbsweep (bench/kb_sweep.py: every level-1 and level-2 problem at its published size, two
# sweeps at once, resumed call after call from .kb/sweep/), kbfiles (kb_sweep on the files in
# KP_KB_FILES), streamgate (bench/gpu_stream_gate.py: the stream entries, the gate on and off),
# prflow (the pull-request flow against the fake GitHub on a cuda module: bench/gpu_pr_flow.py,
# its comment, review and follow-up files into $OUT/prflow), nightly (bench/gpu_nightly.py: three
# nights over a shipped kernel, the history and its plot into $OUT/nightly), probe (the honest
# corpus once per KP_PROBE_VARIANTS word with every timed call recorded, GPU clocks and host load
# beside: bench/analyze_probe.py reads it), pack (the build cache,
# .kp-cache/ in the working tree (git-ignored), into $OUT in parts of 15 MB: a machine is bare
# at each start, so the cache travels back here and out again with the next call's carry;
# ninja then finds every build up to date).
# Logs and results go to $OUT (or /tmp/kp-out), the environment record to $OUT/env.txt.
set -uo pipefail
OUT=${OUT:-/tmp/kp-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site "${KP_WHEELS:-.whl}"/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 KERNELPILOT_CACHE=$PWD/.kp-cache
# The sandbox's bwrap, where the machine has none: .sbx/ (git-ignored) holds a bwrap binary and
# its libraries, carried with the call (bench/fetch_gpu_wheels.sh makes it).
if ! command -v bwrap >/dev/null && [ -x .sbx/bin/bwrap ]; then
  export KERNELPILOT_BWRAP=$PWD/.sbx/bin/bwrap
fi
# The machine's torch has no compiled bytecode (.pyc) where Python can use it, so every process
# compiled the modules it imports from source: 5 s of the profiler's and torch.compile's imports
# per worker (bench/NOTES.md, session 11). A pip-installed torch on a runner has them; a
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
if [ -d .kp-cache-parts ]; then  # the build cache of an earlier call, carried back out
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
kbref() {  # kbref SIDE OPTIONS...: bench_reference on .kb/problems, one column of the table
  local side=$1
  shift
  stage "kbref-$side" "${KP_KBREF_LIMIT:-500}" python3 bench/bench_reference.py --device cuda "$@" \
    --out "$OUT/kbref-$side.json"
}
for what in "$@"; do
  if [ "$what" != build ] && [ "$what" != pack ] && [ "$what" != kbref ] && [ "$what" != kbsweep ] && [ "$what" != kbfiles ] && [ "$what" != scripted ] && [ "$what" != prflow ] && [ "$what" != nightly ] && [ "$what" != sandbox ] && [ "$what" != sandboxcost ] && [ ! -d .kp-cache ]; then
    echo "no build cache (.kp-cache): run the build stage or carry .kp-cache-parts"; exit 3
  fi
  case $what in
    build) stage prebuild 450 python3 bench/prebuild_gpu.py ;;  # 56 candidates cold: over 300 s
    sandbox) stage sandbox_tests 150 python3 -m pytest -q -p no:cacheprovider -rA \
               tests/test_isolation.py tests/test_buildstore.py tests/test_trust_levels.py \
               -k "not failures_are_contained and not planted_library_with" ;;
    sandboxcost) stage sandbox_cost 400 python3 bench/bench_sandbox.py --device cuda \
                   --rounds "${KP_SANDBOX_ROUNDS:-3}" --out "$OUT/sandbox_cost.json" ;;
    gpu) stage gpu_tests 280 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -rA \
           --durations=0 --junitxml="$OUT/gpu_tests.xml" ;;
    redteam) corpus redteam_tests 520 "redteam" ;;
    honest) corpus honest_tests 200 "honest" ;;
    corpus) corpus corpus_tests 560 "redteam or honest" ;;
    select) corpus selected_tests 400 "${KP_SELECT:?KP_SELECT=<pytest -k expression>}" ;;
    bench)  # all 8 targets took 40-60 s each on an H100: 500 s holds them in one call
      # shellcheck disable=SC2086  # KP_BENCH_ARGS: more options, e.g. --only NAME (word-split)
      stage bench_offline 500 python3 bench/bench_offline.py --device cuda --time-budget 0.3 ${KP_BENCH_ARGS:-} \
        --out "$OUT/bench_offline.json" ;;
    overhead) stage verify_overhead 90 python3 bench/bench_verify_overhead.py --device cuda ;;
    timer)  # shellcheck disable=SC2086  # KP_TIMER_ARGS: more options, e.g. --only NAME
      stage bench_timer 400 python3 bench/bench_timer.py --device cuda ${KP_TIMER_ARGS:-} \
        --out "$OUT/bench_timer.json" ;;
    kbref)  # shellcheck disable=SC2086  # KP_KBREF_ARGS: more options (word-split)
      [ -d .kb/problems ] || { echo "no .kb/problems: run bench/fetch_kernelbench.sh, carry .kb"; exit 3; }
      for side in ${KP_KBREF_SIDES:-before after}; do
        case $side in
          after) kbref after ${KP_KBREF_ARGS:-} ;;
          before) if [ -d .kb/before ]; then kbref before --repo .kb/before ${KP_KBREF_ARGS:-}
                  else echo "no .kb/before (bench/fetch_kernelbench.sh --before REV): skipped"; fi ;;
          *) echo "KP_KBREF_SIDES: before and/or after, not $side"; exit 2 ;;
        esac
      done ;;
    kbsweep)  # bench/kb_sweep.py over .kb/all (bench/fetch_kernelbench.sh --all, carry .kb): one
      # sweep per word of KP_SWEEP_LEVELS (default "level1 level2"), all at once, each --beside
      # the others, resuming .kb/sweep/LEVEL.json (the last call's $OUT/kb_sweep-LEVEL.json,
      # copied back here) and starting no problem after KP_SWEEP_LIMIT-70 s (default 540)
      [ -d .kb/all ] || { echo "no .kb/all: run bench/fetch_kernelbench.sh --all, carry .kb"; exit 3; }
      read -ra levels <<< "${KP_SWEEP_LEVELS:-level1 level2}"
      limit=${KP_SWEEP_LIMIT:-540}
      for level in "${levels[@]}"; do
        [ -f ".kb/sweep/$level.json" ] && cp ".kb/sweep/$level.json" "$OUT/kb_sweep-$level.json"
        timeout --signal=INT --kill-after=20 "$limit" python3 bench/kb_sweep.py ".kb/all/$level" \
          --device cuda --resume --limit-s $((limit - 70)) --beside $((${#levels[@]} - 1)) \
          --out "$OUT/kb_sweep-$level.json" > "$OUT/kbsweep-$level.log" 2>&1 &
      done
      wait
      for level in "${levels[@]}"; do echo "=== kbsweep $level"; tail -n 12 "$OUT/kbsweep-$level.log"; done ;;
    streamgate)  # the CUDA stream-order entries with the stream gate on and off
      # (bench/gpu_stream_gate.py; KP_GATE_ROUNDS evaluations per entry and side, default 1;
      # KP_GATE_SELECT: only entries whose name contains it)
      stage stream_gate "${KP_GATE_LIMIT:-420}" python3 bench/gpu_stream_gate.py --rounds "${KP_GATE_ROUNDS:-1}" \
        --select "${KP_GATE_SELECT:-}" --out "$OUT/stream_gate.json" ;;
    kbfiles)  # bench/kb_sweep.py on the KernelBench files named in KP_KB_FILES (paths under
      # .kb/all, carry .kb), with KP_KB_CANDIDATE (copy or offline), into $OUT/kbfiles.json
      [ -d .kb/all ] || { echo "no .kb/all: run bench/fetch_kernelbench.sh --all, carry .kb"; exit 3; }
      limit=${KP_KB_LIMIT:-400}
      # shellcheck disable=SC2086  # KP_KB_FILES: a list of paths (word-split)
      stage kbfiles "$limit" python3 bench/kb_sweep.py ${KP_KB_FILES:?KP_KB_FILES=<problem files>} \
        --device cuda --candidate "${KP_KB_CANDIDATE:-copy}" --limit-s $((limit - 60)) --verbose \
        --out "$OUT/kbfiles.json" ;;
    scripted)  # the agent team on cuda with scripted replies (bench/scripted/README.md)
      (cd bench/scripted && stage scripted 240 python3 -m bot.cli optimize \
        ../../tests/redteam/problems/gelu_scale_residual.py --device cuda --llm scripted \
        --script gelu_scale_residual_cuda.json --seed 1 --out /tmp/kp-scripted)
      cp /tmp/kp-scripted/report.json "$OUT/scripted-report.json"
      cp /tmp/kp-scripted/trajectory-*.json "$OUT/scripted-trajectory.json" ;;
    prflow)  # the PR flow against the fake GitHub on a cuda module (bench/gpu_pr_flow.py)
      stage prflow 540 python3 bench/gpu_pr_flow.py --out "$OUT/prflow"
      tar -czf "$OUT/prflow.tgz" -C "$OUT" prflow && rm -rf "$OUT/prflow" ;;  # one file comes back
    nightly)  # the nightly run over a shipped kernel, three nights (bench/gpu_nightly.py)
      stage nightly 540 python3 bench/gpu_nightly.py --out "$OUT/nightly"
      tar -czf "$OUT/nightly.tgz" -C "$OUT" nightly && rm -rf "$OUT/nightly" ;;
    probe)  # why honest kernels are sometimes called disturbing (bench/NOTES.md, session 12):
      # the honest corpus once per word of KP_PROBE_VARIANTS (control: as is; noprofile: no
      # profiler before timing, bench/probe_hooks; teardown: TEARDOWN_CUPTI=1), every timing
      # loop's raw calls recorded, GPU clocks and host load sampled beside; KP_PROBE_SCRIPT=1
      # adds bench/probe_disturbance.py. bench/analyze_probe.py reads what comes back.
      nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,temperature.gpu,clocks_event_reasons.active \
        --format=csv -lms 100 > "$OUT/probe-smi.csv" 2>&1 &
      smi=$!
      (while sleep 0.25; do echo "$(date +%s.%N) $(cat /proc/loadavg) $(head -1 /proc/stat)"; done) > "$OUT/probe-load.txt" &
      load=$!
      { lscpu; cat /sys/fs/cgroup/cpu.max; nvidia-smi -q -d PERFORMANCE,CLOCK; } > "$OUT/probe-host.txt" 2>&1
      round=0
      for variant in ${KP_PROBE_VARIANTS:-control control}; do
        round=$((round + 1))
        case $variant in
          control) extra=() ;;
          noprofile) extra=(KP_PROBE_NOPROFILE=1) ;;
          teardown) extra=(TEARDOWN_CUPTI=1) ;;
          *) echo "KP_PROBE_VARIANTS: control, noprofile or teardown, not $variant"; exit 2 ;;
        esac
        env "${extra[@]}" KP_PROBE_SAMPLES="$OUT/probe-samples/$round-$variant" \
          PYTHONPATH="$PWD/bench/probe_hooks:$PYTHONPATH" \
          timeout --signal=INT --kill-after=20 200 python3 -m pytest -q -m gpu -p no:cacheprovider \
          tests/test_corpus.py -rA -k honest > "$OUT/probe-$round-$variant.log" 2>&1
        echo "=== probe $round $variant: exit $?"; tail -n 3 "$OUT/probe-$round-$variant.log"
      done
      if [ "${KP_PROBE_SCRIPT:-0}" = 1 ]; then
        KP_PROBE_SAMPLES="$OUT/probe-samples/script" PYTHONPATH="$PWD/bench/probe_hooks:$PYTHONPATH" \
          stage probe 240 python3 bench/probe_disturbance.py --rounds 2 --out "$OUT/probe.json" \
          tests/honest/cuda/*.py
      fi
      kill "$smi" "$load"
      tar -czf "$OUT/probe-samples.tgz" -C "$OUT" probe-samples && rm -rf "$OUT/probe-samples" ;;
    pack) tar -czf - .kp-cache | split -b 15m - "$OUT/kp-cache.tgz.part-"
          ls -la "$OUT"/kp-cache.tgz.part-* ;;
    *) echo "unknown stage $what (build, gpu, redteam, honest, corpus, select, bench, overhead, timer, kbref, kbsweep, scripted, prflow, nightly, probe, pack)"; exit 2 ;;
  esac
done
