"""The nightly history on a data branch of the fake GitHub, through the real PyGithub client:
created on the first night, appended to, read back; a hand-edited line is reported and the
rest kept; two runs at once lose no record."""

from __future__ import annotations

from bot.nightly.history import Record, file_of, parse_lines
from bot.nightly.stores import HistoryStore, LocalStore

REPO = "acme/models"


def record(benchmark: str, night: str, time_ms: float) -> Record:
    return Record(benchmark=benchmark, night=night, commit="c" * 40, device="cuda",
                  device_name="NVIDIA H100", driver="580", torch="2.11", cuda="13.0",
                  status="ok", time_ms=time_ms, iqr_ms=0.01)  # fmt: skip


def store(fake, token="bot-token") -> HistoryStore:
    return HistoryStore(fake.client(token).get_repo(REPO))


def seeded(fake):
    fake.add_user("bot-token", "github-actions[bot]", "write")
    fake.add_user("other-token", "other-run[bot]", "write")
    fake.add_repo(REPO, files={"README.md": "models\n"})


def test_the_first_night_creates_the_branch_and_later_nights_append(fake_github):
    seeded(fake_github)
    history = store(fake_github)
    assert history.load().tip is None
    history.append([record("target:m.py:Net", "2026-11-20", 1.0)], "night 1")
    history.append([record("target:m.py:Net", "2026-11-21", 1.1),
                    record("kernel:m_kernelpilot.py", "2026-11-21", 0.4)], "night 2")  # fmt: skip
    loaded = history.load()
    assert [r.time_ms for r in loaded.records["target:m.py:Net"]] == [1.0, 1.1]
    assert [r.night for r in loaded.records["kernel:m_kernelpilot.py"]] == ["2026-11-21"]
    assert loaded.problems == []
    assert fake_github.file(REPO, "README.md", "kernelpilot-data") is None  # an orphan branch
    png = bytes(range(256))  # binary: it must travel as base64
    history.append([record("target:m.py:Net", "2026-11-22", 1.0)], "night 3",
                   {"plots/target_m.py_Net.png": png})  # fmt: skip
    assert fake_github.file(REPO, "plots/target_m.py_Net.png", "kernelpilot-data") == png
    assert fake_github.file(REPO, "README.md") == b"models\n"


def test_a_hand_edited_line_is_reported_and_the_rest_kept(fake_github):
    seeded(fake_github)
    history = store(fake_github)
    history.append([record("target:m.py:Net", "2026-11-20", 1.0)], "night 1")
    path = file_of("target:m.py:Net")
    good = fake_github.file(REPO, path, "kernelpilot-data").decode()
    fake_github.push(REPO, "kernelpilot-data", {path: good + "{oops, edited by hand\n"}, "edit")
    history.append([record("target:m.py:Net", "2026-11-21", 1.2)], "night 2")
    loaded = history.load()
    assert [r.time_ms for r in loaded.records["target:m.py:Net"]] == [1.0, 1.2]
    [problem] = loaded.problems
    assert (problem.path, problem.line) == (path, 2) and "JSON" in problem.error


def racing(first: HistoryStore, second: HistoryStore, other: Record) -> None:
    """Let ``second`` append ``other`` while ``first`` is between reading and writing."""
    make_commit = first.repo.create_git_commit
    raced: list[bool] = []

    def commit_after_the_other_run(*args, **kwargs):
        if not raced:
            raced.append(True)
            second.append([other], "the other run")
        return make_commit(*args, **kwargs)

    first.repo.create_git_commit = commit_after_the_other_run  # type: ignore[method-assign]


def test_two_runs_at_once_lose_no_record(fake_github):
    seeded(fake_github)
    first, second = store(fake_github), store(fake_github, "other-token")
    first.append([record("target:m.py:Net", "2026-11-20", 1.0)], "night 1")
    racing(first, second, record("target:m.py:Net", "2026-11-21", 2.0))
    first.append([record("target:m.py:Net", "2026-11-21", 1.1)], "this run")
    times = sorted(r.time_ms for r in first.load().records["target:m.py:Net"])
    assert times == [1.0, 1.1, 2.0]
    refused = [c for c in fake_github.calls("PATCH", "/git/refs/") if c.status == 422]
    assert len(refused) == 1  # the first run's update was refused once, then appended again


def test_two_first_nights_at_once_both_land(fake_github):
    seeded(fake_github)
    first, second = store(fake_github), store(fake_github, "other-token")
    racing(first, second, record("kernel:k.py", "2026-11-20", 0.5))
    first.append([record("target:m.py:Net", "2026-11-20", 1.0)], "this run")
    loaded = first.load().records
    assert set(loaded) == {"kernel:k.py", "target:m.py:Net"}


# A line as the H100 run of 2026-11-25 wrote it (bench/results/h100-2026-11-25-s10 on the
# bench-results branch), before records had the spreads and re-measurements of eager and torch.compile.
OLD_LINE = (
    '{"benchmark":"kernel:models/act_kernelpilot.py","night":"2026-11-25","commit":"555797ab8ca2'
    '81d921eedb8f80eeeecc345a8f6e","run_url":"","device":"cuda","device_name":"NVIDIA H100 80GB '
    'HBM3","driver":"580.159.04","torch":"2.11.0+cu130","cuda":"13.0","status":"ok","time_ms":0.'
    '11102399975061417,"iqr_ms":0.027816003188490868,"remeasured_ms":[],"eager_ms":0.6893280148'
    '506165,"compile_ms":0.2139360010623932,"note":""}'
)


def test_a_line_written_before_targets_were_measured_still_loads(tmp_path):
    records, problems = parse_lines(
        "history/kernel_models_act_kernelpilot.py.jsonl", OLD_LINE + "\n"
    )
    assert problems == []
    [old] = records
    assert old.has_kernel and old.eager_iqr_ms == 0.0 and old.remeasured_eager_ms == []
    assert old.measures()["kernel"].median_ms == old.time_ms == 0.11102399975061417
    store = LocalStore(tmp_path)
    store.append([old])
    target = record("target:models/act.py:Activation", "2026-11-26", 0.0).model_copy(
        update={"time_ms": None, "eager_ms": 0.69, "compile_ms": 0.21}
    )
    store.append([target])
    loaded = store.load().records
    assert loaded["kernel:models/act_kernelpilot.py"] == [old]
    [again] = loaded["target:models/act.py:Activation"]
    assert not again.has_kernel and set(again.measures()) == {"eager", "torch.compile"}
    assert again.measures()["eager"].median_ms == 0.69
