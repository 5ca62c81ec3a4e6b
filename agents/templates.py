"""Strict rendering of the prompt templates in ``prompts/``.

Templates are ``string.Template`` files (``$name`` or ``${name}``; ``$$`` is a dollar sign).
Rendering is strict both ways: a variable the template names but the caller does not pass is
an error, and so is one the caller passes that the template never uses (a renamed variable
would otherwise drop its text from the prompt without a sound). Both are our own bugs, so they
raise rather than becoming a recorded failure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from string import Template

from agents.data import data_dir

# The prompts live beside the packages in the repository (DESIGN.md section 1 fixes the layout);
# an installed kernelpilot carries them as data files (agents/data.py).
PROMPTS_DIR = data_dir("prompts")


class TemplateError(Exception):
    """A template and the values given for it do not match, or the template is missing."""


def template_path(name: str, prompts_dir: Path = PROMPTS_DIR) -> Path:
    """The file of template ``name`` (``"planner"`` is ``prompts/planner.md``)."""
    path = prompts_dir / f"{name}.md"
    if not path.is_file():
        raise TemplateError(
            f"prompt template {path} not found: kernelpilot reads its prompts from the "
            "repository's prompts/ folder, or the installed copy under <prefix>/share/kernelpilot; "
            "reinstall kernelpilot (pip install .)"
        )
    return path


def variables(text: str) -> set[str]:
    """The variable names a template text uses (as ``Template.get_identifiers`` in 3.11+)."""
    template = Template(text)
    found: set[str] = set()
    for match in template.pattern.finditer(text):
        if match.group("invalid") is not None:
            line = text.count("\n", 0, match.start()) + 1
            raise TemplateError(
                f"line {line}: a '$' that starts no variable name (write $$ for a dollar sign)"
            )
        name = match.group("named") or match.group("braced")
        if name is not None:
            found.add(name)
    return found


def render_text(text: str, values: Mapping[str, str], where: str = "template") -> str:
    """``text`` with every variable replaced; the names must match ``values`` exactly."""
    try:
        wanted = variables(text)
    except TemplateError as err:
        raise TemplateError(f"{where}: {err}") from None
    missing = sorted(wanted - values.keys())
    unused = sorted(values.keys() - wanted)
    if missing or unused:
        raise TemplateError(
            f"{where}: variables not given: {missing or 'none'}; given but not used: "
            f"{unused or 'none'}"
        )
    return Template(text).substitute(values)


def render(name: str, values: Mapping[str, str], prompts_dir: Path = PROMPTS_DIR) -> str:
    """Template ``name`` from ``prompts/`` rendered strictly with ``values``."""
    path = template_path(name, prompts_dir)
    return render_text(path.read_text(encoding="utf-8"), values, where=str(path))


SECTION = re.compile(r"^## ([a-z_]+)[ \t]*$", re.MULTILINE)


def sections(text: str) -> dict[str, str]:
    """The ``## name`` sections of a template file (text before the first is its preamble)."""
    heads = list(SECTION.finditer(text))
    return {
        head.group(1): text[head.end() : heads[i + 1].start() if i + 1 < len(heads) else None]
        for i, head in enumerate(heads)
    }


def render_section(
    name: str, section: str, values: Mapping[str, str], prompts_dir: Path = PROMPTS_DIR
) -> str:
    """Section ``section`` of template ``name`` rendered strictly with ``values``, stripped."""
    path = template_path(name, prompts_dir)
    found = sections(path.read_text(encoding="utf-8"))
    if section not in found:
        raise TemplateError(f"{path}: no section '## {section}' (has: {sorted(found)})")
    return render_text(found[section], values, where=f"{path}, section {section}").strip()
