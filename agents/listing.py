"""Each kernel's code shown once per prompt: a kernel listed again is referred to, and one that
is mostly code the prompt already shows is listed as a diff against it.

Why: kernels of one search share most of their text. The offline proposer's kernel carries a
helper library of about 15,000 characters, and every kernel grown from it keeps that library,
so a planner prompt listing the selected kernel, its children and the leaderboard held up to
four copies of it and grew with every step. A unified diff against the closest kernel shown in
full keeps what each kernel changed (the part worth reading) and drops what it did not.

``ShownCode`` is the state of one prompt: the kernels shown in full so far, in the order the
prompt lists them (the code being edited first: it is always shown whole), and the ids already
listed. ``show`` says how the next kernel would be shown, ``keep`` records it once the window
has room for it (a kernel left out is no base for a diff).
"""

from __future__ import annotations

import difflib

from agents.context_records import KernelSummary

DIFF_SHARE = 0.5  # a diff is shown when it is shorter than this share of the kernel's code
DIFF_CONTEXT_LINES = 3


class ShownCode:
    def __init__(self, first: KernelSummary | None = None) -> None:
        self.full: list[KernelSummary] = []
        self.listed: set[str] = set()
        if first is not None:
            self.keep(first, first)

    def show(self, kernel: KernelSummary) -> KernelSummary:
        """``kernel`` as this prompt would show it next: a reference to its earlier listing, a
        diff against the kernel shown in full whose diff is shortest (when that is short
        enough), or its whole code. Nothing changes until it is kept (``keep``)."""
        if kernel.node_id in self.listed:
            listed = {"code": "", "detail": "", "shown": "listed", "base": kernel.node_id}
            return kernel.model_copy(update=listed)
        best: tuple[str, str] | None = None
        if kernel.code.strip():
            for base in self.full:
                diff = unified_diff(base, kernel)
                if best is None or len(diff) < len(best[1]):
                    best = (base.node_id, diff)
        if best is not None and len(best[1]) < DIFF_SHARE * len(kernel.code):
            return kernel.model_copy(update={"code": best[1], "shown": "diff", "base": best[0]})
        return kernel

    def keep(self, kernel: KernelSummary, as_shown: KernelSummary) -> None:
        """``kernel`` is in the prompt, as ``as_shown``: listed from now on, and when shown
        whole, a base for later diffs (its whole code: a diff's context lines are its own)."""
        self.listed.add(kernel.node_id)
        if as_shown.shown == "code" and kernel.code.strip():
            self.full.append(kernel)


def unified_diff(base: KernelSummary, kernel: KernelSummary) -> str:
    """``kernel``'s code as changes to ``base``'s (empty: the same code)."""
    lines = difflib.unified_diff(
        base.code.splitlines(),
        kernel.code.splitlines(),
        fromfile=f"kernel {base.node_id}",
        tofile=f"kernel {kernel.node_id}",
        n=DIFF_CONTEXT_LINES,
        lineterm="",
    )
    return "\n".join(lines)
