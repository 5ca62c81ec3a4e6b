"""The nightly run on a GPU over a repository that ships a kernel and configures the examples: a
real git checkout whose follow-up (from `kernelpilot review` on the device) is merged, and
kernelpilot's examples (examples/fused_gelu_block.py, examples/swiglu.py,
examples/repo_style/blocks.py:ResidualGate) configured as targets that ship no kernel. Two
nights re-verify and time the kernel and time eager and torch.compile of each example; then the
kernel's module changes and one example is deleted, and the third night reports the kernel stale
and the example missing (the other examples still timed). The history, each night's table and
the plots of the kernel and of one example are saved under --out.

    python3 bench/gpu_nightly.py --out bench/results/<device>-<date>-nightly
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gpu_pr_flow import PROJECT, SIZE  # noqa: E402
from bot.pr.followup import build_followup  # noqa: E402
from bot.pr.results import PullResults  # noqa: E402
from tests.gitrepo import commit, git  # noqa: E402
from tests.prflow import CHANGED, MODULE, Project  # noqa: E402

BENCHMARK = "kernel:models/act_kernelpilot.py"
EXAMPLES = {  # where each example goes in the checkout: its [[tool.kernelpilot.targets]] entry
    "examples/fused_gelu_block.py": 'module = "examples/fused_gelu_block.py:Model"\n',
    "examples/swiglu.py": 'module = "examples/swiglu.py:Model"\n',
    "examples/repo_style/blocks.py": 'module = "examples/repo_style/blocks.py:ResidualGate"\n'
    "init_args = [1024]\n"
    'inputs = "examples/repo_style/blocks.py:make_inputs"\n',
}
DELETED = "examples/swiglu.py"  # gone before the third night: reported missing
TARGET = "target:examples/repo_style/blocks.py:ResidualGate"
EXPECTED = {  # each night's rows: the kernel, then the examples in EXAMPLES' order
    "night1": ["ok", "ok", "ok", "ok"],
    "night2": ["ok", "ok", "ok", "ok"],
    "stale": ["stale", "ok", "missing", "ok"],
}


def cli(*args: str, cwd: Path, log: Path) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "OPENAI_"))}
    done = subprocess.run(
        [sys.executable, "-c", "from bot.cli import main; main()", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    log.write_text(done.stdout + done.stderr)
    print(f"{' '.join(args[:1])}: exit {done.returncode}")
    return done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    codes: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "checkout"
        root.mkdir()
        config = PROJECT.format(device=args.device, compile=str(args.device == "cuda").lower())
        Project(root, config, MODULE.replace("[torch.randn(32, 64, 1024)]", SIZE),
              CHANGED.replace("[torch.randn(32, 64, 1024)]", SIZE))  # fmt: skip  # the checkout at root
        codes["review"] = cli("review", "--base", "main", "--seed", "1", "--out",
                              str(Path(tmp) / "review"), cwd=root, log=out / "review.log")  # fmt: skip
        results = PullResults.model_validate_json((Path(tmp) / "review/results.json").read_text())
        followup = build_followup(results, results.test_dir)
        if followup is None:
            print("no faster kernel to ship: nothing to benchmark at night")
            return 1
        git(root, "checkout", "-q", "main")
        git(root, "merge", "-q", "--ff-only", "feature")
        commit(root, {f.path: f.content for f in followup.files}, "merge the follow-up")
        here = Path(__file__).resolve().parents[1]
        entries = "".join(f"[[tool.kernelpilot.targets]]\n{entry}" for entry in EXAMPLES.values())
        commit(root, {"pyproject.toml": (root / "pyproject.toml").read_text() + entries,
                      **{path: (here / path).read_text() for path in EXAMPLES}},
               "configure the examples")  # fmt: skip
        history = out / "history"
        shutil.rmtree(history, ignore_errors=True)
        for night in ("night1", "night2"):
            codes[night] = cli("nightly", "--history-dir", str(history), "--out", str(out / night),
                               "--seed", "2", cwd=root, log=out / f"{night}.log")  # fmt: skip
        retuned = CHANGED.replace("0.5 * y * y", "0.3 * y * y").replace(
            "[torch.randn(32, 64, 1024)]", SIZE
        )
        commit(root, {"models/act.py": retuned, DELETED: None},
               "retune the activation, drop an example")  # fmt: skip
        codes["stale"] = cli("nightly", "--history-dir", str(history), "--out", str(out / "stale"),
                             cwd=root, log=out / "stale.log")  # fmt: skip
        codes["history"] = cli("history", BENCHMARK, "--history-dir", str(history), "--plot",
                               str(out / "history.png"), cwd=root, log=out / "history.log")  # fmt: skip
        codes["history_target"] = cli("history", TARGET, "--history-dir", str(history), "--plot",
                                      str(out / "history-target.png"), cwd=root,
                                      log=out / "history-target.log")  # fmt: skip
    statuses = {night: _statuses(out / night / "nightly.json") for night in EXPECTED}
    (out / "summary.json").write_text(json.dumps({"exit": codes, "rows": statuses}, indent=2))
    print(json.dumps(codes))
    print(json.dumps(statuses))
    expected = {"review": 0, "night1": 0, "night2": 0, "stale": 1, "history": 0,
                "history_target": 0}  # fmt: skip
    return 0 if codes == expected and statuses == EXPECTED else 1


def _statuses(report: Path) -> list[str]:
    if not report.is_file():
        return []
    return [row["status"] for row in json.loads(report.read_text())["rows"]]


if __name__ == "__main__":
    sys.exit(main())
