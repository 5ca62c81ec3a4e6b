"""Checks of command-line values that click's own types do not make, shared by the commands."""

from __future__ import annotations

import click


def not_blank(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A click callback: an empty or all-space value is a usage error, not a silent default."""
    if value is not None and not value.strip():
        raise click.BadParameter("must not be empty")
    return value
