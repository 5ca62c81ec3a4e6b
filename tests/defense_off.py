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
    # --- isolation (harness/sandbox/run.py) ----------------------------------------------------
    Defense(
        "worker_env_secrets",
        "harness/sandbox/run.py",
        "env = clean_environment() | (extra_env or {})",
        "env = dict(os.environ) | (extra_env or {})",
        ("tests/test_isolation.py::test_a_real_worker_starts_without_secrets",),
    ),
    Defense(
        "secret_name_filter",
        "harness/sandbox/environment.py",
        "if not SECRET_NAME.search(name) and not name.upper().startswith(RUNNER_PREFIXES)",
        "if True",
        ("tests/test_isolation.py", "-k", "secrets"),
    ),
    Defense(
        "temporary_folder_found_before_signals",
        "harness/sandbox/lifetime.py",
        "    tempfile.gettempdir()\n",
        "",
        ("tests/test_lifetime.py::test_the_temporary_folder_is_found_before_a_stop_can_land",),
    ),
    Defense(
        "worker_private_tmpdir",
        "harness/sandbox/run.py",
        "        env |= private_temporary_folder(job_dir)\n",
        "        pass\n",
        ("tests/test_isolation.py::test_an_unsandboxed_worker_has_its_own_temporary_folder",),
    ),
    # --- the sandbox (harness/sandbox/bubblewrap.py): what code in a real worker can reach ----------
    Defense(
        "sandbox_network_namespace",
        "harness/sandbox/bubblewrap.py",
        '        "--unshare-net",\n',
        "",
        ("tests/test_isolation.py::test_a_sandboxed_worker_has_no_network",),
    ),
    Defense(
        "sandbox_pid_namespace",
        "harness/sandbox/bubblewrap.py",
        '        "--unshare-pid",\n',
        "",
        ("tests/test_isolation.py", "-k", "cannot_see_the_parent or outlives"),
    ),
    Defense(
        "sandbox_own_gpu_node",  # a worker pinned to one GPU shown every GPU's device node
        "harness/sandbox/bubblewrap.py",
        "        if minors is None or node.name in DRIVER_NODES or _gpu_minor(node) in minors:",
        "        if True:",
        ("tests/test_gpus.py::test_a_pinned_worker_cannot_open_another_gpus_device_node",),
    ),
    Defense(
        "sandbox_runner_variables",
        "harness/sandbox/environment.py",
        'RUNNER_PREFIXES = ("GITHUB_", "ACTIONS_", "RUNNER_", "INPUT_", "OPENAI_")',
        'RUNNER_PREFIXES = ("KP_NOTHING_",)',
        ("tests/test_isolation.py::test_a_real_worker_starts_without_secrets",),
    ),
    Defense(
        "sandbox_file_view",  # the machine's whole file system instead of the job's view
        "harness/sandbox/bubblewrap.py",
        "    read_only = [Path(d) for d in SYSTEM_DIRS] + python_paths() + list(view.read_only)",
        '    read_only = [Path("/")] + python_paths() + list(view.read_only)',
        ("tests/test_isolation.py::test_a_sandboxed_worker_sees_no_file_its_job_does_not_name",),
    ),
    Defense(
        "sandbox_private_tmp",  # a search path at /tmp binds the machine's /tmp over the tmpfs
        "harness/sandbox/bubblewrap.py",
        "    return sorted(path for path in paths if not PRIVATE_TMP.is_relative_to(path))",
        '    return sorted(path for path in paths if path != Path("/"))',
        ("tests/test_isolation.py::test_a_search_path_at_tmp_does_not_show_the_machines_tmp",),
    ),
    Defense(
        "frozen_comment_one_line",  # the capture worker's text written into pyproject.toml raw
        "harness/capture/freeze.py",
        '    return "# " + " ".join(text.split())',
        '    return "# " + text',
        ("tests/test_capture.py::test_a_workers_line_breaks_cannot_write_toml_of_their_own",),
    ),
    Defense(
        "shards_sources_own_rows",  # a shard gives the source of another shard's module
        "bot/pr/shards.py",
        "            if owner.get(target) != name:",
        "            if False:",
        ("tests/test_shards.py::test_shards_that_do_not_belong_to_one_run_are_refused",),
    ),
    Defense(
        "shards_one_answer_per_module",  # two shards' rows for one module, both kept
        "bot/pr/shards.py",
        "            if row.target in owner:",
        "            if False:",
        ("tests/test_shards.py::test_shards_that_do_not_belong_to_one_run_are_refused",),
    ),
    Defense(
        "sandbox_read_only_binds",
        "harness/sandbox/bubblewrap.py",
        '        command += ["--ro-bind-try", str(path), str(path)]',
        '        command += ["--bind-try", str(path), str(path)]',
        (
            "tests/test_isolation.py::test_a_sandboxed_worker_reads_the_checkout_but_cannot_write_it",
            "tests/test_buildstore.py::test_a_candidate_worker_finds_no_writable_cache_or_checkout",
        ),
    ),
    Defense(
        "candidate_cache_read_only",  # the candidate's worker given the cache writable
        "harness/candidate_workers.py",
        "    return problem_view(problem, cache_dir)",
        "    return problem_view(problem, writable=[cache_dir])",
        ("tests/test_buildstore.py::test_a_candidate_worker_finds_no_writable_cache_or_checkout",),
    ),
    Defense(
        "parent_not_dumpable",
        "harness/sandbox/bubblewrap.py",
        "    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)",
        "    del libc",
        ("tests/test_isolation.py::test_the_parent_is_not_dumpable_once_it_started_a_sandbox",),
    ),
    Defense(
        "sandbox_checked_before_use",  # a bwrap that cannot start: a worker that silently fails
        "harness/sandbox/bubblewrap.py",
        "    check(bwrap)\n    protect_this_process()",
        "    protect_this_process()",
        ("tests/test_isolation.py::test_a_sandbox_the_machine_refuses_is_a_clear_error",),
    ),
    Defense(
        "no_fork_without_the_sandbox",
        "bot/pr/flow.py",
        "    if fork:\n        raise UserError(",
        "    if False:\n        raise UserError(",
        ("tests/test_trust_levels.py::test_a_fork_is_never_run_without_the_sandbox",),
    ),
    Defense(
        "sandbox_not_from_pyproject",
        "bot/settings.py",
        '    if "sandbox" in table.get("eval", {}):',
        "    if False:",
        ("tests/test_trust_levels.py::test_pyproject_cannot_switch_the_sandbox_off",),
    ),
    Defense(
        "cache_per_trust_level",
        "bot/run.py",
        '    updates["cache_dir"] = (config.cache_dir or default_cache_dir()) / options.cache_scope',
        '    updates["cache_dir"] = config.cache_dir or default_cache_dir()',
        ("tests/test_trust_levels.py", "-k", "cache"),
    ),
    Defense(
        "proposer_in_a_worker",  # tracing the module in kernelpilot's own process
        "agents/optimize.py",
        "        proposal = propose(problem, evaluator.config)",
        "        from agents.offline import propose_here\n        proposal = propose_here(problem)",
        ("tests/test_hostile_problem.py", "-k", "optimize"),
    ),
    Defense(
        "address_space_limit",
        "harness/sandbox/limits.py",
        "resource.setrlimit(resource.RLIMIT_AS, (limit, limit))",
        "del limit",
        ("tests/test_isolation.py::test_a_real_cpu_worker_has_an_address_space_limit",),
    ),
    Defense(
        "one_result_per_channel",
        "harness/judge/verdict.py",
        "if len(results) > 1 or outcome.channel_error:",
        "if outcome.channel_error:",
        ("tests/test_channel.py::test_two_results_mean_a_tampered_channel",),
    ),
    Defense(
        "ok_only_by_parents_comparison",
        "harness/judge/verdict.py",
        "    elif status is None:  # only the parent's own comparison",
        "    elif False:  # only the parent's own comparison",
        ("tests/test_channel.py::test_success_without_the_parents_comparison_is_not_ok",),
    ),
    Defense(
        "own_cuda_kernel",
        "harness/judge/verdict.py",
        "    if own:\n",
        "    if True:\n",
        (
            "tests/test_channel.py::test_a_cuda_candidate_needs_a_kernel_the_reference_does_not_launch",
        ),
    ),
    Defense(
        "comparator_must_finish",
        "harness/judge/comparator.py",
        '                failed = f"the comparison did not finish: {err}"',
        "                return None",
        (
            "tests/test_comparator.py::"
            "test_a_comparator_that_dies_before_the_end_fails_a_candidate_it_answered",
        ),
    ),
    Defense(
        "same_reference_parameters",
        "harness/problem/cases.py",
        "    if expected and params_digest(module) != expected:",
        "    if False:",
        ("tests/test_comparator.py", "-k", "not_seeded_by_torch"),
    ),
    Defense(
        "ipc_handle_checked",
        "harness/workers/handover.py",
        "    if len(shape) != len(stride) or any(n < 0 for n in shape) or any(s < 0 for s in stride):",
        "    if False:",
        ("tests/test_comparator.py", "-k", "untrusted_ipc"),
    ),
    # --- static gates (harness/static/python.py, native_gate.py, symbols.py, buildcache.py) ---------
    Defense(
        "gate_try_except",
        "harness/static/python.py",
        'self.reject(node, "try/except: a fallback path can hide a failing kernel")',
        "pass",
        ("tests/test_gate.py::test_rejects",),
    ),
    Defense(
        "gate_import_allow_list",
        "harness/static/python.py",
        "            elif alias.name not in ALLOWED_IMPORTS:",
        "            elif False:",
        ("tests/test_gate.py::test_rejects",),
    ),
    Defense(
        "native_gate_rules",
        "harness/static/native.py",
        "for pattern, why in FORBIDDEN_NATIVE.items():",
        "for pattern, why in {}.items():",
        ("tests/test_gate.py::test_native_rejects",),
    ),
    Defense(
        "symbols_allow_list",
        "harness/static/symbols.py",
        'elif _is_c(symbol) and not ALLOWED_C.fullmatch(symbol.split("@")[0]):',
        "elif False:",
        ("tests/test_symbols.py::test_rejected_symbols_are_named",),
    ),
    Defense(
        "symbols_only_gated_stream_work",
        "harness/static/symbols.py",
        'elif STREAM_WORK.fullmatch(name := symbol.split("@")[0]) and name not in STREAM_GATED:',
        "elif False:",
        ("tests/test_stream_gate.py::test_stream_work_the_gate_cannot_hold_is_refused",),
    ),
    Defense(
        "binary_checked_before_load",
        "harness/builds/cache.py",
        "reasons = check_binary(built.library)",
        "reasons = []",
        ("tests/test_symbols.py::test_a_library_is_checked_before_it_is_loaded",),
    ),
    # --- the build cache (harness/builds/store.py, build_requests.py) --------------------------
    Defense(
        "cache_entries_verified_on_read",
        "harness/builds/store.py",
        "    return recorded if isinstance(recorded, dict) and _hashes(folder) == recorded else None",
        "    return recorded if isinstance(recorded, dict) else None",
        ("tests/test_buildstore.py", "-k", "changed_after_its_build"),
    ),
    Defense(
        "cache_needs_a_manifest",
        "harness/builds/store.py",
        "        recorded = json.loads((folder / MANIFEST).read_text())\n"
        "    except (OSError, ValueError):\n        return None",
        "        recorded = json.loads((folder / MANIFEST).read_text())\n"
        "    except (OSError, ValueError):\n        recorded = _hashes(folder)",
        (
            "tests/test_buildstore.py::test_a_library_planted_without_a_manifest_is_never_used",
            "tests/test_buildstore.py::test_a_planted_library_with_a_static_initializer_is_never_loaded",
        ),
    ),
    Defense(
        "builds_staged_then_renamed",  # a build made in place: a killed one blocks its key
        "harness/builds/store.py",
        '        staging = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=self.root / STAGING))',
        "        staging = entry\n        staging.mkdir(parents=True, exist_ok=True)",
        (
            "tests/test_buildstore.py::test_a_failed_or_interrupted_build_leaves_nothing_that_blocks_the_next",
        ),
    ),
    Defense(
        "cache_size_bounded",
        "harness/builds/store.py",
        "        self.evict(keep=entry)\n",
        "",
        (
            "tests/test_buildstore.py::test_the_cache_stays_within_its_size_least_recently_used_going_first",
        ),
    ),
    Defense(
        "pch_only_where_the_file_begins_with_it",  # else the header decides whether it compiles
        "harness/builds/pch.py",
        "    if not spec.implicit_headers and not spec.cpp.lstrip().startswith(HEADER_LINE):\n"
        "        return None\n",
        "",
        ("tests/test_pch.py::test_builds_after_the_first_use_the_precompiled_headers",),
    ),
    Defense(
        "build_requests_gated_again",
        "harness/builds/requests.py",
        '        reasons += check_native(spec.cpp + "\\n" + spec.cuda, dtype)\n'
        "        reasons += flag_problems([*spec.cflags, *spec.cuda_flags, *spec.ldflags])\n",
        "",
        ("tests/test_buildstore.py", "-k", "gates_a_build_request_again"),
    ),
    # --- dynamic checks in the worker (harness/workers/guards.py, worker_*.py, profiling.py) -------
    # The stream gate's holding itself needs a GPU: bench/gpu_stream_gate.py runs the CUDA
    # stream cheats with it on and off. Here: that the checks' worker gets it at all.
    Defense(
        "stream_gate_holds_other_streams",
        "harness/workers/native/stream_gate.c",
        "if (stream == caller_stream || kpg_capturing(stream))",
        "if (stream == caller_stream || kpg_capturing(stream) || 1)",
        ("tests/test_stream_gate.py", "-k", "hold"),
    ),
    Defense(
        "stream_gate_follows_joins",
        "harness/workers/native/stream_gate.c",
        "        held[slot].fresh_wait = 1;",
        "        (void)0;",
        ("tests/test_stream_gate.py", "-k", "release_opens_what"),
    ),
    Defense(
        "stream_gate_opens_only_what_a_wait_needs",
        "harness/workers/native/stream_gate_calls.c",
        "if (pointer && kpg_holding()) {",
        "if (kpg_holding()) {",
        ("tests/test_stream_gate.py", "-k", "wait_for_nothing_held"),
    ),
    Defense(
        "stream_gate_follows_only_accepted_joins",
        "harness/workers/native/stream_gate_calls.c",
        "        if (result == cudaSuccess)                                                           \\",
        "        if (1)                                                                               \\",
        ("tests/test_stream_gate.py", "-k", "refused_is_not_followed"),
    ),
    Defense(
        "stream_gate_passes_the_allocators_queries",
        "harness/workers/native/stream_gate_calls.c",
        'if (kpg_holding() && !made_by(__builtin_return_address(0), "libc10_cuda"))',
        "if (kpg_holding())",
        ("tests/test_stream_gate.py", "-k", "allocators_event_queries"),
    ),
    Defense(
        "stream_gate_after_forward_is_imprecise",
        "harness/workers/native/stream_gate.c",
        "    if (opened && atomic_load(&after_forward))",
        "    if (opened && !opened)",
        ("tests/test_stream_gate.py", "-k", "after_forward_returned"),
    ),
    Defense(
        "stream_gate_unverifiable_candidate",
        "harness/workers/stream_hold.py",
        "        if not self.usable() or not self.held_calls or self.conclusive:",
        "        if True:",
        ("tests/test_stream_gate.py", "-k", "unverifiable"),
    ),
    Defense(
        "stream_gate_preloaded",
        "harness/candidate_workers.py",
        'gated = mode == "evaluate" and problem.device == "cuda" and config.stream_gate',
        "gated = False",
        ("tests/test_stream_gate.py::test_only_the_checks_worker_on_cuda_gets_the_gate",),
    ),
    Defense(
        "stable_after_sync",
        "harness/workers/guards.py",
        "return fingerprint(outputs) != sums or not samples_unchanged(sampled, outputs)",
        "return False",
        ("tests/test_guards.py", "-k", "changed_since"),
    ),
    Defense(
        "stable_after_sync_sample",  # only the sums: a late write that keeps them passes
        "harness/workers/guards.py",
        "return fingerprint(outputs) != sums or not samples_unchanged(sampled, outputs)",
        "return fingerprint(outputs) != sums",
        ("tests/test_guards.py", "-k", "changed_since"),
    ),
    Defense(
        "stable_after_sync_fingerprint",  # only the sample: a late write it skips passes
        "harness/workers/guards.py",
        "return fingerprint(outputs) != sums or not samples_unchanged(sampled, outputs)",
        "return not samples_unchanged(sampled, outputs)",
        ("tests/test_guards.py", "-k", "changed_since"),
    ),
    Defense(
        "stable_after_sync_false_alarm",  # broken the other way: every honest kernel fails
        "harness/workers/guards.py",
        "return fingerprint(outputs) != sums or not samples_unchanged(sampled, outputs)",
        "return True",
        ("tests/test_guards.py", "-k", "changed_since"),
    ),
    Defense(
        "inputs_unchanged",
        "harness/workers/guards.py",
        "    if not equal_nan(now, then):\n        return False\n    storage",
        "    return True\n    storage",
        (_corpus("redteam/cpu/p14_input_as_scratch.py"),),
    ),
    Defense(
        "input_guard_regions",
        "harness/workers/guards.py",
        "    for region in (head, tail):",
        "    for region in ():",
        ("tests/test_guards.py", "-k", "same_values"),
    ),
    Defense(
        "fresh_outputs",
        "harness/workers/timed_checks.py",
        "    if failure is not None:\n        raise failure",
        "    del failure",
        ("tests/test_guards.py::test_an_output_reusing_the_previous_calls_memory_fails",),
    ),
    Defense(
        "no_monkeypatching",
        "harness/workers/timed_checks.py",
        "    patched = guards.changed(before, guards.snapshot(job.reference_ops))",
        "    patched = []",
        ("tests/test_guards.py", "-k", "unpatched"),
    ),
    Defense(
        "no_pytorch_compute_table",
        "harness/workers/profiling.py",
        "    others = sorted({op for op in compute if op not in FAMILY_OF})",
        "    others: list[str] = []",
        ("tests/test_guards.py::test_pytorch_compute_table",),
    ),
    Defense(
        "no_pytorch_compute_every_call",  # the final profile sees the first case's shapes only
        "harness/workers/checked_case.py",
        "    if computes:",
        "    if False:",
        (_corpus("redteam/cpu/p02_fallback_on_untuned_shapes.py"),),
    ),
    Defense(
        "launches_own_kernel",
        "harness/workers/checked_case.py",
        "    if not sum(loader.calls.values()):",
        "    if False:",
        (_corpus("redteam/cpu/p01_pure_python_kernel_unused.py"),),
    ),
    # MISSED when added: on cpu an unwritten output holds stale or zeroed memory, which fails
    # correct_outputs anyway; only the finite_outputs symptom depends on the poison.
    Defense(
        "poisoned_memory",
        "harness/workers/guards.py",
        "            block = torch.full(shape, fill, dtype=dtype, device=device)",
        "            block = None",
        (_corpus("redteam/cpu/p04_noop_launch_uninitialized.py"),),
    ),
    # --- comparison and acceptance (harness/judge/tolerance.py, accept.py) -----------------------
    Defense(
        "tolerance_relative_norm",
        "harness/judge/tolerance.py",
        "    if rel_error > tol.rel_norm:",
        "    if False:",
        ("tests/test_tolerance.py",),
    ),
    Defense(
        "deterministic_outputs",
        "harness/judge/tolerance.py",
        "            self._same_as_first(name, produced)",
        "            pass",
        ("tests/test_tolerance.py", "-k", "repeated"),
    ),
    Defense(
        "tolerance_elementwise",
        "harness/judge/tolerance.py",
        "    if slack > tol.atol * scale:",
        "    if False:",
        ("tests/test_tolerance.py",),
    ),
    Defense(
        "finite_outputs",
        "harness/judge/tolerance.py",
        "    if nonfinite:",
        "    if False:",
        ("tests/test_tolerance.py",),
    ),
    Defense(
        "reduced_precision_bounded",  # a reference's forged precision cannot open the tolerance
        "harness/judge/precision.py",
        "min(FACTOR * precision.rel_norm, CAP.rel_norm)",
        "FACTOR * precision.rel_norm",
        ("tests/test_precision.py", "-k", "bounded"),
    ),
    Defense(
        "reduced_precision_same_draws",  # the strict run draws what the first run drew
        "harness/workers/reference.py",
        "                _set_random_state(random_state, self.on_cuda)\n",
        "",
        ("tests/test_precision.py", "-k", "draws_numbers"),
    ),
    Defense(
        "reduced_precision_to_the_comparator",  # the comparator holds to the same tolerance
        "harness/judge/comparator.py",
        '"precision": report.precision.model_dump() if report.precision else None,',
        '"precision": None,',
        ("tests/test_precision.py", "-k", "more_precise and recomputed"),
    ),
    Defense(
        "reduced_precision_factor",  # held to 3x the reference's own error, not more
        "harness/judge/precision.py",
        "FACTOR = 3.0",
        "FACTOR = 100.0",
        ("tests/test_precision.py", "-k", "rounding_further"),
    ),
    Defense(
        "no_profiler_before_timing",  # a profiler session leaves its process slower
        "harness/workers/candidate.py",
        '    alone = time_stand_ins(job, state, "alone", compiled)',
        '    _profile_reference(job, base)\n    alone = time_stand_ins(job, state, "alone", compiled)',
        (
            "tests/test_evaluator.py::test_the_timing_worker_runs_no_profiler_before_its_timing_ends",
        ),
    ),
    Defense(
        "loss_not_its_own_null_answer",  # broken the other way: every loss problem called weak
        "harness/problem/audit.py",
        "        if out.is_floating_point() and out.numel() > 1:",
        "        if out.is_floating_point() and out.numel():",
        ("tests/test_tolerance.py::test_a_loss_is_not_its_own_null_answer",),
    ),
    Defense(
        "audit_scales_each_output_once",  # a pass over GBs per null answer tried, not per case
        "harness/problem/audit.py",
        "            if not self._passes(answer(), outputs[index], functools.partial(rms, index)):",
        "            if not self._passes(answer(), outputs[index], None):",
        (
            "tests/test_tolerance.py::"
            "test_the_audit_reads_each_output_whole_once_per_case_for_its_scale",
        ),
    ),
    Defense(
        "outputs_read_back_in_chunks",  # whole-output float64 copies: 4x the output beside it
        "harness/workers/guards.py",
        '        step = CHUNK.get(flat.device.type, CHUNK["cpu"])',
        "        step = max(1, flat.numel())",
        (
            "tests/test_memory.py::test_reading_outputs_back_takes_a_chunk_not_four_times_the_output",
        ),
    ),
    Defense(
        "null_answers_expanded",  # full-size null answers: another output's memory per case
        "harness/problem/audit.py",
        "lambda out=out: _filled(out, float(out.mean())),",
        "lambda out=out: torch.full_like(out, float(out.mean())),",
        (
            "tests/test_memory.py::test_the_audit_refutes_null_answers_without_output_sized_copies_of_them",
        ),
    ),
    Defense(
        "variant_drawn_in_runs",  # one int64 index of every element: 2x the input beside it
        "harness/problem/variants.py",
        "    block = max(1, min(PICK_BLOCK, flat.numel() // 64))",
        "    block = 1",
        ("tests/test_memory.py::test_a_shape_variant_is_drawn_without_an_index_twice_the_input",),
    ),
    Defense(
        "audit_lets_cases_go",  # every case's outputs kept beside the next for nothing
        "harness/problem/audit.py",
        '        if self.cases < 2 or any(n.startswith("another seed") for n in self.passing):',
        "        if True:",
        ("tests/test_tolerance.py::test_the_audit_lets_a_case_go_once_no_null_answer_needs_it",),
    ),
    Defense(
        "harness_memory_named",  # the harness's OOM in the checks' worker: "the worker died"
        "harness/workers/candidate.py",
        "            except torch.OutOfMemoryError as err:  # the candidate's own calls raise CheckFailed",
        "            except ZeroDivisionError as err:",
        (
            "tests/test_memory.py::test_the_harness_running_out_of_memory_in_the_checks_worker_is_said_to_be_the_harness",
        ),
    ),
    Defense(
        "baseline_disturbance",
        "harness/judge/accept.py",
        "beyond=min(ratio, fastest_ratio) > allowed,",
        "beyond=False,",
        (
            "tests/test_accept.py::test_slowdown_table",
            "tests/test_accept.py::test_baseline_disturbance_tells_what_is_left_behind_from_interleaving",
        ),
    ),
    # --- a busy machine (issue 28: harness/workers/timers.py, harness/judge/busy.py, quiet.py) --
    Defense(
        "preempted_calls_left_out",
        "harness/judge/busy.py",
        "            if others_busy and stats.undisturbed is not None:",
        "            if False:",
        ("tests/test_busy.py", "-k", "left_out_only"),
    ),
    Defense(
        "preempted_calls_counted_on_an_idle_machine",  # a candidate would choose what is left out
        "harness/judge/busy.py",
        "            if others_busy and stats.undisturbed is not None:",
        "            if stats.undisturbed is not None:",
        ("tests/test_busy.py", "-k", "left_out_only"),
    ),
    Defense(
        "busy_windows_not_judged",
        "harness/judge/verdict.py",
        "    busy = busy_windows(result.timings)",
        "    busy: list[str] = []",
        ("tests/test_busy.py",),
    ),
    Defense(
        "busy_window_measured_again",
        "harness/judge/accept.py",
        "        if result.status is Status.unjudged and busy_left > 0:",
        "        if False:",
        ("tests/test_accept.py", "-k", "measured_again"),
    ),
    Defense(
        "bytecode_compile_isolated",
        "harness/sandbox/bytecode.py",
        """        [sys.executable, "-I", "-X", f"pycache_prefix={prefix}", "-m", "compileall", "-q", "-q",
         "-j", "0", str(folder)],
        cwd=prefix, env={"PATH": os.environ.get("PATH", os.defpath)}, check=False,""",
        """        [sys.executable, "-X", f"pycache_prefix={prefix}", "-m", "compileall", "-q", "-q",
         "-j", "0", str(folder)],
        env=os.environ, check=False,""",
        ("tests/test_bytecode.py", "-k", "pull_requests_compileall"),
    ),
    Defense(
        "compiled_baseline_shown_read_only",
        "harness/candidate_workers.py",
        "            view.read_only.append(Path(compiled[INDUCTOR_SEED]))",
        "            view.writable.append(Path(compiled[INDUCTOR_SEED]))",
        ("tests/test_evaluator.py", "-k", "cannot_write_the_compiled_baseline"),
    ),
    Defense(
        "workers_started_by_a_long_lived_thread",  # bwrap --die-with-parent: the thread's
        "harness/sandbox/spawner.py",
        "    _requests.put((arguments, done))\n    _ensure_running()\n    try:\n"
        "        return done.result()",
        "    process = subprocess.Popen(**arguments)\n    lifetime.register(process)\n"
        "    try:\n        return process",
        ("tests/test_spawner.py",),
    ),
    Defense(
        "prestarted_timing_waits_for_the_checks",  # harness/prestart.py
        "harness/workers/candidate.py",
        "    if job.await_go:",
        "    if False:",
        ("tests/test_prestart.py", "-k", "times_only_after_them"),
    ),
    Defense(
        "nightly_issue_kept_open_while_unjudged",
        "bot/nightly/issue.py",
        "        if not problems and unjudged and existing is not None:",
        "        if False:",
        ("tests/test_nightly_issue.py", "-k", "opened_kept_up_to_date"),
    ),
    Defense(
        "nightly_baseline_busy_not_judged",
        "harness/judge/baseline.py",
        "        if not busy:\n            return report",
        "        if True:\n            return report",
        ("tests/test_nightly_targets.py", "-k", "too_busy"),
    ),
    Defense(
        "nightly_kernel_busy_not_failed",
        "bot/nightly/measure.py",
        '    if result.status.value == "unjudged":',
        "    if False:",
        ("tests/test_nightly.py", "-k", "too_busy"),
    ),
    Defense(
        "builds_pause_while_timing",
        "harness/sandbox/quiet.py",
        "            for process in _state.builds:\n                _state.stopped += _stop_tree(process.pid)",
        "            pass",
        ("tests/test_quiet.py::test_a_build_tree_stops_while_a_window_is_open_and_goes_on_after",),
    ),
    Defense(
        "own_session_load_is_own",  # a candidate's child process would read as another's load
        "harness/workers/machine_load.py",
        "        if int(fields[3]) == session:",
        "        if int(fields[3]) == session and int(stat.parent.name) == os.getpid():",
        ("tests/test_machine_load.py",),
    ),
    Defense(
        "build_request_closes_window",
        "harness/sandbox/channel.py",
        '            self.close_windows()\n        if message.kind == "outputs":',
        '            pass\n        if message.kind == "outputs":',
        ("tests/test_quiet.py::test_a_build_asked_for_during_a_window_is_not_paused",),
    ),
    Defense(
        "paused_time_not_counted",
        "harness/sandbox/run.py",
        "            now -= quiet.paused_seconds() - paused_before",
        "            pass",
        ("tests/test_quiet.py::test_time_stopped_does_not_count_against_a_builds_limit",),
    ),
    # --- publish trusts only the event and GitHub (bot/pr/results.py, trust.py, publish.py,
    # markdown.py); verification settings from the base commit (bot/pr/base_config.py, pr.py) ---
    Defense(
        "publish_results_match_event",
        "bot/pr/results.py",
        '        expected["base_ref"] = event.pull.base_ref\n'
        '        expected["head_ref"] = event.pull.head_ref\n'
        '        expected["fork"] = event.pull.fork\n',
        "",
        ("tests/test_publish.py", "-k", "forged_artifact_naming or claiming_fork_false"),
    ),
    Defense(
        "publish_no_branch_for_a_fork",
        "bot/pr/trust.py",
        "    if event.pull.fork or facts.fork:",
        "    if False:",
        ("tests/test_publish.py", "-k", "forks_pull_request_gets_a_patch"),
    ),
    Defense(
        "publish_followup_on_the_approved_api_head",
        "bot/pr/trust.py",
        "    if facts.head_sha != event.pull.head_sha:",
        "    if False:",
        ("tests/test_publish.py", "-k", "head_moved_on"),
    ),
    Defense(
        "publish_followup_into_the_prs_own_branch",
        "bot/pr/trust.py",
        "    return Place(into=facts.head_ref, parent=facts.head_sha)",
        "    return Place(into=facts.base_ref, parent=facts.head_sha)",
        ("tests/test_publish.py", "-k", "followup_is_made_on_the_api_head"),
    ),
    Defense(
        "publish_own_run_url",
        "bot/pr/publish.py",
        "    results.run_url = env.run_url  # this job's own run, never the artifact's word",
        "    pass",
        ("tests/test_publish.py", "-k", "raw_markdown"),
    ),
    Defense(
        "publish_gates_kernels_again",
        "bot/pr/publish.py",
        "    outcome = PublishOutcome(refused=vet_kernels(results))",
        "    outcome = PublishOutcome()",
        ("tests/test_publish.py", "-k", "ungated_kernel"),
    ),
    Defense(
        "publish_native_gate_over_strings",
        "bot/pr/trust.py",
        '    return reasons + check_native("\\n".join(_strings(tree) if native is None else native), dtype)',
        "    return reasons",
        ("tests/test_publish.py", "-k", "ungated_kernel and native"),
    ),
    Defense(
        "publish_native_gate_unfollowed_sources",
        "bot/pr/trust.py",
        "    if any(_renames_load_inline(node) for node in nodes):\n        return None",
        "    if False:\n        return None",
        ("tests/test_publish.py", "-k", "cannot_be_followed"),
    ),
    Defense(
        "publish_review_threshold_from_the_base",
        "bot/pr/trust.py",
        "            review_above(row.result, threshold)",
        "            pass",
        ("tests/test_publish.py", "-k", "big_claim"),
    ),
    Defense(
        "results_numbers_checked",
        "bot/pr/results.py",
        "    _check_numbers(results, where)\n",
        "",
        ("tests/test_publish.py", "-k", "not_finite_or_contradict"),
    ),
    Defense(
        "results_identifiers_in_generated_code",
        "bot/pr/sources.py",
        "        if name is not None and (not name.isidentifier() or keyword.iskeyword(name)):",
        "        if False:",
        ("tests/test_publish.py", "-k", "go_into_the_followups_code"),
    ),
    Defense(
        "markdown_prose_escaped",
        "bot/markdown.py",
        '    return _PUNCTUATION.sub(r"\\\\\\1", _unlinked(one_line(text, limit)))',
        "    return one_line(text, limit)",
        ("tests/test_publish.py", "-k", "raw_markdown"),
    ),
    Defense(
        "markdown_table_cells_escaped",
        "bot/markdown.py",
        '        text = text.replace("\\\\", "\\\\\\\\").replace("|", "\\\\|")',
        "        pass",
        ("tests/test_comment.py", "-k", "untrusted_text"),
    ),
    Defense(
        "markdown_fence_longer_than_the_text",
        "bot/markdown.py",
        '    fence = "`" * max(3, longest + 1)',
        '    fence = "```"',
        ("tests/test_comment.py", "-k", "untrusted_text"),
    ),
    Defense(
        "base_eval_settings",
        "bot/pr/base_config.py",
        "    settings = BaseSettings(repo, base_sha, base.eval, judged, base.capture)",
        "    settings = BaseSettings(repo, base_sha, head.eval, judged, base.capture)",
        ("tests/test_base_config.py", "-k", "eval_settings_are_the_base"),
    ),
    Defense(
        "base_target_tolerances",
        "bot/pr/base_config.py",
        "    return problem.model_copy(update=changes) if changes else problem",
        "    return problem",
        ("tests/test_base_config.py", "-k", "tolerance"),
    ),
    Defense(
        "base_llm_table_unchanged",
        "bot/pr/base_config.py",
        '    if (base_table or {}).get("llm", {}) != (head_table or {}).get("llm", {}):',
        "    if False:",
        ("tests/test_base_config.py", "-k", "llm_key"),
    ),
    Defense(
        "measure_runs_with_the_base_eval",
        "bot/pr/flow.py",
        '    return options.model_copy(update={"eval_config": settings.eval, "settings": base}), hold',
        '    return options.model_copy(update={"settings": base}), hold',
        ("tests/test_base_config.py", "-k", "measure_runs_with_the_base"),
    ),
    # --- prompts and spend caps (agents/untrusted.py, harness/sandbox/redact.py, agents/loop.py,
    # agents/search/config.py, agents/team.py, agents/search/budget.py, agents/llm/completion.py;
    # issue 22 item 8) ------------------------------------------------------------------------
    Defense(
        "prompt_data_blocks",  # PR text spliced into the prompt as it is
        "agents/untrusted.py",
        '    return render("data", values).strip("\\n")',
        "    return text",
        (
            "tests/test_untrusted.py::test_an_injected_docstring_is_only_inside_data_blocks_in_every_roles_prompt",
        ),
    ),
    Defense(
        "data_block_id_redraw",  # a text holding the closing line ends its block
        "agents/untrusted.py",
        "    while block_id in text:",
        "    while False:",
        ("tests/test_untrusted.py::test_a_source_holding_the_closing_line_cannot_end_its_block",),
    ),
    Defense(
        "data_block_long_fence",
        "agents/untrusted.py",
        '"fence": "`" * max(3, longest + 1),',
        '"fence": "```",',
        ("tests/test_untrusted.py::test_a_data_block_holds_its_text_whole_behind_a_longer_fence",),
    ),
    Defense(
        "scrub_secret_shapes",
        "harness/sandbox/redact.py",
        "    text = _SHAPES.sub(MARKER, text)",
        "    text = text",
        ("tests/test_untrusted.py", "-k", "secret_shapes"),
    ),
    Defense(
        "scrub_secret_assignments",
        "harness/sandbox/redact.py",
        "    return _scrub_assignments(text)",
        "    return text",
        ("tests/test_untrusted.py", "-k", "secret_shapes"),
    ),
    Defense(
        "scrub_pem_blocks",
        "harness/sandbox/redact.py",
        "    text = _scrub_pem(text)",
        "    text = text",
        ("tests/test_untrusted.py", "-k", "secret_shapes"),
    ),
    Defense(
        "scrub_parent_secret_values",  # a key read from /proc/<ppid>/environ, any shape
        "harness/sandbox/redact.py",
        "        text = text.replace(value, MARKER)",
        "        text = text",
        ("tests/test_untrusted.py", "-k", "secret_shapes"),
    ),
    Defense(
        "scrub_verdicts_into_tree",  # worker logs into the trajectory and the report
        "agents/loop.py",
        "child.result = scrub_record(evaluator.evaluate(problem, candidate))",
        "child.result = evaluator.evaluate(problem, candidate)",
        (
            "tests/test_untrusted.py::test_a_worker_log_with_keys_reaches_no_prompt_and_no_trajectory",
            "tests/test_agent_loop.py::test_a_worker_log_with_keys_reaches_no_prompt_trajectory_or_report",
        ),
    ),
    Defense(
        "scrub_replies_into_tree",  # model replies into the trajectory
        "agents/loop.py",
        "calls = [scrub_record(call) for call in proposal.calls]",
        "calls = list(proposal.calls)",
        (
            "tests/test_untrusted.py::test_a_worker_log_with_keys_reaches_no_prompt_and_no_trajectory",
        ),
    ),
    Defense(
        "scrub_before_trim",  # a cut inside a key leaves a head too short to recognise
        "agents/context.py",
        "    window = scrub_record(window)",
        "    pass",
        ("tests/test_untrusted.py::test_no_secret_reaches_a_prompt_from_any_other_text",),
    ),
    Defense(
        "default_cost_cap",
        "agents/search/config.py",
        "        default=DEFAULT_MAX_COST_USD,",
        "        default=None,",
        ("tests/test_agent_loop.py::test_the_default_cost_cap_stops_the_scripted_model",),
    ),
    Defense(
        "spend_cap_per_call",  # only checked between steps: a step's retries pass the cap
        "agents/team.py",
        "if budget and (cap := budget.spend_cap(Spend.of(proposal.calls))):",
        "if False and (cap := budget.spend_cap(Spend.of(proposal.calls))):",
        ("tests/test_agent_loop.py::test_the_default_cost_cap_stops_the_scripted_model",),
    ),
    Defense(
        "run_spend_cap",
        "agents/search/budget.py",
        "if self.run_max_cost_usd is not None and run_cost >= self.run_max_cost_usd:",
        "if False:",
        (
            "tests/test_search.py::test_spend_caps_per_target_per_run_and_for_a_model_without_a_price",
        ),
    ),
    Defense(
        "usage_upper_bound",  # a server without usage: tokens counted as 0, no cap holds
        "agents/llm/completion.py",
        """        prompt_tokens, completion_tokens = usage_upper_bound(
            params["messages"], text, output_limit(params)
        )""",
        "        prompt_tokens, completion_tokens = 0, 0",
        (
            "tests/test_agent_loop.py::test_without_usage_an_unpriced_model_is_stopped_by_the_token_cap",
        ),
    ),
    # --- native gate for the class (issue 22: harness/native_*.py, symbols.py) -------------
    Defense(
        "native_include_roots",
        "harness/static/native_directives.py",
        "            reasons += header_problems(include.header, include.line)",
        "            pass",
        ("tests/test_native_gate.py", "-k", "includes_outside"),
    ),
    Defense(
        "native_state_rule",
        "harness/static/native.py",
        "directive_problems(lexed) + state_problems(lexed) + _asm_reasons(lexed)",
        "directive_problems(lexed) + _asm_reasons(lexed)",
        ("tests/test_native_gate.py", "-k", "state_across"),
    ),
    Defense(
        "native_network_names",
        "harness/static/native.py",
        'r"\\b(c10d|gloo|tensorpipe|TCPStore\\w*|FileStore|HashStore|PrefixStore|ProcessGroup\\w*|"',
        'r"\\b(kp_never_named|"',
        ("tests/test_native_gate.py", "-k", "network_files"),
    ),
    Defense(
        "symbols_distributed_families",
        "harness/static/symbols.py",
        'r"c10d::|torch::distributed::|gloo::|tensorpipe::|torch::jit::|caffe2::serialize::|"',
        'r"kp_never_named::|"',
        ("tests/test_native_gate.py::test_the_built_objects_show_what_the_source_hid",),
    ),
    Defense(
        "symbols_writable_data",
        "harness/static/symbols.py",
        "        + writable_data_problems(host_cxx)",
        "        + []",
        ("tests/test_native_gate.py::test_the_built_objects_show_what_the_source_hid",),
    ),
    Defense(
        "native_gate_linear_time",
        "harness/static/native.py",
        "    code = joined(lexed)",
        '    code = re.sub(r"\\s*::\\s*", "::", source)',
        ("tests/test_native_gate.py", "-k", "adversarial"),
    ),
    # --- jobs and tokens (bot/nightly/results.py, nightly.py, cli/nightly_jobs.py,
    # runner_trust.py; action.yml and the workflows) ------------------------------------------
    Defense(
        "nightly_results_unknown_fields",  # a branch or an issue named by the artifact
        "bot/nightly/results.py",
        '    model_config = ConfigDict(extra="forbid")',
        '    model_config = ConfigDict(extra="ignore")',
        ("tests/test_nightly_jobs.py", "-k", "names_a_branch or names_an_issue"),
    ),
    Defense(
        "nightly_results_size_cap",
        "bot/artifact.py",
        "    if size > max_bytes:",
        "    if False:",
        ("tests/test_nightly_jobs.py", "-k", "oversized"),
    ),
    Defense(
        "nightly_results_same_repository",
        "bot/nightly/results.py",
        "    if results.repository != expected.repository:",
        "    if False:",
        ("tests/test_nightly_jobs.py", "-k", "another_repository"),
    ),
    Defense(
        "nightly_results_same_commit",
        "bot/nightly/results.py",
        "    if results.commit != expected.commit or not COMMIT.fullmatch(results.commit):",
        "    if False:",
        ("tests/test_nightly_jobs.py", "-k", "another_commit"),
    ),
    Defense(
        "nightly_results_same_night",
        "bot/nightly/results.py",
        "    if not -2 <= (night - expected.today).days <= 1:",
        "    if False:",
        ("tests/test_nightly_jobs.py", "-k", "another_night"),
    ),
    Defense(
        "nightly_results_rows_checked",  # names, records' commit and night, statuses, texts
        "bot/nightly/results.py",
        "        problem = _row_problem(row, results)",
        "        problem = None",
        ("tests/test_nightly_jobs.py", "-k", "forged and not names and not another_re"),
    ),
    Defense(
        "nightly_results_row_cap",
        "bot/nightly/results.py",
        "    if len(results.rows) > MAX_ROWS:",
        "    if False:",
        ("tests/test_nightly_jobs.py", "-k", "too_many_rows"),
    ),
    Defense(
        "nightly_run_url_from_publish",
        "bot/cli/nightly_jobs.py",
        "                row.record.run_url = env.run_url",
        "                pass",
        ("tests/test_nightly_jobs.py::test_publish_writes_the_night_where_its_own_settings_say",),
    ),
    Defense(
        "nightly_markdown_as_code",
        "bot/nightly/run.py",
        '    return f"{fence}{pad}{flat}{pad}{fence}"',
        "    return flat",
        ("tests/test_nightly_jobs.py::test_markdown_in_the_artifact_is_shown_as_code",),
    ),
    Defense(
        "nightly_table_pipes_escaped",
        "bot/nightly/run.py",
        "    if table:  # GFM splits cells at any unescaped pipe, inside code too",
        "    if False:",
        ("tests/test_nightly_jobs.py::test_markdown_in_the_artifact_is_shown_as_code",),
    ),
    Defense(
        "fork_needs_ephemeral_runner",
        "bot/pr/runner_trust.py",
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
    # --- blame that is right (issue 23: harness/sandbox/worker.py, blame.py, verdict.py,
    # worker_reference.py, reference_forward.py) -----------------------------------------------
    Defense(
        "harness_bug_named",  # kernelpilot's own exception: the candidate's "worker died"
        "harness/sandbox/worker.py",
        "        if not raised_by_kernelpilot(err, _user_files(job, job_dir)):",
        "        if True:",
        ("tests/test_blame.py", "-k", "harness_bug_in_the_checks_worker"),
    ),
    Defense(
        "network_line_only_when_checked",  # a dead worker: a false "no private namespace"
        "harness/sandbox/jobs.py",
        "    network_isolated: bool | None = Field(\n        default=None,",
        "    network_isolated: bool | None = Field(\n        default=False,",
        ("tests/test_channel.py", "-k", "network"),
    ),
    Defense(
        "verified_dtypes",  # complex inputs: the guard fill crashed in the candidate's worker
        "harness/workers/reference.py",
        "            check_dtypes(inputs, ",
        "            0 and check_dtypes(inputs, ",
        ("tests/test_blame.py", "-k", "complex"),
    ),
    Defense(
        "reference_leaves_inputs_unchanged",  # blamed on the input factory's randomness
        "harness/workers/reference.py",
        "            check_unchanged(inputs, before, self.forward_name, self.where)",
        "            pass",
        ("tests/test_blame.py", "-k", "in_place"),
    ),
    # --- how a run ends (harness/sandbox/lifetime.py, harness/sandbox/run.py, bot/cli/out_dir.py) -------
    Defense(
        "run_ends_its_workers",
        "harness/sandbox/lifetime.py",
        "    for process in list(_run.processes - (outer or set())):\n        release(process)",
        "    pass",
        ("tests/test_lifetime.py",),
    ),
    Defense(
        "run_removes_its_scratch",
        "harness/sandbox/lifetime.py",
        "        shutil.rmtree(root, ignore_errors=True)",
        "        pass",
        ("tests/test_lifetime.py",),
    ),
    Defense(
        "lost_interrupt_not_printed",
        "harness/sandbox/lifetime.py",
        "        if not isinstance(unraisable.exc_value, Interrupted):\n            hook(unraisable)",
        "        hook(unraisable)",
        ("tests/test_lifetime.py",),
    ),
    Defense(
        "out_dir_locked",
        "bot/cli/out_dir.py",
        "        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)",
        "        pass",
        ("tests/test_out_dir.py",),
    ),
    Defense(
        "run_limit_excludes_builds",
        "harness/sandbox/run.py",
        "                ends += time.monotonic() - asked",
        "                pass",
        ("tests/test_worker_limits.py", "-k", "slow_build"),
    ),
    Defense(
        "candidate_runs_end_at_the_deadline",
        "harness/sandbox/run.py",
        "        if deadline is not None and time.monotonic() > deadline and deadline < ends:",
        "        if False:",
        ("tests/test_worker_limits.py", "-k", "deadline or max_time"),
    ),
    # --- module shapes and captured targets (harness/workers/calls.py, checked_case.py,
    # timed_checks.py, harness/capture/) ----------------------------------------------------------
    Defense(
        "output_form_checked",
        "harness/workers/checked_case.py",
        "    if form != spec.output_form:",
        "    if False:",
        ("tests/test_module_shapes.py", "-k", "another_form"),
    ),
    Defense(
        "captured_calls_checked",
        "harness/problem/plan.py",
        "        for c in range(captured_calls)",
        "        for c in range(0)",
        ("tests/test_capture.py", "-k", "other_captured_calls"),
    ),
    Defense(
        "output_form_timed",
        "harness/workers/timed_checks.py",
        "        if form != eager_form:",
        "        if False:",
        ("tests/test_module_shapes.py", "-k", "timed_call_in_another_form"),
    ),
    Defense(
        "freeze_expression_names",
        "harness/capture/freeze.py",
        "        if isinstance(node, ast.Name) and node.id not in names:",
        "        if False:",
        ("tests/test_capture.py", "-k", "hostile"),
    ),
    Defense(
        "freeze_expression_calls",
        "harness/capture/freeze.py",
        "        if isinstance(node, ast.Call) and not isinstance(node.func, ast.Name):",
        "        if False:",
        ("tests/test_capture.py", "-k", "hostile"),
    ),
    Defense(
        "offline_guards_emitted",
        "agents/offline/emit.py",
        "    if not checks:\n        return []\n    if wrote is not None:",
        "    if True:\n        return []\n    if wrote is not None:",
        ("tests/test_offline_guards_run.py",),
    ),
    Defense(
        "offline_hinted_conditions",  # a branch a hinted trace took, not checked at run time
        "agents/offline/guards.py",
        "            where.append(Check(template, (node,)))",
        "            pass",
        ("tests/test_offline_guards_run.py", "-k", "knowing"),
    ),
    Defense(
        "offline_none_left_out_fixed",  # an argument left at None traced as a proxy (not None)
        "agents/offline/arguments.py",
        "        name: None for name in arguments if name not in given and arguments[name] is None",
        "        name: None for name in arguments if False",
        ("tests/test_offline_guards.py", "-k", "mask_left_at_none or keyword"),
    ),
    Defense(
        "gate_bases_torch_nn_layers_only",  # a candidate's class derives from any torch.nn class
        "harness/static/python.py",
        '            and value.__module__.startswith("torch.nn.modules.")',
        "            and True",
        ("tests/test_gate.py", "-k", "rejects"),
    ),
    Defense(
        "gate_attributes_on_self_only",  # sets an attribute of an argument or a call's result
        "harness/static/python_scope.py",
        "            if isinstance(target, ast.Attribute) and (root is None or root != owner):",
        "            if False:",
        ("tests/test_gate.py", "-k", "rejects"),
    ),
    Defense(
        "gate_self_bound_only_as_parameter",  # `self = nn.functional` in __init__, then self.gelu set
        "harness/static/python.py",
        '        if node.id == "self" and not isinstance(node.ctx, ast.Load):',
        "        if False:",
        ("tests/test_gate.py", "-k", "rejects"),
    ),
    Defense(
        "gate_arguments_are_shared",  # a module-level cache filled through a function's argument
        "harness/static/python_scope.py",
        "        return name in aliases or not local or (self.stateless and name in parameters)",
        "        return name in aliases or not local",
        ("tests/test_gate.py", "-k", "rejects"),
    ),
    Defense(
        "gate_init_only_on_bases",  # a shared object's constructor run again in forward
        "harness/static/python.py",
        '        if _is_dunder(name) and (name != "__init__" or not self._is_base_init(node.value)):',
        '        if _is_dunder(name) and name != "__init__":',
        ("tests/test_gate.py", "-k", "rejects"),
    ),
    Defense(
        "gate_class_body_imports_are_members",  # `from typing import cast as load_state_dict`
        "harness/static/python.py",
        '            for name in {getattr(item, "name", None), *bound_names(item)} - {None}:',
        '            for name in {getattr(item, "name", None)} - {None}:',
        ("tests/test_gate.py", "-k", "rejects"),
    ),
    Defense(
        "gate_import_aliases_checked",  # `import torch as self`, an import bound to a dunder
        "harness/static/python.py",
        '        if bound == "self" or _is_dunder(bound):',
        "        if False:",
        ("tests/test_gate.py", "-k", "rejects"),
    ),
    Defense(
        "gate_library_names_only",  # any name of einops imported (asnumpy, its backends)
        "harness/static/python.py",
        "                if alias.name not in LIBRARY_NAMES[module]:",
        "                if False:",
        ("tests/test_gate.py", "-k", "rejects"),
    ),
    Defense(
        "offline_einops_sees_proxies",  # einops refuses the hinted trace's proxies
        "agents/offline/hinted.py",
        "    backends._type2backend[_HintedProxy] = backends.TorchBackend()",
        "    pass",
        ("tests/test_offline_einops.py", "-k", "gate_accepts"),
    ),
    Defense(
        "offline_library_layers_called",  # einops' Rearrange traced into: its dict of recipes
        "agents/offline/trace.py",
        "        library_layer = kind.__name__ in LIBRARY_NAMES.get(kind.__module__, ())",
        "        library_layer = False",
        ("tests/test_offline_einops.py", "-k", "layer_is_called"),
    ),
    Defense(
        "init_copy_bases_through_nn",  # `class F(Module)` copied as written: the gate refuses it
        "agents/offline/init_copy.py",
        "                node.bases[index] = ast.copy_location(written, base)",
        "                pass",
        ("tests/test_offline_einops.py", "-k", "gate_accepts"),
    ),
    Defense(
        "uninitialized_weights_drawn",  # torch.empty weights left as the memory held them
        "harness/problem/uninitialized.py",
        "    fill_uninitialized(module, seed)",
        "    pass",
        ("tests/test_uninitialized.py",),
    ),
    Defense(
        "guess_inputs_of_several_kinds",  # every input of a forward guessed as one kind
        "harness/capture/guess.py",
        "itertools.chain(same, mixed if count > 1 else ())",
        "itertools.chain(same, ())",
        ("tests/test_capture_guess.py", "-k", "two_kinds"),
    ),
    Defense(
        "dropin_cache_hash_checked",
        "bot/pr/shipped/kernel_cache.py",
        'matches = record["key"] == folder.name and _sha256(library) == record["sha256"]',
        'matches = record["key"] == folder.name',
        ("tests/test_followup_module.py", "-k", "cached_library_that_changed"),
    ),
    Defense(
        "capture_settings_from_the_base",
        "bot/pr/flow.py",
        '    base = options.settings.model_copy(update={"capture": settings.capture})',
        "    base = options.settings",
        ("tests/test_base_config.py", "-k", "captures_with_the_base"),
    ),
    Defense(
        "followup_init_imports_own_package",
        "bot/pr/sources.py",
        '            if module != ".".join(own) and not within:',
        "            if False:",
        ("tests/test_publish.py", "-k", "forged_constructor"),
    ),
    Defense(
        "followup_init_call_literals",
        "bot/pr/sources.py",
        "            if safe_expression(self.init_call, names) is None:",
        "            if False:",
        ("tests/test_publish.py", "-k", "forged_constructor"),
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
