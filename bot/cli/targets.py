"""``kernelpilot targets``: the changed modules between two refs and the target each would get
(configured, ``get_inputs()``, or captured from the repository's own tests or command), and
with ``--write`` the captured ones frozen into pyproject.toml and a factory file."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import click

from bot.cli.options import BASE_REF, DEVICE, DTYPE, HEAD_REF, VERBOSE, progress, run_command
from bot.detect.captured import HeadCode, capture_targets, in_repository
from bot.detect.changes import ChangedModule, detect_changes
from bot.git import uncommitted_configuration
from bot.settings import load_settings
from harness.capture.freeze import FACTORY_FILE, frozen
from harness.devices import resolve_device
from harness.errors import UserError

SOURCES = {
    "config": "configured in pyproject.toml",
    "get_inputs": "get_inputs() beside the class",
    "capture": "captured",
    "guess": "guessed",
}
GUESSED = (
    "guessed: nothing in the repository calls them, so kernelpilot called them at small sizes "
    "of its own (built from their constructors' signatures where nothing built them either); "
    "check the sizes "
    "(--write freezes them into pyproject.toml to edit), or name a command in "
    "[tool.kernelpilot.capture]"
)


@click.command()
@BASE_REF
@HEAD_REF
@click.option(
    "--repo", type=click.Path(exists=True, file_okay=False, path_type=Path), default=Path("."),
    show_default=True, help="The git repository.",
)  # fmt: skip
@click.option(
    "--write", is_flag=True,
    help=f"Freeze the captured targets: append their [[tool.kernelpilot.targets]] entries to "
    f"the repository's pyproject.toml and write their factories to {FACTORY_FILE} at its root "
    "(refused where that file exists). Configured targets then win over capturing.",
)  # fmt: skip
@DEVICE
@DTYPE
@VERBOSE
def targets(base, head, repo, write, device, dtype, verbose) -> None:
    """List the nn.Modules changed between BASE and HEAD and the target each gets: from
    [tool.kernelpilot], from a get_inputs() beside the class, or captured by running the test
    files that import it and the Python examples of the Markdown files that name it (or the
    command [tool.kernelpilot.capture] names) in the sandbox and recording how it is built and
    called, or, where none of them calls it, guessed: called at small sizes of kernelpilot's own,
    built from its constructor's signature where nothing built it ([tool.kernelpilot.capture]
    guess = false turns that off). Nothing is optimized.

    Exits 0, or 2 on bad input.
    """

    def action() -> None:
        root = repo.resolve()
        settings = load_settings(root)
        changes = detect_changes(root, base, head)
        warn_uncommitted(root)
        found = capture_targets(
            root, changes, settings.capture, settings.eval,
            HeadCode(root, changes.head_sha),
            resolve_device(settings.device if device == "auto" else device),
            dtype or settings.dtype, progress,
        )  # fmt: skip
        for module in changes.modules:
            click.echo(_line(module))
        if any(module.target_source == "guess" for module in changes.modules):
            click.echo(GUESSED, err=True)
        if not write:
            return
        entries, factories = frozen(
            [target for target, _ in found], FACTORY_FILE, partial(in_repository, root)
        )
        if not entries:
            click.echo("--write: no captured target to write", err=True)
            return
        _write(root, entries, factories)

    run_command(verbose, action)


def _line(module: ChangedModule) -> str:
    how = SOURCES.get(module.target_source or "", "no target")
    note = f": {module.capture_note}" if module.capture_note else ""
    return f"{module.path}:{module.class_name}  {how}{note}"


def _write(root: Path, entries: str, factories: str) -> None:
    factory = root / FACTORY_FILE
    if factory.exists():
        raise UserError(
            f"{FACTORY_FILE} already exists",
            where=str(factory),
            fix="move it away (or merge it by hand) and run kernelpilot targets --write again",
        )
    pyproject = root / "pyproject.toml"
    before = pyproject.read_text(encoding="utf-8") if pyproject.is_file() else ""
    factory.write_text(factories, encoding="utf-8")
    separator = (
        "" if not before or before.endswith("\n\n") else ("\n" if before.endswith("\n") else "\n\n")
    )
    pyproject.write_text(before + separator + entries, encoding="utf-8")
    click.echo(
        f"wrote {factory} and appended the targets to {pyproject}; commit both: kernelpilot "
        "reads the configuration of the commit it looks at",
        err=True,
    )


def warn_uncommitted(root: Path) -> None:
    """Say so where a pyproject.toml in the work tree is not the commit's: it is not used."""
    for path in uncommitted_configuration(root):
        progress(
            f"warning: {path} has uncommitted changes, not used: kernelpilot reads the "
            "configuration of the commit it looks at (commit it to use it)"
        )
