"""Turn each defense of the harness off in turn and show which test notices.

    .venv/bin/python tests/defense_off.py             # every row
    .venv/bin/python tests/defense_off.py --only NAME # one row (repeatable)
    .venv/bin/python tests/defense_off.py --list      # the table, nothing run

For each row of DEFENSES: copy the repository (``git ls-files``, untracked files that git
does not ignore included) into a temporary folder, replace the row's source snippet there
(it must occur exactly once: the table has to track the code), and run the row's tests in
that copy with ``python -m pytest -x -q``. A test that fails means the defense is CAUGHT;
all passing means it is MISSED: no test would notice the defense being switched off. Before
that, each distinct test selection runs once on the unmodified copy: a selection that fails
there proves nothing, and its rows are reported as ERROR. Exit status 1 when any row is
MISSED or ERROR.

Not collected by pytest (not named test_*). The build cache ($KERNELPILOT_CACHE or
~/.cache/kernelpilot) is used as is: the copies' builds hash to the same keys, so C++ builds
are reused between rows and with the main checkout.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Defense:
    """One defense and the mutation that switches it off."""

    name: str
    file: str  # relative to the repository root
    snippet: str  # exact source text, found exactly once in ``file``
    replacement: str  # what turns the defense off
    tests: tuple[str, ...]  # pytest arguments: node ids, files, "-k", "expr"


def _corpus(entry: str) -> str:
    """The corpus test of one red-team file (builds its kernel: a minute on 2 cores, cached)."""
    return f"tests/test_corpus.py::test_candidate_verdict[{entry}]"


DEFENSES: list[Defense] = [
    # --- isolation (harness/sandbox.py) ----------------------------------------------------
    Defense(
        "worker_env_secrets",
        "harness/sandbox.py",
        "env=clean_environment() | (extra_env or {}),",
        "env=dict(os.environ) | (extra_env or {}),",
        ("tests/test_isolation.py::test_a_real_worker_starts_without_secrets",),
    ),
    Defense(
        "secret_name_filter",
        "harness/sandbox.py",
        "if not SECRET_NAME.search(name)}",
        "}",
        ("tests/test_isolation.py", "-k", "secrets"),
    ),
    Defense(
        "network_namespace",
        "harness/sandbox.py",
        "        if isolate_network:\n            _unshare_network()",
        "        if isolate_network:\n            pass",
        ("tests/test_isolation.py::test_a_real_worker_has_a_network_namespace_of_its_own",),
    ),
    Defense(
        "address_space_limit",
        "harness/sandbox.py",
        "resource.setrlimit(resource.RLIMIT_AS, (limit, limit))",
        "del limit",
        ("tests/test_isolation.py::test_a_real_cpu_worker_has_an_address_space_limit",),
    ),
    Defense(
        "one_result_per_channel",
        "harness/verdict.py",
        "if len(results) > 1 or outcome.channel_error:",
        "if outcome.channel_error:",
        ("tests/test_channel.py::test_two_results_mean_a_tampered_channel",),
    ),
    Defense(
        "ok_only_by_parents_comparison",
        "harness/verdict.py",
        "    elif status is None:  # only the parent's own comparison",
        "    elif False:  # only the parent's own comparison",
        ("tests/test_channel.py::test_success_without_the_parents_comparison_is_not_ok",),
    ),
    Defense(
        "own_cuda_kernel",
        "harness/verdict.py",
        "    if own:\n",
        "    if True:\n",
        (
            "tests/test_channel.py::test_a_cuda_candidate_needs_a_kernel_the_reference_does_not_launch",
        ),
    ),
    Defense(
        "comparator_must_finish",
        "harness/comparator.py",
        '                failed = f"the comparison did not finish: {err}"',
        "                return None",
        (
            "tests/test_comparator.py::"
            "test_a_comparator_that_dies_before_the_end_fails_a_candidate_it_answered",
        ),
    ),
    Defense(
        "same_reference_parameters",
        "harness/cases.py",
        "    if expected and params_digest(module) != expected:",
        "    if False:",
        ("tests/test_comparator.py", "-k", "not_seeded_by_torch"),
    ),
    Defense(
        "ipc_handle_checked",
        "harness/handover.py",
        "    if len(shape) != len(stride) or any(n < 0 for n in shape) or any(s < 0 for s in stride):",
        "    if False:",
        ("tests/test_comparator.py", "-k", "untrusted_ipc"),
    ),
    # --- static gates (harness/gate.py, native_gate.py, symbols.py, buildcache.py) ---------
    Defense(
        "gate_try_except",
        "harness/gate.py",
        'self.reject(node, "try/except: a fallback path can hide a failing kernel")',
        "pass",
        ("tests/test_gate.py::test_rejects",),
    ),
    Defense(
        "gate_import_allow_list",
        "harness/gate.py",
        "            if alias.name not in ALLOWED_IMPORTS:",
        "            if False:",
        ("tests/test_gate.py::test_rejects",),
    ),
    Defense(
        "native_gate_rules",
        "harness/native_gate.py",
        "for pattern, why in FORBIDDEN_NATIVE.items():",
        "for pattern, why in {}.items():",
        ("tests/test_gate.py::test_native_rejects",),
    ),
    Defense(
        "symbols_allow_list",
        "harness/symbols.py",
        'elif _is_c(symbol) and not ALLOWED_C.fullmatch(symbol.split("@")[0]):',
        "elif False:",
        ("tests/test_symbols.py::test_rejected_symbols_are_named",),
    ),
    Defense(
        "symbols_only_gated_stream_work",
        "harness/symbols.py",
        'elif STREAM_WORK.fullmatch(name := symbol.split("@")[0]) and name not in STREAM_GATED:',
        "elif False:",
        ("tests/test_stream_gate.py::test_stream_work_the_gate_cannot_hold_is_refused",),
    ),
    Defense(
        "binary_checked_before_load",
        "harness/buildcache.py",
        "reasons = check_binary(Path(library))",
        "reasons = []",
        ("tests/test_symbols.py::test_a_library_is_checked_before_it_is_loaded",),
    ),
    # --- dynamic checks in the worker (harness/guards.py, worker_*.py, profiling.py) -------
    # The stream gate's holding itself needs a GPU: bench/gpu_stream_gate.py runs the CUDA
    # stream cheats with it on and off. Here: that the checks' worker gets it at all.
    Defense(
        "stream_gate_holds_other_streams",
        "harness/native/stream_gate.c",
        "if (stream == caller_stream || kpg_capturing(stream))",
        "if (stream == caller_stream || kpg_capturing(stream) || 1)",
        ("tests/test_stream_gate.py", "-k", "hold"),
    ),
    Defense(
        "stream_gate_follows_joins",
        "harness/native/stream_gate.c",
        "        held[slot].fresh_wait = 1;",
        "        (void)0;",
        ("tests/test_stream_gate.py", "-k", "release_opens_what"),
    ),
    Defense(
        "stream_gate_opens_only_what_a_wait_needs",
        "harness/native/stream_gate_calls.c",
        "if (pointer && kpg_holding()) {",
        "if (kpg_holding()) {",
        ("tests/test_stream_gate.py", "-k", "wait_for_nothing_held"),
    ),
    Defense(
        "stream_gate_follows_only_accepted_joins",
        "harness/native/stream_gate_calls.c",
        "        if (result == cudaSuccess)                                                           \\",
        "        if (1)                                                                               \\",
        ("tests/test_stream_gate.py", "-k", "refused_is_not_followed"),
    ),
    Defense(
        "stream_gate_passes_the_allocators_queries",
        "harness/native/stream_gate_calls.c",
        'if (kpg_holding() && !made_by(__builtin_return_address(0), "libc10_cuda"))',
        "if (kpg_holding())",
        ("tests/test_stream_gate.py", "-k", "allocators_event_queries"),
    ),
    Defense(
        "stream_gate_after_forward_is_imprecise",
        "harness/native/stream_gate.c",
        "    if (opened && atomic_load(&after_forward))",
        "    if (opened && !opened)",
        ("tests/test_stream_gate.py", "-k", "after_forward_returned"),
    ),
    Defense(
        "stream_gate_unverifiable_candidate",
        "harness/stream_gate.py",
        "        if not self.usable() or not self.held_calls or self.conclusive:",
        "        if True:",
        ("tests/test_stream_gate.py", "-k", "unverifiable"),
    ),
    Defense(
        "stream_gate_preloaded",
        "harness/evaluate.py",
        'gated = mode == "evaluate" and problem.device == "cuda" and config.stream_gate',
        "gated = False",
        ("tests/test_stream_gate.py::test_only_the_checks_worker_on_cuda_gets_the_gate",),
    ),
    Defense(
        "stable_after_sync",
        "harness/guards.py",
        "return fingerprint(outputs) != sums or not samples_unchanged(sampled, outputs)",
        "return False",
        ("tests/test_guards.py", "-k", "changed_since"),
    ),
    Defense(
        "stable_after_sync_sample",  # only the sums: a late write that keeps them passes
        "harness/guards.py",
        "return fingerprint(outputs) != sums or not samples_unchanged(sampled, outputs)",
        "return fingerprint(outputs) != sums",
        ("tests/test_guards.py", "-k", "changed_since"),
    ),
    Defense(
        "stable_after_sync_fingerprint",  # only the sample: a late write it skips passes
        "harness/guards.py",
        "return fingerprint(outputs) != sums or not samples_unchanged(sampled, outputs)",
        "return not samples_unchanged(sampled, outputs)",
        ("tests/test_guards.py", "-k", "changed_since"),
    ),
    Defense(
        "stable_after_sync_false_alarm",  # broken the other way: every honest kernel fails
        "harness/guards.py",
        "return fingerprint(outputs) != sums or not samples_unchanged(sampled, outputs)",
        "return True",
        ("tests/test_guards.py", "-k", "changed_since"),
    ),
    Defense(
        "inputs_unchanged",
        "harness/guards.py",
        "    if not equal_nan(now, then):\n        return False\n    storage",
        "    return True\n    storage",
        (_corpus("redteam/cpu/p14_input_as_scratch.py"),),
    ),
    Defense(
        "input_guard_regions",
        "harness/guards.py",
        "    for region in (head, tail):",
        "    for region in ():",
        ("tests/test_guards.py", "-k", "same_values"),
    ),
    Defense(
        "fresh_outputs",
        "harness/timed_checks.py",
        "    if failure is not None:\n        raise failure",
        "    del failure",
        ("tests/test_guards.py::test_an_output_reusing_the_previous_calls_memory_fails",),
    ),
    Defense(
        "no_monkeypatching",
        "harness/timed_checks.py",
        "    patched = guards.changed(before, guards.snapshot(job.reference_ops))",
        "    patched = []",
        ("tests/test_guards.py", "-k", "unpatched"),
    ),
    Defense(
        "no_pytorch_compute_table",
        "harness/profiling.py",
        "    others = sorted({op for op in compute if op not in FAMILY_OF})",
        "    others: list[str] = []",
        ("tests/test_guards.py::test_pytorch_compute_table",),
    ),
    Defense(
        "no_pytorch_compute_every_call",  # the final profile sees the first case's shapes only
        "harness/checked_case.py",
        "    if computes:",
        "    if False:",
        (_corpus("redteam/cpu/p02_fallback_on_untuned_shapes.py"),),
    ),
    Defense(
        "launches_own_kernel",
        "harness/checked_case.py",
        "    if not sum(loader.calls.values()):",
        "    if False:",
        (_corpus("redteam/cpu/p01_pure_python_kernel_unused.py"),),
    ),
    # MISSED when added: on cpu an unwritten output holds stale or zeroed memory, which fails
    # correct_outputs anyway; only the finite_outputs symptom depends on the poison.
    Defense(
        "poisoned_memory",
        "harness/guards.py",
        "            block = torch.full(shape, fill, dtype=dtype, device=device)",
        "            block = None",
        (_corpus("redteam/cpu/p04_noop_launch_uninitialized.py"),),
    ),
    # --- comparison and acceptance (harness/tolerance.py, accept.py) -----------------------
    Defense(
        "tolerance_relative_norm",
        "harness/tolerance.py",
        "    if rel_error > tol.rel_norm:",
        "    if False:",
        ("tests/test_tolerance.py",),
    ),
    Defense(
        "deterministic_outputs",
        "harness/tolerance.py",
        "            self._same_as_first(name, produced)",
        "            pass",
        ("tests/test_tolerance.py", "-k", "repeated"),
    ),
    Defense(
        "tolerance_elementwise",
        "harness/tolerance.py",
        "    if slack > tol.atol * scale:",
        "    if False:",
        ("tests/test_tolerance.py",),
    ),
    Defense(
        "finite_outputs",
        "harness/tolerance.py",
        "    if nonfinite:",
        "    if False:",
        ("tests/test_tolerance.py",),
    ),
    Defense(
        "no_profiler_before_timing",  # a profiler session leaves its process slower
        "harness/worker_candidate.py",
        '    alone = time_stand_ins(job, state, "alone", compiled)',
        '    _profile_reference(job, base)\n    alone = time_stand_ins(job, state, "alone", compiled)',
        (
            "tests/test_evaluator.py::test_the_timing_worker_runs_no_profiler_before_its_timing_ends",
        ),
    ),
    Defense(
        "loss_not_its_own_null_answer",  # broken the other way: every loss problem called weak
        "harness/audit.py",
        "        if out.is_floating_point() and out.numel() > 1:",
        "        if out.is_floating_point() and out.numel():",
        ("tests/test_tolerance.py::test_a_loss_is_not_its_own_null_answer",),
    ),
    Defense(
        "audit_scales_each_output_once",  # a pass over GBs per null answer tried, not per case
        "harness/audit.py",
        "            if not self._passes(answer(), outputs[index], functools.partial(rms, index)):",
        "            if not self._passes(answer(), outputs[index], None):",
        (
            "tests/test_tolerance.py::"
            "test_the_audit_reads_each_output_whole_once_per_case_for_its_scale",
        ),
    ),
    Defense(
        "outputs_read_back_in_chunks",  # whole-output float64 copies: 4x the output beside it
        "harness/guards.py",
        '        step = CHUNK.get(flat.device.type, CHUNK["cpu"])',
        "        step = max(1, flat.numel())",
        (
            "tests/test_memory.py::test_reading_outputs_back_takes_a_chunk_not_four_times_the_output",
        ),
    ),
    Defense(
        "null_answers_expanded",  # full-size null answers: another output's memory per case
        "harness/audit.py",
        "lambda out=out: _filled(out, float(out.mean())),",
        "lambda out=out: torch.full_like(out, float(out.mean())),",
        (
            "tests/test_memory.py::test_the_audit_refutes_null_answers_without_output_sized_copies_of_them",
        ),
    ),
    Defense(
        "variant_drawn_in_runs",  # one int64 index of every element: 2x the input beside it
        "harness/input_variants.py",
        "    block = max(1, min(PICK_BLOCK, flat.numel() // 64))",
        "    block = 1",
        ("tests/test_memory.py::test_a_shape_variant_is_drawn_without_an_index_twice_the_input",),
    ),
    Defense(
        "audit_lets_cases_go",  # every case's outputs kept beside the next for nothing
        "harness/audit.py",
        '        if self.cases < 2 or any(n.startswith("another seed") for n in self.passing):',
        "        if True:",
        ("tests/test_tolerance.py::test_the_audit_lets_a_case_go_once_no_null_answer_needs_it",),
    ),
    Defense(
        "harness_memory_named",  # the harness's OOM in the checks' worker: "the worker died"
        "harness/worker_candidate.py",
        "            except torch.OutOfMemoryError as err:  # the candidate's own calls raise CheckFailed",
        "            except ZeroDivisionError as err:",
        (
            "tests/test_memory.py::test_the_harness_running_out_of_memory_in_the_checks_worker_is_said_to_be_the_harness",
        ),
    ),
    Defense(
        "baseline_disturbance",
        "harness/accept.py",
        "beyond=min(ratio, fastest_ratio) > allowed,",
        "beyond=False,",
        (
            "tests/test_accept.py::test_slowdown_table",
            "tests/test_accept.py::test_baseline_disturbance_tells_what_is_left_behind_from_interleaving",
        ),
    ),
    # --- jobs and tokens (bot/nightly_results.py, nightly.py, cli_nightly_jobs.py,
    # runner_trust.py; action.yml and the workflows) ------------------------------------------
    Defense(
        "nightly_results_unknown_fields",  # a branch or an issue named by the artifact
        "bot/nightly_results.py",
        '    model_config = ConfigDict(extra="forbid")',
        '    model_config = ConfigDict(extra="ignore")',
        ("tests/test_nightly_jobs.py", "-k", "names_a_branch or names_an_issue"),
    ),
    Defense(
        "nightly_results_size_cap",
        "bot/nightly_results.py",
        "    if size > MAX_RESULTS_BYTES:",
        "    if False:",
        ("tests/test_nightly_jobs.py", "-k", "oversized"),
    ),
    Defense(
        "nightly_results_same_repository",
        "bot/nightly_results.py",
        "    if results.repository != expected.repository:",
        "    if False:",
        ("tests/test_nightly_jobs.py", "-k", "another_repository"),
    ),
    Defense(
        "nightly_results_same_commit",
        "bot/nightly_results.py",
        "    if results.commit != expected.commit or not COMMIT.fullmatch(results.commit):",
        "    if False:",
        ("tests/test_nightly_jobs.py", "-k", "another_commit"),
    ),
    Defense(
        "nightly_results_same_night",
        "bot/nightly_results.py",
        "    if not -2 <= (night - expected.today).days <= 1:",
        "    if False:",
        ("tests/test_nightly_jobs.py", "-k", "another_night"),
    ),
    Defense(
        "nightly_results_rows_checked",  # names, records' commit and night, statuses, texts
        "bot/nightly_results.py",
        "        problem = _row_problem(row, results)",
        "        problem = None",
        ("tests/test_nightly_jobs.py", "-k", "forged and not names and not another_re"),
    ),
    Defense(
        "nightly_results_row_cap",
        "bot/nightly_results.py",
        "    if len(results.rows) > MAX_ROWS:",
        "    if False:",
        ("tests/test_nightly_jobs.py", "-k", "too_many_rows"),
    ),
    Defense(
        "nightly_run_url_from_publish",
        "bot/cli_nightly_jobs.py",
        "                row.record.run_url = env.run_url",
        "                pass",
        ("tests/test_nightly_jobs.py::test_publish_writes_the_night_where_its_own_settings_say",),
    ),
    Defense(
        "nightly_markdown_as_code",
        "bot/nightly.py",
        '    return f"{fence}{pad}{flat}{pad}{fence}"',
        "    return flat",
        ("tests/test_nightly_jobs.py::test_markdown_in_the_artifact_is_shown_as_code",),
    ),
    Defense(
        "nightly_table_pipes_escaped",
        "bot/nightly.py",
        "    if table:  # GFM splits cells at any unescaped pipe, inside code too",
        "    if False:",
        ("tests/test_nightly_jobs.py::test_markdown_in_the_artifact_is_shown_as_code",),
    ),
    Defense(
        "fork_needs_ephemeral_runner",
        "bot/runner_trust.py",
        "    if event.pull is None or not event.pull.fork or runner.ephemeral:",
        "    if True:",
        ("tests/test_nightly_jobs.py", "-k", "ephemeral or forks_code"),
    ),
    Defense(
        "llm_key_in_measure_only",  # the key handed to publish's process too
        "action.yml",
        "        KERNELPILOT_OPEN_PR: ${{ inputs.open-pr }}\n",
        "        KERNELPILOT_OPEN_PR: ${{ inputs.open-pr }}\n"
        "        OPENAI_API_KEY: ${{ inputs.openai-api-key }}\n",
        ("tests/test_workflows.py::test_the_llm_key_reaches_the_measure_step_only",),
    ),
    Defense(
        "llm_key_not_job_wide",  # the key in a job's env: every step of it has it
        "examples/workflows/kernelpilot-pr.yml",
        "    timeout-minutes: 120\n    permissions:\n      contents: read\n",
        "    timeout-minutes: 120\n    env:\n      OPENAI_API_KEY: ${{ secrets.OPENAI_API_KEY }}\n"
        "    permissions:\n      contents: read\n",
        ("tests/test_workflows.py::test_the_llm_key_reaches_the_measure_step_only",),
    ),
    Defense(
        "nightly_measure_without_token",  # the write token in the job that runs the code
        "action.yml",
        "        KERNELPILOT_DATA_BRANCH: ${{ inputs.data-branch }}\n      run: |\n        for name",
        "        KERNELPILOT_DATA_BRANCH: ${{ inputs.data-branch }}\n"
        "        GITHUB_TOKEN: ${{ inputs.github-token }}\n      run: |\n        for name",
        (
            "tests/test_workflows.py::test_action_passes_inputs_through_env_and_keeps_the_token_from_measure",
        ),
    ),
    Defense(
        "nightly_measure_reads_only",
        "examples/workflows/kernelpilot-nightly.yml",
        "    permissions:\n      contents: read\n",
        "    permissions:\n      contents: write\n",
        ("tests/test_workflows.py", "-k", "nightly_measures_without_a_token"),
    ),
    Defense(
        "runner_labels_per_trust_level",  # the nightly on the runners of pull requests
        "examples/workflows/kernelpilot-nightly.yml",
        "runs-on: [self-hosted, gpu, kernelpilot-nightly]",
        "runs-on: [self-hosted, gpu, kernelpilot-pr]",
        ("tests/test_workflows.py", "-k", "runners_of_their_own"),
    ),
]


# --- running a row ---------------------------------------------------------------------------


def repository_files() -> list[Path]:
    """Tracked files and untracked ones git does not ignore (new tests not yet committed),
    as they are in the working tree; files deleted there are left out."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [Path(name) for name in sorted(set(listing.split("\0"))) if (ROOT / name).is_file()]


def copy_repository(files: list[Path], destination: Path) -> None:
    """The working tree's ``files`` under ``destination``, checked to be what it imports."""
    for relative in files:
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, target)
    check_copy_is_imported(destination)


def stale(defense: Defense, root: Path = ROOT) -> str:
    """Why the row no longer matches the code; empty when its snippet occurs exactly once."""
    path = root / defense.file
    if not path.is_file():
        return f"{defense.file} does not exist"
    count = path.read_text().count(defense.snippet)
    return "" if count == 1 else f"snippet found {count} times in {defense.file}"


def switch_off(defense: Defense, root: Path) -> None:
    why = stale(defense, root)
    if why:
        raise SystemExit(f"{defense.name}: {why}; update DEFENSES to track the code")
    path = root / defense.file
    path.write_text(path.read_text().replace(defense.snippet, defense.replacement))


@dataclass(frozen=True)
class Run:
    exit_code: int
    failed: str  # the first failing test pytest named, or the tail of its output
    seconds: float


def run_tests(root: Path, tests: tuple[str, ...], timeout_s: float) -> Run:
    """pytest in ``root``, with the copy's packages first on the path (the editable install
    of the main checkout would otherwise serve ``harness``)."""
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return Run(-1, f"no result after {timeout_s:.0f} s", time.monotonic() - started)
    output = done.stdout + done.stderr
    named = [line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))]
    failed = named[0] if named else " | ".join(output.strip().splitlines()[-3:])
    return Run(done.returncode, failed, time.monotonic() - started)


def verdict(run: Run) -> str:
    """pytest's exit code: 1 some test failed, 0 all passed; anything else (no tests
    collected, usage error, timeout) says nothing about the defense."""
    return {0: "MISSED", 1: "CAUGHT"}.get(run.exit_code, "ERROR")


def check_copy_is_imported(root: Path) -> None:
    """The copy's harness, not the main checkout's, must be what the tests import."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    probe = [sys.executable, "-c", "import harness; print(harness.__file__)"]
    found = subprocess.run(probe, cwd=root, env=env, capture_output=True, text=True, check=True)
    if not Path(found.stdout.strip()).is_relative_to(root):
        raise SystemExit(f"the copy imports {found.stdout.strip()}, not its own harness")


def baselines(files: list[Path], rows: list[Defense], timeout_s: float) -> dict[tuple, Run]:
    """Each distinct test selection on the unmodified copy: it must pass there."""
    results: dict[tuple, Run] = {}
    with tempfile.TemporaryDirectory(prefix="defense-off-") as folder:
        root = Path(folder)
        copy_repository(files, root)
        for tests in dict.fromkeys(row.tests for row in rows):
            results[tests] = run_tests(root, tests, timeout_s)
            print(f"  baseline {' '.join(tests)}: exit {results[tests].exit_code}", flush=True)
    return results


def run_row(defense: Defense, files: list[Path], timeout_s: float) -> Run:
    with tempfile.TemporaryDirectory(prefix=f"defense-off-{defense.name}-") as folder:
        root = Path(folder)
        copy_repository(files, root)
        switch_off(defense, root)
        return run_tests(root, defense.tests, timeout_s)


# --- the command line ------------------------------------------------------------------------


def selected(only: list[str] | None) -> list[Defense]:
    if not only:
        return DEFENSES
    known = {defense.name: defense for defense in DEFENSES}
    unknown = sorted(set(only) - known.keys())
    if unknown:
        raise SystemExit(f"no defense named {', '.join(unknown)}; see --list")
    return [known[name] for name in only]


def print_table(rows: list[tuple[str, str, str, str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)]
        print("  ".join([*cells, row[3]]))


def list_table(defenses: list[Defense]) -> None:
    rows = [("defense", "file", "table", "tests")]
    rows += [(d.name, d.file, stale(d) or "ok", " ".join(d.tests)) for d in defenses]
    print_table(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", metavar="NAME", help="run this row only")
    parser.add_argument("--list", action="store_true", help="print the table, run nothing")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmodified runs")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per pytest run")
    args = parser.parse_args()
    defenses = selected(args.only)
    if args.list:
        list_table(defenses)
        return 0
    for defense in defenses:  # a stale row fails before anything runs
        if why := stale(defense):
            raise SystemExit(f"{defense.name}: {why}; update DEFENSES to track the code")
    files = repository_files()
    before = {} if args.no_baseline else baselines(files, defenses, args.timeout)
    rows = [("defense", "verdict", "seconds", "tests / first failure")]
    for defense in defenses:
        run = run_row(defense, files, args.timeout)
        result = verdict(run)
        base = before.get(defense.tests)
        if base is not None and base.exit_code != 0:
            result = "ERROR"  # the tests fail with the defense on too
            run = Run(run.exit_code, f"fails unmodified: {base.failed}", run.seconds)
        detail = " ".join(defense.tests) + (f"  ->  {run.failed}" if result != "MISSED" else "")
        print(f"{defense.name}: {result} ({run.seconds:.0f} s)  {detail}", flush=True)
        rows.append((defense.name, result, f"{run.seconds:.0f}", detail))
    print()
    print_table(rows)
    return 0 if all(row[1] == "CAUGHT" for row in rows[1:]) else 1


if __name__ == "__main__":
    sys.exit(main())
