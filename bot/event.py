"""What GitHub Actions hands a run: the event (from ``GITHUB_EVENT_PATH``) and the environment.

Only the fields kernelpilot acts on are read, into pydantic records; everything in an event
that a pull request's author controls (title, body, branch name, labels) stays data: it is
never put into a shell command or a workflow command. The token is a ``SecretStr`` so that a
record printed or dumped never shows it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr

from harness.errors import UserError

Mode = Literal["pull_request", "workflow_dispatch", "schedule"]
PULL_EVENTS = {"pull_request", "pull_request_target"}


class PullRequest(BaseModel):
    number: int
    head_sha: str
    head_ref: str
    head_repo: str = Field(description="owner/name of the head's repository (a fork's own).")
    base_sha: str
    base_ref: str
    base_repo: str
    labels: list[str] = Field(default_factory=list)
    author: str = ""

    @property
    def fork(self) -> bool:
        return self.head_repo.lower() != self.base_repo.lower()


class Dispatch(BaseModel):
    """A manual run's inputs (workflow_dispatch)."""

    targets: list[str] = Field(default_factory=list)
    budget: int | None = None
    model: str | None = None
    open_pr: bool = True


class Event(BaseModel):
    name: str = Field(description="GITHUB_EVENT_NAME as given.")
    action: str = Field(default="", description="opened, synchronize, labeled, ...")
    repository: str = Field(description="owner/name the workflow runs in.")
    sender: str = ""
    label: str | None = Field(default=None, description="The label added, on a labeled event.")
    sha: str = Field(default="", description="GITHUB_SHA: the commit the run is for.")
    ref: str = Field(default="", description="GITHUB_REF_NAME: the branch a dispatch runs on.")
    pull: PullRequest | None = None
    dispatch: Dispatch | None = None

    @property
    def mode(self) -> Mode:
        if self.name in PULL_EVENTS:
            return "pull_request"
        if self.name in ("workflow_dispatch", "schedule"):
            return self.name  # type: ignore[return-value]
        raise UserError(
            f"kernelpilot does not handle the {self.name!r} event",
            where="GITHUB_EVENT_NAME",
            fix="trigger the workflow on pull_request_target (or pull_request), "
            "workflow_dispatch or schedule",
        )


class ActionsEnv(BaseModel):
    """The parts of a GitHub Actions job's environment kernelpilot uses."""

    api_url: str = "https://api.github.com"
    server_url: str = "https://github.com"
    repository: str
    run_id: str = ""
    token: SecretStr | None = None
    output_file: Path | None = None
    summary_file: Path | None = None

    @property
    def run_url(self) -> str:
        """The run's page, where its artifacts are (the comment links it when trimmed)."""
        if not self.run_id:
            return ""
        return f"{self.server_url}/{self.repository}/actions/runs/{self.run_id}"


def actions_env(environ: Mapping[str, str] | None = None) -> ActionsEnv:
    env = os.environ if environ is None else environ
    repository = _required(env, "GITHUB_REPOSITORY")
    return ActionsEnv(
        api_url=env.get("GITHUB_API_URL") or "https://api.github.com",
        server_url=env.get("GITHUB_SERVER_URL") or "https://github.com",
        repository=repository,
        run_id=env.get("GITHUB_RUN_ID", ""),
        token=SecretStr(env["GITHUB_TOKEN"]) if env.get("GITHUB_TOKEN") else None,
        output_file=Path(env["GITHUB_OUTPUT"]) if env.get("GITHUB_OUTPUT") else None,
        summary_file=Path(env["GITHUB_STEP_SUMMARY"]) if env.get("GITHUB_STEP_SUMMARY") else None,
    )


def load_event(environ: Mapping[str, str] | None = None) -> Event:
    """The event this job runs for, from GITHUB_EVENT_NAME and the file at GITHUB_EVENT_PATH."""
    env = os.environ if environ is None else environ
    name = _required(env, "GITHUB_EVENT_NAME")
    path = Path(_required(env, "GITHUB_EVENT_PATH"))
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UserError(
            f"cannot read the event file: {err}",
            where=f"GITHUB_EVENT_PATH={path}",
            fix="run inside GitHub Actions, or point GITHUB_EVENT_PATH at a webhook payload",
        ) from None
    return parse_event(name, payload, env.get("GITHUB_REPOSITORY", ""), env)


def parse_event(
    name: str, payload: dict[str, Any], repository: str = "", env: Mapping[str, str] | None = None
) -> Event:
    env = env or {}
    repository = repository or _get(payload, "repository", "full_name") or ""
    event = Event(
        name=name,
        action=payload.get("action") or "",
        repository=repository,
        sender=_get(payload, "sender", "login") or "",
        label=_get(payload, "label", "name"),
        sha=env.get("GITHUB_SHA", ""),
        ref=env.get("GITHUB_REF_NAME", ""),
    )
    if name in PULL_EVENTS:
        event.pull = _pull(payload, where=f"{name} event")
    elif name == "workflow_dispatch":
        event.dispatch = _dispatch(payload.get("inputs") or {})
    return event


def _pull(payload: dict[str, Any], where: str) -> PullRequest:
    pr = payload.get("pull_request")
    if not isinstance(pr, dict):
        raise UserError(
            "the event has no pull_request", where=where, fix="use a pull_request event payload"
        )
    try:
        return PullRequest(
            number=int(pr["number"]),
            head_sha=pr["head"]["sha"],
            head_ref=pr["head"]["ref"],
            head_repo=(pr["head"].get("repo") or {}).get("full_name") or "",
            base_sha=pr["base"]["sha"],
            base_ref=pr["base"]["ref"],
            base_repo=(pr["base"].get("repo") or {}).get("full_name") or "",
            labels=[label["name"] for label in pr.get("labels") or [] if "name" in label],
            author=(pr.get("user") or {}).get("login", ""),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise UserError(
            f"the pull_request in the event lacks {err}",
            where=where,
            fix="use the payload GitHub sends (number, head.sha/ref/repo, base.sha/ref/repo)",
        ) from None


def _dispatch(inputs: dict[str, Any]) -> Dispatch:
    """workflow_dispatch inputs arrive as strings (booleans as 'true'/'false')."""
    budget = str(inputs.get("budget") or "").strip()
    if budget and not budget.isdigit():
        raise UserError(
            f"budget input {budget!r} is not a whole number",
            where="workflow_dispatch inputs.budget",
            fix="give the number of candidates to try per target, e.g. 8",
        )
    return Dispatch(
        targets=str(inputs.get("targets") or "").split(),
        budget=int(budget) if budget else None,
        model=str(inputs.get("model") or "").strip() or None,
        open_pr=str(inputs.get("open-pr", inputs.get("open_pr", "true"))).lower() != "false",
    )


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name)
    if not value:
        raise UserError(
            f"{name} is not set: this command runs inside a GitHub Actions job",
            fix="use `kernelpilot review --base REF` to run the pull-request flow locally",
        )
    return value


def _get(payload: dict[str, Any], key: str, field: str) -> str | None:
    value = payload.get(key)
    return value.get(field) if isinstance(value, dict) else None
