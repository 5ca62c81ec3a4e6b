"""The text of the follow-up's drop-in module and of the runtime the drop-ins share (pure: text
in, text out); the drop-in's test file is ``bot.pr.dropin_test``.

The verified kernel has no backward, and its file compiles the kernel when imported. So the
drop-in class ``<Class>Kernelpilot`` subclasses the user's class (the same constructor,
parameters, buffers and ``state_dict``; importing it builds nothing) and runs the verified
``ModelNew`` only where it was verified: no backward needed, its device and dtype, autocast off.
Where a backward is needed (grad mode on and an input or a parameter requires grad) the user's
own forward runs, so autograd works as before. The kernel is built on the first forward that
runs it, or ahead of time (``python -m <package>.<module>_kernelpilot --build``), and cached by
content hash per machine: later processes load it with no compiler or ninja. Where it cannot be
built or loaded, one warning, and the user's forward.

That code is the same for every drop-in: ``bot.pr.shipped`` holds it as real modules
(``kernel_cache``: the cache; ``kernel_dropin``: the class and the build), joined here into one
runtime file beside the drop-ins, ``kernelpilot_runtime_<hash>.py``. Its name is its content's
hash: a drop-in imports the code it was shipped with, whatever a later kernelpilot ships beside
it, and drop-ins in one folder share one copy. The drop-in itself is short: what is particular
to its target. The verified kernel stays in a file of its own, byte for byte what was verified:
the gates and the nightly check that file, and the drop-in and the runtime are our text alone.
"""

from __future__ import annotations

import ast
import hashlib
from functools import cache
from pathlib import Path, PurePosixPath

from bot.pr.results import TargetSource

SHIPPED = Path(__file__).parent / "shipped"
SHIPPED_MODULES = ("kernel_cache.py", "kernel_dropin.py")
IMPORTS_MARK = "# kernelpilot: shipped imports\n"
CODE_MARK = "# kernelpilot: shipped code\n"
RUNTIME_PREFIX = "kernelpilot_runtime_"


def dropin_module(source: TargetSource, verified_path: PurePosixPath, header: list[str]) -> str:
    """The drop-in module beside the user's: ``header`` (comment lines), then the class."""
    cls = source.class_name
    original = PurePosixPath(source.module_path).stem
    kernel = verified_path.with_name(
        verified_path.name.replace("_verified_kernelpilot", "_kernelpilot")
    )
    dotted = str(kernel.with_suffix("")).replace("/", ".")
    init = init_arguments(source, f"_sibling({original!r})")
    init_imports = "".join(f"        {line}\n" for line in source.init_imports)
    runtime, _ = runtime_module()
    return (
        "\n".join(header)
        + f'''
import importlib
import sys

import torch


def _name(stem):
    """The importable name of a module beside this file: in its package, if it is in one."""
    return f"{{__package__}}.{{stem}}" if __package__ else stem


def _sibling(stem):
    return importlib.import_module(_name(stem))


_runtime = _sibling({runtime!r})  # what every kernelpilot drop-in shares
KernelUnavailableWarning = _runtime.KernelUnavailableWarning


class {cls}Kernelpilot(_runtime.KernelpilotDropin, _sibling({original!r}).{cls}):
    """{cls}, with the verified kernel of {verified_path.name} where it was verified."""

    _kernelpilot_verified = _name({verified_path.stem!r})
    _kernelpilot_dotted = __spec__.name if __spec__ else __name__
    _kernelpilot_device = {source.device!r}
    _kernelpilot_dtype = torch.{source.dtype}

    @staticmethod
    def _kernelpilot_init():
        """The constructor arguments it was verified with: what build() builds it with."""
{init_imports}        return {init}


def build():
    """Build the kernel into this machine's cache, or find it there, as `python -m
    {dotted} --build` does: the cache folders. Raises what stopped it."""
    return _runtime.build({cls}Kernelpilot)


if __name__ == "__main__":
    sys.exit(_runtime.main({cls}Kernelpilot, sys.argv[1:]))
'''
    )


@cache
def runtime_module() -> tuple[str, str]:
    """The runtime the drop-ins import: its module name (from its content's hash) and text."""
    imports: list[str] = []
    bodies = []
    for name in SHIPPED_MODULES:
        text = (SHIPPED / name).read_text()
        head, body = text.split(IMPORTS_MARK, 1)[1].split(CODE_MARK, 1)
        imports += _shipped_imports(head)
        bodies.append(body.strip("\n"))
    code = _import_block(imports) + "\n\n" + "\n\n\n".join(bodies) + "\n"
    name = RUNTIME_PREFIX + hashlib.sha256(code.encode()).hexdigest()[:12]
    header = [
        f"# {name}: what kernelpilot's drop-ins beside it share (bot/pr/shipped in kernelpilot): "
        "the build cache of their kernels, and the class that runs a kernel where it was verified "
        "and the original forward elsewhere.",
        "# Its name is its content's hash: each drop-in imports the code it was shipped with. "
        "It needs torch and the standard library alone.",
        "",
    ]
    return name, "\n".join(header) + code


def _shipped_imports(head: str) -> list[str]:
    """A shipped module's import lines, less its imports of the other shipped modules (the
    runtime holds them)."""
    lines, skipping = [], False
    for line in head.splitlines():
        if line.startswith("from bot."):
            skipping = line.rstrip().endswith("(")
        elif skipping:
            skipping = not line.startswith(")")
        elif line.strip():
            lines.append(line)
    return lines


def _import_block(lines: list[str]) -> str:
    """One block, ordered as isort orders it: the future, the standard library, then torch."""
    unique = list(dict.fromkeys(lines))
    future = [line for line in unique if line.startswith("from __future__")]
    torch = [line for line in unique if line.split()[1].split(".")[0] == "torch"]
    standard = sorted(
        (line for line in unique if line not in future and line not in torch),
        key=lambda line: (line.startswith("from"), line.split()[1]),
    )
    return "\n\n".join("\n".join(group) for group in (future, standard, sorted(torch)) if group)


def init_arguments(source: TargetSource, module: str) -> str:
    """The constructor's arguments as configured or captured, an expression over ``module``
    (the user's)."""
    if source.init_call is not None:
        expression = ast.parse(source.init_call, mode="eval").body
        if isinstance(expression, ast.Dict):
            return f"[], {source.init_call}"
        return f"list({source.init_call}), {{}}"
    if source.init_fn:
        return f"list({module}.{source.init_fn}()), {{}}"
    return f"{source.init_args!r}, {source.init_kwargs!r}"
