"""The nightly run on a GPU over a repository that ships a kernel: a real git checkout whose
follow-up (from `kernelpilot review` on the device) is merged; two nights re-verify and time it,
then its module changes and the third night reports it stale. The history, each night's table
and the plot are saved under --out.

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
from bot.followup import build_followup  # noqa: E402
from bot.results import PullResults  # noqa: E402
from tests.gitrepo import commit, git  # noqa: E402
from tests.prflow import CHANGED, MODULE, Project  # noqa: E402

BENCHMARK = "kernel:models/act_kernelpilot.py"


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
        history = out / "history"
        shutil.rmtree(history, ignore_errors=True)
        for night in ("night1", "night2"):
            codes[night] = cli("nightly", "--history-dir", str(history), "--out", str(out / night),
                               "--seed", "2", cwd=root, log=out / f"{night}.log")  # fmt: skip
        retuned = CHANGED.replace("0.5 * y * y", "0.3 * y * y").replace(
            "[torch.randn(32, 64, 1024)]", SIZE
        )
        commit(root, {"models/act.py": retuned}, "retune the activation")
        codes["stale"] = cli("nightly", "--history-dir", str(history), "--out", str(out / "stale"),
                             cwd=root, log=out / "stale.log")  # fmt: skip
        codes["history"] = cli("history", BENCHMARK, "--history-dir", str(history), "--plot",
                               str(out / "history.png"), cwd=root, log=out / "history.log")  # fmt: skip
    (out / "summary.json").write_text(json.dumps(codes, indent=2))
    print(json.dumps(codes))
    expected = {"review": 0, "night1": 0, "night2": 0, "stale": 1, "history": 0}
    return 0 if codes == expected else 1


if __name__ == "__main__":
    sys.exit(main())
