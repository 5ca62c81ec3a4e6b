"""The fake GitHub server driven by the real PyGithub client, the way the bot will drive it.

These pin down what the bot's tests rely on: PyGithub reaches the server through a GitHub
Enterprise ``base_url``, follows its ``Link`` pages, gets GitHub's errors (422 duplicate PR or
ref, 403 for a read-only token, 404) as PyGithub's exceptions, and retries injected faults the
way its ``GithubRetry`` does against github.com.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable

import github
import pytest
import requests
from github import (
    Auth,
    ContentFile,
    Github,
    GithubException,
    GithubRetry,
    InputGitAuthor,
    InputGitTreeElement,
)
from github.PullRequest import ReviewComment

from tests.fake_github import FakeGitHub

REPO = "acme/models"
MARKER = "<!-- kernelpilot -->"
MODULE = "models/block.py"
BASE_SOURCE = (
    "import torch\n\n\nclass Block(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
)
HEAD_SOURCE = BASE_SOURCE.replace("return x", "return torch.relu(x) * 2")


@pytest.fixture
def server(fake_github: FakeGitHub) -> FakeGitHub:
    """A repository with a PR from a branch of it, the bot's token, a maintainer and a reader."""
    fake_github.add_user("bot-token", "kernelpilot-bot", "write")
    fake_github.add_user("maintainer-token", "maintainer", "admin")
    fake_github.add_user("read-token", "github-actions[bot]", "read")
    fake_github.add_repo(REPO, files={MODULE: BASE_SOURCE, "README.md": "models\n"})
    fake_github.add_pull(
        REPO,
        7,
        head_ref="relu-block",
        author="alice",
        head_files={MODULE: HEAD_SOURCE},
        title="ReLU block",
    )
    return fake_github


def upsert_sticky(pull: github.PullRequest.PullRequest, login: str, body: str) -> None:
    """Edit our comment carrying the marker, else create it (what bot/pr/comment.py must do)."""
    for comment in pull.get_issue_comments():
        if MARKER in comment.body and comment.user.login == login:
            comment.edit(body)
            return
    pull.create_issue_comment(body)


def test_sticky_comment_is_found_by_marker_and_author_and_edited(server: FakeGitHub) -> None:
    # someone quoting our marker must not be taken for our comment
    server.add_comment(REPO, 7, f"> {MARKER} why this?", author="alice")
    gh = server.client("bot-token")
    me = gh.get_user().login
    pull = gh.get_repo(REPO).get_pull(7)
    upsert_sticky(pull, me, f"{MARKER}\nfirst run")
    upsert_sticky(pull, me, f"{MARKER}\nsecond run")
    mine = [c for c in server.comments(REPO, 7) if c.author == "kernelpilot-bot"]
    assert me == "kernelpilot-bot"
    assert [c.body for c in mine] == [f"{MARKER}\nsecond run"]
    assert server.comments(REPO, 7)[0].body == f"> {MARKER} why this?"
    assert len(server.calls("POST", r"/issues/7/comments$")) == 1
    assert len(server.calls("PATCH", r"/issues/comments/\d+$")) == 1


def test_installation_token_cannot_read_its_own_user(server: FakeGitHub) -> None:
    """GITHUB_TOKEN and App tokens get 403 on GET /user, so the bot must know its login."""
    with pytest.raises(GithubException) as refused:
        server.client("read-token").get_user().complete()
    assert refused.value.status == 403
    assert refused.value.data["message"] == "Resource not accessible by integration"


def test_review_with_a_line_comment_is_edited_not_duplicated(server: FakeGitHub) -> None:
    repo = server.client("bot-token").get_repo(REPO)
    pull = repo.get_pull(7)
    [changed] = pull.get_files()
    assert changed.filename == MODULE and "+        return torch.relu(x) * 2" in changed.patch
    line: ReviewComment = {"path": MODULE, "line": 6, "side": "RIGHT", "body": "1.8x faster"}
    review = pull.create_review(
        commit=repo.get_commit(pull.head.sha), body="kernelpilot", event="COMMENT", comments=[line]
    )
    assert review.state == "COMMENTED" and review.commit_id == pull.head.sha
    [comment] = pull.get_review_comments()
    assert (comment.path, comment.line, comment.pull_request_review_id) == (MODULE, 6, review.id)
    comment.edit("2.0x faster")
    assert [c.body for c in pull.get_review_comments()] == ["2.0x faster"]
    assert [r.state for r in pull.get_reviews()] == ["COMMENTED"]


def test_review_comment_outside_the_diff_is_refused_whole(server: FakeGitHub) -> None:
    pull = server.client("bot-token").get_repo(REPO).get_pull(7)
    comments: list[ReviewComment] = [
        {"path": MODULE, "line": 6, "side": "RIGHT", "body": "in the diff"},
        {"path": "README.md", "line": 1, "side": "RIGHT", "body": "not in the PR"},
    ]
    with pytest.raises(GithubException) as refused:
        pull.create_review(body="kernelpilot", event="COMMENT", comments=comments)
    assert refused.value.status == 422
    assert refused.value.data["errors"] == ["Path could not be resolved"]
    with pytest.raises(GithubException, match="Line could not be resolved"):
        pull.create_review(
            body="kp",
            event="COMMENT",
            comments=[{"path": MODULE, "line": 1, "side": "RIGHT", "body": "x"}],
        )
    assert list(pull.get_reviews()) == [] and list(pull.get_review_comments()) == []


def test_follow_up_branch_file_and_pull_request_found_again_by_head(server: FakeGitHub) -> None:
    repo = server.client("bot-token").get_repo(REPO)
    base = repo.get_pull(7).head
    branch = "kernelpilot/pr-7"
    ref = repo.create_git_ref(f"refs/heads/{branch}", base.sha)
    repo.create_file("models/block_kernel.py", "add kernel", "v1\n", branch=branch)
    current = repo.get_contents("models/block_kernel.py", ref=branch)
    assert isinstance(current, ContentFile.ContentFile)
    repo.update_file(current.path, "update kernel", "v2\n", current.sha, branch=branch)
    updated = repo.get_contents("models/block_kernel.py", ref=branch)
    assert isinstance(updated, ContentFile.ContentFile) and updated.decoded_content == b"v2\n"
    assert server.file(REPO, "models/block_kernel.py") is None  # only on the branch

    def open_or_update(title: str, body: str) -> github.PullRequest.PullRequest:
        found = list(repo.get_pulls(state="open", head=f"acme:{branch}", base=base.ref))
        if found:
            found[0].edit(title=title, body=body)
            return found[0]
        return repo.create_pull(title=title, body=body, head=branch, base=base.ref)

    first = open_or_update("kernelpilot: 1 kernel for #7", "table v1")
    again = open_or_update("kernelpilot: 1 kernel for #7", "table v2")
    assert again.number == first.number and again.body == "table v2"
    assert [p.number for p in repo.get_pulls(state="open", head=f"acme:{branch}")] == [first.number]
    assert [f.filename for f in first.get_files()] == ["models/block_kernel.py"]
    assert repo.get_branch(branch).commit.sha == repo.get_git_ref(f"heads/{branch}").object.sha
    ref.edit(base.sha, force=True)  # a re-run starts the branch over
    assert repo.get_git_ref(f"heads/{branch}").object.sha == base.sha


def test_duplicates_get_githubs_422(server: FakeGitHub) -> None:
    repo = server.client("bot-token").get_repo(REPO)
    sha = repo.get_branch("main").commit.sha
    repo.create_git_ref("refs/heads/kp", sha)
    with pytest.raises(GithubException) as ref_exists:
        repo.create_git_ref("refs/heads/kp", sha)
    assert (ref_exists.value.status, ref_exists.value.data["message"]) == (
        422,
        "Reference already exists",
    )
    repo.create_file("k.py", "kernel", "k\n", branch="kp")
    repo.create_pull(title="kernels", body="", head="kp", base="main")
    with pytest.raises(GithubException) as pull_exists:
        repo.create_pull(title="kernels", body="", head="kp", base="main")
    assert pull_exists.value.status == 422
    assert (
        pull_exists.value.data["errors"][0]["message"]
        == "A pull request already exists for acme:kp."
    )
    with pytest.raises(GithubException, match="not a fast forward"):
        repo.get_git_ref("heads/kp").edit(sha)


def test_git_data_commit_of_several_files_on_a_forced_branch_and_a_pull(server: FakeGitHub) -> None:
    """What the follow-up PR does without a checkout: blobs, a tree on main's, a commit, the
    branch forced onto it (a re-run starts over), then contents and the PR's files at it."""
    repo = server.client("bot-token").get_repo(REPO)
    branch = "kernelpilot/pr-7"
    stale = repo.create_git_ref(f"refs/heads/{branch}", repo.get_branch("main").commit.sha)
    repo.create_file("old_kernel.cu", "first run", "// v1\n", branch=branch)
    base = repo.get_git_commit(repo.get_git_ref("heads/main").object.sha)
    source = b"__global__ void k() {}\n"
    kernel = repo.create_git_blob(base64.b64encode(source).decode(), "base64")
    assert base64.b64decode(repo.get_git_blob(kernel.sha).content) == source
    tree = repo.create_git_tree(
        [
            InputGitTreeElement("kernels/block.cu", "100644", "blob", sha=kernel.sha),
            InputGitTreeElement(MODULE, "100644", "blob", content=HEAD_SOURCE),
            InputGitTreeElement("bench.sh", "100755", "blob", content="#!/bin/sh\n"),
            InputGitTreeElement("README.md", "100644", "blob", sha=None),
        ],
        base_tree=base.tree,
    )
    assert [(e.path, e.type, e.mode) for e in tree.tree] == [
        ("bench.sh", "blob", "100755"),
        ("kernels", "tree", "040000"),
        ("models", "tree", "040000"),
    ]
    commit = repo.create_git_commit("kernelpilot: 1 kernel for #7", tree, [base])
    assert (commit.tree.sha, [p.sha for p in commit.parents]) == (tree.sha, [base.sha])
    assert (commit.author.name, commit.committer.email) == (
        "kernelpilot-bot",
        "kernelpilot-bot@users.noreply.github.com",
    )
    assert repo.get_git_commit(commit.sha).message == "kernelpilot: 1 kernel for #7"

    with pytest.raises(GithubException, match="Update is not a fast forward"):
        stale.edit(commit.sha)  # the branch holds a commit the new one does not
    stale.edit(commit.sha, force=True)
    assert repo.get_branch(branch).commit.sha == commit.sha
    kernel_file = repo.get_contents("kernels/block.cu", ref=branch)
    assert isinstance(kernel_file, ContentFile.ContentFile)
    assert (kernel_file.decoded_content, kernel_file.sha) == (source, kernel.sha)
    with pytest.raises(github.UnknownObjectException):
        repo.get_contents("README.md", ref=branch)
    assert server.file(REPO, "old_kernel.cu", ref=branch) is None  # forced away
    listed = repo.get_git_tree(branch, recursive=True).tree
    assert [e.path for e in listed] == [
        "bench.sh",
        "kernels",
        "kernels/block.cu",
        "models",
        "models/block.py",
    ]
    pull = repo.create_pull(title="kernelpilot: 1 kernel for #7", body="", head=branch, base="main")
    assert pull.head.sha == commit.sha
    assert [(f.filename, f.status) for f in pull.get_files()] == [
        ("README.md", "removed"),
        ("bench.sh", "added"),
        ("kernels/block.cu", "added"),
        (MODULE, "modified"),
    ]
    module = repo.get_contents(MODULE, ref=branch)
    assert isinstance(module, ContentFile.ContentFile)
    repo.update_file(MODULE, "tune", HEAD_SOURCE + "# tuned\n", module.sha, branch=branch)
    assert repo.get_git_tree(branch).tree[0].mode == "100755"  # a contents update keeps modes


def test_git_data_ids_are_gits_and_shared_with_forks(server: FakeGitHub) -> None:
    """Trees and commits get the ids git gives them (checked against ``git write-tree`` and
    ``git commit-tree``), so a bot may compare them with a local clone's."""
    server.add_repo("acme/empty")
    gh = server.client("bot-token")
    assert gh.get_repo("acme/empty").get_branch("main").commit.commit.tree.sha == (
        "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
    )  # git's empty tree
    repo = gh.get_repo(REPO)
    tree = repo.create_git_tree(
        [
            InputGitTreeElement("models/block.py", "100644", "blob", content="import torch\n"),
            InputGitTreeElement("run.sh", "100755", "blob", content="#!/bin/sh\n"),
        ]
    )
    assert tree.sha == "2fdf966397b0e78caf6b9c31bc6444530a0083d7"
    author = InputGitAuthor("a", "a@b.c", "2026-01-31T12:00:00Z")
    committer = InputGitAuthor("c", "c@d.e", "2026-01-31T14:00:00+01:00")  # 13:00 UTC
    commit = repo.create_git_commit("msg", tree, [], author=author, committer=committer)
    assert commit.sha == "a00cf80bfa1b0aae553f632f68e1e464085d825c"
    assert commit.committer.date.isoformat() == "2026-01-31T13:00:00+00:00"
    assert repo.get_commit(commit.sha).author is None  # an email of no GitHub user
    server.fork(REPO, "alice")
    fork = gh.get_repo("alice/models")
    assert fork.get_git_commit(commit.sha).tree.sha == tree.sha
    assert fork.get_git_tree(tree.sha).tree[0].path == "models"


def test_git_data_writes_need_a_write_token(server: FakeGitHub) -> None:
    repo = server.client("read-token").get_repo(REPO)
    head = repo.get_git_commit(repo.get_branch("main").commit.sha)  # reading is allowed
    item = InputGitTreeElement("x", "100644", "blob", content="x")
    for write in (
        lambda: repo.create_git_blob("x", "utf-8"),
        lambda: repo.create_git_tree([item], base_tree=head.tree),
        lambda: repo.create_git_commit("x", head.tree, [head]),
    ):
        with pytest.raises(GithubException) as refused:
            write()
        assert (refused.value.status, refused.value.data["message"]) == (
            403,
            "Resource not accessible by integration",
        )
    assert [r.status for r in server.calls("POST", "/git/")] == [403, 403, 403]


def test_git_data_unknown_objects_get_githubs_422_and_404(server: FakeGitHub) -> None:
    """A commit, tree or blob of another repository is unknown here (each network has its own
    objects): creating on it is 422, reading it 404."""
    server.add_repo("acme/other", files={"other.py": "x = 1\n"})
    gh = server.client("bot-token")
    other = gh.get_repo("acme/other")
    foreign = other.get_git_commit(other.get_branch("main").commit.sha)
    repo = gh.get_repo(REPO)
    head = repo.get_git_commit(repo.get_branch("main").commit.sha)

    def refused(
        message: str, create: Callable[..., object], *args: object, **kwargs: object
    ) -> None:
        with pytest.raises(GithubException) as error:
            create(*args, **kwargs)
        assert (error.value.status, error.value.data["message"]) == (422, message)

    refused(
        "Parent SHA does not exist or is not a commit object",
        repo.create_git_commit,
        "x",
        head.tree,
        [foreign],
    )
    refused("Tree SHA does not exist", repo.create_git_commit, "x", foreign.tree, [head])
    refused("base_tree is not a valid tree oid", repo.create_git_tree, [], base_tree=foreign.tree)
    missing = "0" * 40
    for item, message in (
        (
            InputGitTreeElement("k.cu", "100644", "blob", sha=missing),
            f"tree.sha {missing} is not a valid blob",
        ),
        (InputGitTreeElement("/k.cu", "100644", "blob", ""), "tree.path cannot start with a slash"),
        (InputGitTreeElement("k.cu", "100664", "blob", ""), "Must supply a valid tree.mode"),
    ):
        refused(message, repo.create_git_tree, [item])
    for read in (repo.get_git_commit, repo.get_git_tree, repo.get_git_blob):
        with pytest.raises(github.UnknownObjectException):
            read(foreign.sha)
    with pytest.raises(GithubException, match="Object does not exist"):
        repo.create_git_ref("refs/heads/x", foreign.sha)


def test_read_only_token_on_a_fork_pr_gets_403_once(server: FakeGitHub) -> None:
    """PyGithub's retry looks into a 403's body: not a rate limit, so it is not retried."""
    server.add_pull(
        REPO, 9, head_ref="main", fork=True, author="mallory", head_files={MODULE: HEAD_SOURCE}
    )
    pull = server.client("read-token").get_repo(REPO).get_pull(9)
    assert (pull.head.repo.full_name, pull.head.repo.fork, pull.head.label) == (
        "mallory/models",
        True,
        "mallory:main",
    )
    with pytest.raises(GithubException) as refused:
        pull.create_issue_comment(f"{MARKER} results")
    assert refused.value.status == 403
    assert refused.value.data["message"] == "Resource not accessible by integration"
    assert [r.status for r in server.calls("POST", "/comments$")] == [403]
    assert server.comments(REPO, 9) == []


def test_label_events_and_collaborator_permission(server: FakeGitHub) -> None:
    """The approval gate: who labelled the PR, and whether that user may write."""
    server.add_label(REPO, 7, "kernelpilot:approved", actor="maintainer")
    repo = server.client("bot-token").get_repo(REPO)
    pull = repo.get_pull(7)
    assert [label.name for label in pull.get_labels()] == ["kernelpilot:approved"]
    [event] = [e for e in pull.get_issue_events() if e.event == "labeled"]
    assert (event.actor.login, event.label.name) == ("maintainer", "kernelpilot:approved")
    assert repo.get_collaborator_permission(event.actor.login) == "admin"
    assert repo.get_collaborator_permission("alice") == "none"
    pull.remove_from_labels("kernelpilot:approved")
    assert [e.event for e in pull.get_issue_events()] == ["labeled", "unlabeled"]
    approved_at = pull.head.sha
    server.push(REPO, "relu-block", {MODULE: HEAD_SOURCE + "# more\n"}, author="alice")
    assert repo.get_pull(7).head.sha != approved_at  # a push after approval: approve again


def test_pagination_follows_link_headers(server: FakeGitHub) -> None:
    for index in range(120):
        server.add_comment(REPO, 7, f"comment {index}", author="alice")
    pull = server.client("bot-token").get_repo(REPO).get_pull(7)
    bodies = [c.body for c in pull.get_issue_comments()]
    assert bodies == [f"comment {index}" for index in range(120)]
    pages = server.calls("GET", "/issues/7/comments$")
    assert [r.query.get("page", "1") for r in pages] == ["1", "2", "3", "4"]  # 30 a page
    assert pull.get_issue_comments().totalCount == 120
    wide = server.client("bot-token", per_page=100).get_repo(REPO).get_pull(7)
    before = len(server.calls("GET", "/issues/7/comments$"))
    assert len(list(wide.get_issue_comments())) == 120
    assert len(server.calls("GET", "/issues/7/comments$")) - before == 2


@pytest.mark.parametrize(
    "inject",
    [
        lambda s: s.fail_next("GET", r"/pulls/7$", 502),
        lambda s: s.fail_next("GET", r"/pulls/7$", 503, times=2),
        lambda s: s.secondary_rate_limit("GET", r"/pulls/7$", retry_after=0),
        lambda s: s.secondary_rate_limit("GET", r"/pulls/7$"),  # waits secondary_rate_wait
        lambda s: s.fail_next("GET", r"/pulls/7$", 429, "slow down", headers={"retry-after": "0"}),
    ],
    ids=["502", "503x2", "secondary-retry-after", "secondary-no-retry-after", "429-retry-after"],
)
def test_injected_faults_are_retried_by_github_retry(server: FakeGitHub, inject) -> None:
    repo = server.client("bot-token", retry=GithubRetry(secondary_rate_wait=0.01)).get_repo(REPO)
    inject(server)
    assert repo.get_pull(7).number == 7
    statuses = [r.status for r in server.calls("GET", r"/pulls/7$")]
    assert statuses[-1] == 200 and len(statuses) >= 2


def test_default_retry_skips_patch_and_gives_up_with_a_retry_error(server: FakeGitHub) -> None:
    """PyGithub's default ``GithubRetry()``: 10 retries, no backoff, methods GET/POST/PUT/DELETE
    (not PATCH); once spent it raises requests' RetryError, not a GithubException."""
    gh = server.client("bot-token", retry=GithubRetry())
    pull = gh.get_repo(REPO).get_pull(7)
    comment = pull.create_issue_comment("x")
    server.fail_next("PATCH", r"/issues/comments/\d+$", 502)
    with pytest.raises(GithubException) as bad_gateway:
        comment.edit("y")
    assert bad_gateway.value.status == 502 and len(server.calls("PATCH")) == 1
    server.fail_next("POST", r"/comments$", 429, "slow down")  # no retry-after: not retried
    with pytest.raises(GithubException):
        pull.create_issue_comment("z")
    server.fail_next("GET", r"/pulls/7$", 502, times=50)
    with pytest.raises(requests.exceptions.RetryError):
        gh.get_repo(REPO).get_pull(7)
    assert len([r for r in server.calls("GET", r"/pulls/7$") if r.status == 502]) == 11


def test_issues_created_found_by_labels_and_creator_updated_and_closed(server: FakeGitHub) -> None:
    gh = server.client("bot-token")
    repo = gh.get_repo(REPO)
    issue = repo.create_issue(
        "Nightly kernel benchmarks", body="| table |", labels=["kernelpilot-nightly"]
    )
    found = list(
        repo.get_issues(
            state="open", labels=["kernelpilot-nightly"], creator=gh.get_user("kernelpilot-bot")
        )
    )
    assert [i.number for i in found] == [issue.number]
    assert [label.name for label in found[0].labels] == ["kernelpilot-nightly"]
    found[0].edit(body="| table v2 |", labels=["kernelpilot-nightly", "regression"])
    assert repo.get_issue(issue.number).body == "| table v2 |"
    issue.edit(state="closed")
    assert list(repo.get_issues(state="open", labels=["kernelpilot-nightly"])) == []
    [closed] = repo.get_issues(state="closed")
    assert (closed.state, closed.state_reason) == ("closed", "completed")
    assert {label.name for label in closed.labels} == {"kernelpilot-nightly", "regression"}
    # GitHub lists PRs among issues; the bot must tell them apart
    assert [i.pull_request is not None for i in repo.get_issues(state="open")] == [True]


def test_errors_and_rate_limit_headers_reach_pygithub(server: FakeGitHub) -> None:
    gh = server.client("bot-token")
    with pytest.raises(github.UnknownObjectException):
        gh.get_repo("acme/missing")
    with pytest.raises(github.BadCredentialsException):
        server.client("revoked-token").get_repo(REPO)
    gh.get_repo(REPO)
    remaining, limit = gh.rate_limiting
    assert limit == 5000 and remaining == server.state.rate_remaining
    with pytest.raises(GithubException) as anonymous:
        server.client().get_repo(REPO).get_pull(7).create_issue_comment("x")
    assert anonymous.value.status == 401


def test_pygithub_builds_urls_under_the_enterprise_prefix(server: FakeGitHub) -> None:
    gh = Github(
        auth=Auth.Token("bot-token"),
        base_url=server.base_url + "/",
        seconds_between_requests=None,
        seconds_between_writes=None,
    )
    assert gh.get_repo(REPO).get_pull(7).url == f"{server.base_url}/repos/{REPO}/pulls/7"
    assert [r.path for r in server.requests] == [f"/repos/{REPO}", f"/repos/{REPO}/pulls/7"]


def test_pull_event_payload_matches_the_rest_answer(server: FakeGitHub) -> None:
    server.add_label(REPO, 7, "kernelpilot:approved", actor="maintainer")
    payload = server.pull_event(
        REPO, 7, "labeled", label="kernelpilot:approved", sender="maintainer"
    )
    pull = server.client("bot-token").get_repo(REPO).get_pull(7)
    assert payload["pull_request"]["head"]["sha"] == pull.head.sha
    assert (payload["label"]["name"], payload["sender"]["login"]) == (
        "kernelpilot:approved",
        "maintainer",
    )


def test_serves_loopback_only_and_stops_after_its_lifetime() -> None:
    with FakeGitHub(lifetime_s=0.3) as fake:
        fake.add_repo(REPO)
        assert fake.base_url.startswith("http://127.0.0.1:")
        assert requests.get(f"{fake.base_url}/repos/{REPO}", timeout=5).status_code == 200
        time.sleep(0.6)
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(f"{fake.base_url}/repos/{REPO}", timeout=5)
