"""Where kernelpilot's data files are: the prompt templates (``prompts/``) and the example
problem and candidates the coder is shown (``examples/``).

In a checkout (and an editable install) they are the repository's folders beside the packages,
as DESIGN.md's layout has them. A built wheel carries the same files as data files under
``<prefix>/share/kernelpilot/`` (pyproject.toml's ``[tool.setuptools.data-files]``), which is
where an installed kernelpilot (the action's own virtual environment, pipx, uv tool) reads them.
"""

from __future__ import annotations

import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
INSTALLED = Path(sys.prefix) / "share" / "kernelpilot"


def data_dir(name: str) -> Path:
    """The folder ``name`` (``prompts`` or ``examples``) of the checkout, else of the install."""
    here = CHECKOUT / name
    return here if here.is_dir() else INSTALLED / name
