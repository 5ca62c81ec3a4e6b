"""The pull-request flow on a GPU against the fake GitHub server: a real git checkout whose pull
request changes a module, the workflow's three jobs (gate, measure on cuda, publish) run as the
action runs them, and the follow-up's test run in the checkout. What GitHub would show is saved
under --out: the sticky comment, the review comment, the follow-up pull request's body and
files, the job summary, results.json.

    python3 bench/gpu_pr_flow.py --out bench/results/<device>-<date>-prflow
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.pr.comment import MARKER  # noqa: E402
from tests.fake_github import FakeGitHub  # noqa: E402
from tests.prflow import CHANGED, MODULE, NUMBER, REPO, Job, Project  # noqa: E402

SIZE = "[torch.randn(64, 256, 1024)]"  # 16M elements: memory-bound work of milliseconds
PROJECT = """\
[tool.kernelpilot]
device = "{device}"
[tool.kernelpilot.eval]
compile_baseline = {compile}
[[tool.kernelpilot.targets]]
module = "models/act.py:Activation"
init_args = [1024]
inputs = "models/act.py:make_inputs"
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu: a dry run of this script (no torch.compile baseline)")  # fmt: skip
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    module = MODULE.replace("[torch.randn(32, 64, 1024)]", SIZE)
    changed = CHANGED.replace("[torch.randn(32, 64, 1024)]", SIZE)
    with tempfile.TemporaryDirectory() as tmp, FakeGitHub(lifetime_s=1800) as fake:
        root = Path(tmp) / "checkout"
        root.mkdir()
        config = PROJECT.format(device=args.device, compile=str(args.device == "cuda").lower())
        project = Project(root, config, module, changed)
        project.seed(fake)
        event = fake.pull_event(REPO, NUMBER, "opened")
        steps = {
            "gate": Job(Path(tmp) / "gate", fake, event).run("gate"),
            "measure": Job(Path(tmp) / "measure", fake, event, token=None).run(
                "measure", "--out", str(out / "results"), "--seed", "1", cwd=root
            ),
        }
        steps["publish"] = Job(Path(tmp) / "publish", fake, event).run(
            "publish", "--results", str(out / "results")
        )
        for name, done in steps.items():
            (out / f"{name}.log").write_text(done.stdout + done.stderr)
            print(f"{name}: exit {done.returncode}")
        comments = [c.body for c in fake.comments(REPO, NUMBER) if c.body.startswith(MARKER)]
        (out / "comment.md").write_text(comments[0] if comments else "(no comment)\n")
        reviews = [c.body for c in fake.repo(REPO).review_comments.values()]
        (out / "review-comments.md").write_text("\n\n---\n\n".join(reviews) + "\n")
        followups = [
            issue for issue in fake.repo(REPO).issues.values()
            if issue.pull is not None and issue.pull.head_ref == f"kernelpilot/pr-{NUMBER}"
        ]  # fmt: skip
        if followups:
            (out / "followup-body.md").write_text(followups[0].body or "")
            tree = fake.repo(REPO).tree(f"kernelpilot/pr-{NUMBER}")
            for path in ("models/act_kernelpilot.py", "tests/test_act_kernelpilot.py"):
                (out / "followup" / path).parent.mkdir(parents=True, exist_ok=True)
                (out / "followup" / path).write_bytes(tree[path])
                (root / path).write_bytes(tree[path])
            tested = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 "tests/test_act_kernelpilot.py"],
                cwd=root, capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            (out / "followup-test.log").write_text(tested.stdout + tested.stderr)
            print(f"follow-up test: exit {tested.returncode}")
        summary = {name: done.returncode for name, done in steps.items()}
        summary["followup_pr"] = bool(followups)
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
        print(json.dumps(summary))
        return 0 if all(code == 0 for code in steps.values() if isinstance(code, int)) else 1


if __name__ == "__main__":
    sys.exit(main())
