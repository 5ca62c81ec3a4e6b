"""``python -m bench real-repos``: kernelpilot on public repositories of different kinds, as a
new user meets it: a pull request changes a module, nothing is configured (nanoGPT also with
one capture line, for its real sizes), and ``review`` runs the whole flow.

Per repository: a clone of a local mirror (``--mirrors DIR``: ``owner+name/repo`` git folders,
as ``fetch`` leaves them; never committed here), its HEAD as the base, the pull request's edit
committed on a branch, then ``review_local`` with the offline proposer. Recorded: the changed
modules, how many got a target with zero configuration (captured from the tests and examples,
or guessed where nothing builds them), how many were
verified, their speedups vs eager and torch.compile, the time taken; then the follow-up's files
written into the clone and its generated test run there (inference and two training steps).

Extra packages the repositories import (einops; numba, tiktoken, tqdm, more-itertools for
whisper) must be installed in kernelpilot's environment: its workers run that interpreter.
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import click

from bench.results_format import BenchmarkRecord, finish, new_record, out_option, write_record


@dataclass(frozen=True)
class PullRequest:
    """A repository and the change its pull request makes."""

    name: str
    mirror: str  # owner+name
    kind: str
    path: str
    old: str
    new: str
    added: dict[str, str] = field(default_factory=dict)  # files the pull request adds
    base_files: dict[str, str] = field(default_factory=dict)  # configuration already there


NEW_GELU_MLP = """    def forward(self, x):
        x = self.c_fc(x)
        x = 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
        x = self.c_proj(x)
        x = self.dropout(x)
        return x
"""
OLD_GELU_MLP = """    def forward(self, x):
        x = self.c_fc(x)
        x = self.gelu(x)
        x = self.c_proj(x)
        x = self.dropout(x)
        return x
"""
WHISPER_TEST = """import torch

from whisper.model import ResidualAttentionBlock


def test_block_keeps_the_shape():
    block = ResidualAttentionBlock(SIZE, 6)
    x = torch.randn(BATCH, 1500, SIZE)
    assert block(x).shape == x.shape
"""


def pull_requests(device: str) -> list[PullRequest]:
    """The pull requests; on cuda the captured sizes are a real training step's."""
    rows, width = ("1024", "8") if device == "cuda" else ("64", "2")
    # bench.py calls torch.cuda.synchronize() on its plain path: on cpu its profiled path runs
    capture = (
        f"python bench.py --device={device} --real_data=False --compile=False "
        f"--profile={device == 'cpu'} --batch_size={width} --block_size={rows}"
    )
    return [
        PullRequest(
            "nanoGPT (zero config)",
            "karpathy+nanoGPT",
            "GPT training",
            "model.py",
            OLD_GELU_MLP,
            NEW_GELU_MLP,
        ),
        PullRequest(
            "nanoGPT (one capture line)",
            "karpathy+nanoGPT",
            "GPT training",
            "model.py",
            OLD_GELU_MLP,
            NEW_GELU_MLP,
            base_files={"pyproject.toml": f'[tool.kernelpilot]\ncapture = "{capture}"\n'},
        ),
        PullRequest(
            "vit-pytorch",
            "lucidrains+vit-pytorch",
            "vision blocks",
            "vit_pytorch/vit.py",
            "            nn.GELU(),\n            nn.Dropout(dropout),\n            nn.Linear(hidden_dim, dim),",
            "            nn.GELU(approximate='tanh'),\n            nn.Dropout(dropout),\n"
            "            nn.Linear(hidden_dim, dim),",
        ),
        PullRequest(
            "whisper (zero config)",  # its own tests build no model: the block is guessed
            "openai+whisper",
            "audio model blocks",
            "whisper/model.py",
            "            Linear(n_state, n_mlp), nn.GELU(), Linear(n_mlp, n_state)",
            '            Linear(n_state, n_mlp), nn.GELU(approximate="tanh"), Linear(n_mlp, n_state)',
        ),
        PullRequest(
            "whisper (the pull request adds a test)",
            "openai+whisper",
            "audio model blocks",
            "whisper/model.py",
            "            Linear(n_state, n_mlp), nn.GELU(), Linear(n_mlp, n_state)",
            '            Linear(n_state, n_mlp), nn.GELU(approximate="tanh"), Linear(n_mlp, n_state)',
            added={
                "tests/test_model_blocks.py": WHISPER_TEST.replace("SIZE", "384").replace(
                    "BATCH", "4" if device == "cuda" else "1"
                )
            },
        ),
    ]


def git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com",
           "PATH": "/usr/bin:/bin"}  # fmt: skip
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise click.ClickException(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def prepare(pull: PullRequest, mirrors: Path, work: Path) -> Path:
    """The clone at the pull request's head (branch ``change``), its base on ``main``."""
    repo = work / pull.name.split()[0]
    if repo.exists():
        subprocess.run(["rm", "-rf", str(repo)], check=True)
    repo.mkdir(parents=True)
    git(repo, "init", "--quiet", "--initial-branch=main")
    _copy_head(mirrors / pull.mirror / "repo", repo)
    for name, text in pull.base_files.items():
        (repo / name).write_text(text)
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "--allow-empty", "-m", "base")
    git(repo, "checkout", "--quiet", "-b", "change")
    source = (repo / pull.path).read_text()
    if source.count(pull.old) != 1:
        raise click.ClickException(f"{pull.name}: the edit's text is not in {pull.path} once")
    (repo / pull.path).write_text(source.replace(pull.old, pull.new))
    for name, text in pull.added.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "the pull request")
    return repo


def _copy_head(mirror: Path, repo: Path) -> None:
    """The mirror's HEAD files into ``repo``: those the mirror holds (its largest files, images
    mostly, may be absent from it)."""
    listing = git(mirror, "ls-tree", "-r", "-z", "HEAD").split("\0")
    for entry in filter(None, listing):
        meta, path = entry.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind != "blob" or mode not in ("100644", "100755"):
            continue
        done = subprocess.run(["git", "cat-file", "blob", sha], cwd=mirror, capture_output=True)
        if done.returncode == 0:
            target = repo / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(done.stdout)


def review(pull: PullRequest, repo: Path, device: str, out: Path) -> dict:
    from bot.pr.flow import review_local
    from bot.run import RunOptions
    from bot.settings import load_settings

    options = RunOptions(device=device, settings=load_settings(repo), out_dir=out, llm="offline")
    started = time.monotonic()
    results = review_local(repo, "main", "change", options, lambda line: print(f"  {line}"))
    seconds = time.monotonic() - started
    changes = results.changes
    assert changes is not None
    rows = results.report.targets
    verified = [row for row in rows if row.result is not None and row.result.status.value == "ok"]
    return {
        "repository": pull.name,
        "kind": pull.kind,
        "changed_modules": len(changes.modules),
        "zero_config_targets": sum(
            m.target_source in ("capture", "guess") for m in changes.modules
        ),
        "configured_targets": sum(
            m.target_source in ("config", "get_inputs") for m in changes.modules
        ),
        "without_target": len(changes.unconfigured()),
        "verified": len(verified),
        "offered": sum(row.improved for row in rows),
        "targets": [_target(row) for row in rows],
        "notes": [
            f"{m.path}:{m.class_name}: {m.capture_note}" for m in changes.modules if m.capture_note
        ][:20],
        "seconds": round(seconds, 1),
        "followup_test": followup_test(results, repo),
    }


def _target(row) -> dict:
    result = row.result
    return {
        "target": row.target,
        "status": row.status.value,
        "inputs": result.input_summary if result else "",
        "vs_eager": _round(result.speedup_vs_eager) if result else None,
        "vs_compile": _round(result.speedup_vs_compile) if result else None,
        "reason": (row.reason or (result.reason if result else ""))[:300],
    }


def followup_test(results, repo: Path) -> str:
    """The follow-up's files written into the clone, its generated tests run there."""
    from bot.pr.followup import build_followup
    from bot.pr.local_followup import write_followup

    followup = build_followup(results, results.test_dir)
    if followup is None:
        return "no follow-up (no faster kernel)"
    write_followup(followup, repo, force=True)
    tests = [f.path for f in followup.files if Path(f.path).name.startswith("test_")]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=repo, capture_output=True, text=True,
    )  # fmt: skip
    lines = done.stdout.strip().splitlines() or ["(no output)"]
    if done.returncode != 0:  # what failed, for the record
        (repo.parent / f"followup-{repo.name}.log").write_text(done.stdout + done.stderr)
        print(done.stdout[-6000:], file=sys.stderr)
    return f"exit {done.returncode}: {lines[-1]}"


def _round(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 2)


def table(record: BenchmarkRecord) -> str:
    lines = [
        "| repository | kind | changed | zero-config targets | verified | offered | best vs eager | "
        "best vs compile | time | follow-up test |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in record.rows:
        eager = max((t["vs_eager"] or 0 for t in row["targets"]), default=0)
        compiled = max((t["vs_compile"] or 0 for t in row["targets"]), default=0)
        lines.append(
            f"| {row['repository']} | {row['kind']} | {row['changed_modules']} | "
            f"{row['zero_config_targets']} | {row['verified']} | {row['offered']} | "
            f"{eager:.2f}x | {compiled:.2f}x | {row['seconds']:.0f} s | {row['followup_test']} |"
        )
    return "\n".join(lines)


@click.command(name="real-repos")
@click.option(
    "--mirrors", type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=Path("/work/.mirror"), show_default=True,
    help="Folder of owner+name/repo git mirrors (karpathy+nanoGPT, lucidrains+vit-pytorch, "
    "openai+whisper).",
)  # fmt: skip
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--only", multiple=True, help="Run only these repositories (by name prefix).")
@out_option
def cli(mirrors: Path, device: str, only: tuple[str, ...], out: Path | None) -> None:
    """kernelpilot review on pull requests to public repositories, with zero configuration."""
    record = new_record("real-repos", device)
    with tempfile.TemporaryDirectory(prefix="kp-real-repos-") as folder:
        for pull in pull_requests(device):
            if only and not any(pull.name.startswith(prefix) for prefix in only):
                continue
            print(f"{pull.name}: {pull.kind}", file=sys.stderr)
            repo = prepare(pull, mirrors, Path(folder))
            record.rows.append(review(pull, repo, device, Path(folder) / f"out-{len(record.rows)}"))
            print(table(record), file=sys.stderr)
            if out is not None:  # a run stopped later keeps the repositories it finished
                write_record(record, out)
    finish(record, out, table)
