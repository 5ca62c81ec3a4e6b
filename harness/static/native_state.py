"""State across calls in kernel sources: every named object that outlives a call is immutable.

The rule, as the contract states it: an object of static or thread storage duration (at
namespace scope, named or anonymous, ``static`` or not; a class's ``static`` data member; a
``static`` or ``thread_local`` local; a ``__device__`` or ``__managed__`` variable) must be
``constexpr``, or ``const`` of an arithmetic type (arrays of it, and pointers whose every level
is const), or a ``__constant__`` with an initializer. ``__shared__`` memory lives for one block
and is fine. ``extern`` data (a library's global used as a slot) and ``mutable`` members (which a
const object does not protect) are refused. State kept in memory the allocator hands out again
is not a named object: the harness's dynamic checks (fresh and deterministic outputs) see it.

Read from tokens in one pass with a stack of scopes (namespace, class, block). The walker trusts
the braces it sees, so what would make it see other braces than the compiler is refused: candidate
macros at namespace or class scope (other than plain values and function specifiers), macro bodies
with unbalanced brackets or with storage keywords, and conditional groups that close a brace they
did not open, or that split a declaration.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.static.native_declarations import (
    CLASS_KEYS,
    NOT_FUNCTION,
    declared_name,
    is_type_only,
    looks_like_function,
    mutable_data,
    without_preamble,
)
from harness.static.native_lex import Lexed, Macro, Token

STORAGE_WORDS = {"static", "thread_local", "extern", "mutable", "__managed__", "__constant__",
                 "__thread", "namespace"}  # fmt: skip
# Namespaces of the libraries a kernel links with: the objects' data check trusts what is in
# them, so a candidate may not add to them.
LIBRARY_NAMESPACES = {"std", "c10", "at", "torch", "pybind11", "py", "caffe2", "__gnu_cxx",
                      "__cxxabiv1", "c10d", "cub", "thrust", "cuda", "nvcuda", "cutlass"}  # fmt: skip
BRACKETS = {"(": ")", "[": "]", "{": "}"}


def state_problems(lexed: Lexed) -> list[str]:
    """Reasons to refuse the source for state across calls; empty when it keeps none."""
    macros = {macro.name: macro for macro in lexed.macros}
    reasons = [reason for macro in lexed.macros for reason in _macro_problems(macro)]
    reasons += _Walker(lexed.code, macros).run()
    return list(dict.fromkeys(reasons))


def _macro_problems(macro: Macro) -> list[str]:
    words = sorted({t.text for t in macro.body if t.text in STORAGE_WORDS})
    if words:
        return [
            f"kernel source has storage keywords in a macro: {macro.name} uses "
            f"{', '.join(words)} (line {macro.line}; write declarations out)"
        ]
    if not _balanced(macro.body):
        return [
            f"kernel source has a macro with unbalanced brackets: {macro.name} (line {macro.line})"
        ]
    return []


def _balanced(tokens: list[Token]) -> bool:
    stack: list[str] = []
    for token in tokens:
        if token.text in BRACKETS:
            stack.append(BRACKETS[token.text])
        elif token.text in BRACKETS.values():
            if not stack or stack.pop() != token.text:
                return False
    return not stack


def _substitutable(macro: Macro, macros: dict[str, Macro]) -> bool:
    """An object-like macro the walker reads through: its body, with no statement or scope of
    its own and no other macro of the candidate's inside."""
    return not macro.function_like and not any(
        t.text in (";", "{", "}") or t.text in macros for t in macro.body
    )


@dataclass
class _Statement:
    """The tokens of one declaration at namespace or class scope, and what they hold so far."""

    tokens: list[Token] = field(default_factory=list)
    depth: int = 0
    function_parens: bool = False
    equals: bool = False
    namespace: bool = False
    class_key: bool = False
    enum: bool = False

    def add(self, token: Token) -> None:
        text = token.text
        previous = self.tokens[-1] if self.tokens else None
        if text in ("(", "["):
            if (
                text == "("
                and self.depth == 0
                and not self.equals
                and previous is not None
                and previous.kind == "id"
                and previous.text not in NOT_FUNCTION
            ):
                self.function_parens = True
            self.depth += 1
        elif text in (")", "]"):
            self.depth -= 1
        elif self.depth == 0:
            self.equals |= text == "="
            self.namespace |= text == "namespace"
            self.class_key |= text in CLASS_KEYS
            self.enum |= text == "enum"
        self.tokens.append(token)


class _Walker:
    def __init__(self, code: list[Token], macros: dict[str, Macro]) -> None:
        self.code = code
        self.macros = macros
        self.reasons: list[str] = []
        self.groups: list[int] = []  # the brace depth at each open #if

    def refuse(self, what: str, token: Token) -> None:
        self.reasons.append(f"kernel source {what} (line {token.line})")

    def run(self) -> list[str]:
        # Each entry: the scope's kind and the statement to resume when it closes.
        stack: list[tuple[str, _Statement | None]] = [("namespace", None)]
        statement = _Statement()
        index = 0
        while index < len(self.code):
            token = self.code[index]
            text = token.text
            if token.kind == "cond":
                self.conditional(token, len(stack))
            elif text == "}" and self.groups and len(stack) - 1 < self.groups[-1]:
                self.refuse("closes, inside a #if group, a brace opened before it", token)
            if stack[-1][0] in ("block", "init", "body"):
                if text in ("static", "thread_local", "__thread"):
                    index = self.local_static(index)
                    continue
                if text == "{":
                    stack.append(("block", None))
                elif text == "}":
                    role, saved = stack.pop()
                    if role != "block":  # back at namespace or class scope
                        statement = self.resumed(role, saved)
                elif token.kind != "cond":
                    self.check_word(token, index, in_block=True)
                index += 1
                continue
            if token.kind == "cond":
                if statement.tokens:
                    self.refuse("has a #if/#else/#endif inside a declaration", token)
            elif text == ";":
                self.declaration(statement, stack[-1][0])
                statement = _Statement()
            elif text == "{":
                role = self.brace_role(statement, token)
                stack.append((role, statement))
                if role in ("namespace", "class", "body"):
                    statement = _Statement()
            elif text == "}":
                if len(stack) == 1:
                    self.refuse("closes a brace it never opened", token)
                    return self.reasons
                role, saved = stack.pop()
                statement = self.resumed(role, saved)
            elif token.kind == "id" and text in self.macros:
                self.macro_outside_body(self.macros[text], token, statement)
            else:
                self.check_word(token, index, in_block=False)
                statement.add(token)
            index += 1
        if len(stack) > 1:
            self.refuse("leaves a brace open at the end", self.code[-1])
        return self.reasons

    def conditional(self, token: Token, depth: int) -> None:
        """Each #if group opens and closes its own braces: the walker reads every group."""
        if token.text in ("if", "ifdef", "ifndef"):
            self.groups.append(depth)
            return
        if not self.groups:
            self.refuse(f"has #{token.text} without #if", token)
            return
        if depth != self.groups[-1]:
            self.refuse(f"has a #if group that leaves braces open at #{token.text}", token)
        if token.text == "endif":
            self.groups.pop()

    def macro_outside_body(self, macro: Macro, token: Token, statement: _Statement) -> None:
        if _substitutable(macro, self.macros):
            for part in macro.body:
                statement.add(part)
            return
        self.refuse(
            f"uses its own macro {macro.name} outside a function body (at namespace or class "
            "scope the gate reads what is written, not what a macro expands to)",
            token,
        )

    def resumed(self, role: str, saved: _Statement | None) -> _Statement:
        """The statement after a scope closes: a class or initializer goes on to its ';'."""
        if role in ("class", "init") and saved is not None:
            saved.add(Token("punct", "{}", 0))
            return saved
        return _Statement()

    def brace_role(self, statement: _Statement, token: Token) -> str:
        if statement.namespace:
            words = [t.text for t in statement.tokens]
            after = words[words.index("namespace") + 1 :]
            if after and after[0] in LIBRARY_NAMESPACES:
                self.refuse(f"adds to a library's namespace: namespace {after[0]}", token)
            return "namespace"
        last = statement.tokens[-1] if statement.tokens else None
        if last is not None and last.kind == "str" and statement.tokens[0].text == "extern":
            return "namespace"  # extern "C" { ... }
        if statement.enum:
            return "init"
        if statement.class_key and not statement.function_parens and not statement.equals:
            return "class"
        if statement.equals or (
            not statement.function_parens
            and last is not None
            and (last.kind == "id" or last.text in ("]", ">"))
        ):
            return "init"
        return "body"

    def local_static(self, index: int) -> int:
        """A static local's declaration, checked whole; the index of its ';'."""
        depth, end = 0, index
        while end < len(self.code):
            text = self.code[end].text
            if self.code[end].kind == "cond":
                self.refuse("has a #if/#else/#endif inside a static declaration", self.code[end])
            if text in BRACKETS:
                depth += 1
            elif text in BRACKETS.values():
                depth -= 1
                if depth < 0:
                    break
            elif text == ";" and depth == 0:
                break
            end += 1
        tokens = self.code[index:end]
        if not looks_like_function(tokens):  # a local class's static member function
            self.data(tokens, "a static local (a static counter or cache)")
        return end

    def check_word(self, token: Token, index: int, in_block: bool) -> None:
        previous = self.code[index - 1].text if index > 0 else ""
        following = self.code[index + 1].text if index + 1 < len(self.code) else ""
        if token.text == "mutable" and previous not in (")", "]"):
            self.refuse("declares a mutable member (a const object does not protect it)", token)
        elif token.text == "extern" and in_block and following != "__shared__":
            self.refuse("declares extern data inside a function (a global used as a slot)", token)

    def declaration(self, statement: _Statement, scope: str) -> None:
        tokens = without_preamble(statement.tokens)
        if not tokens or is_type_only(tokens):
            return
        if statement.function_parens and looks_like_function(tokens):
            return
        if scope == "class" and not {"static", "thread_local"} & {t.text for t in tokens}:
            return  # an ordinary member: one per object
        where = "a class's static data member" if scope == "class" else "namespace-scope data"
        self.data(tokens, where)

    def data(self, tokens: list[Token], where: str) -> None:
        problem = mutable_data(tokens)
        if problem:
            name = declared_name(tokens)
            self.refuse(f"keeps state across calls in {where}: {name} ({problem})", tokens[0])
