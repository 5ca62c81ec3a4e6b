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

from harness.static.native_lex import Lexed, Macro, Token

ARITHMETIC = set(
    "bool char char8_t char16_t char32_t wchar_t short int long signed unsigned float double "
    "size_t ssize_t ptrdiff_t intptr_t uintptr_t int8_t int16_t int32_t int64_t uint8_t "
    "uint16_t uint32_t uint64_t __half half __nv_bfloat16 __nv_bfloat162 __half2 dim3 "
    "float1 float2 float3 float4 double1 double2 double3 double4 int1 int2 int3 int4 uint1 "
    "uint2 uint3 uint4 long1 long2 long3 long4 longlong1 longlong2 longlong4 char1 char2 char4 "
    "uchar1 uchar2 uchar4 short1 short2 short4 ushort1 ushort2 ushort4 std".split()
)
QUALIFIERS = {
    "const", "static", "inline", "volatile", "__device__", "__host__", "__constant__",
    "__managed__", "__restrict__", "alignas", "__align__", "::", "unsigned", "signed",
}  # fmt: skip
STORAGE_WORDS = {"static", "thread_local", "extern", "mutable", "__managed__", "__constant__",
                 "__thread", "namespace"}  # fmt: skip
# Words before "(" that do not make a function declarator.
NOT_FUNCTION = {"alignas", "__align__", "__attribute__", "__declspec", "decltype", "sizeof",
                "alignof", "noexcept", "throw", "__launch_bounds__", "static_assert",
                "operator"} | ARITHMETIC  # fmt: skip
CLASS_KEYS = {"class", "struct", "union"}
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
        if not _looks_like_function(tokens):  # a local class's static member function
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
        tokens = _without_preamble(statement.tokens)
        if not tokens or _is_type_only(tokens):
            return
        if statement.function_parens and _looks_like_function(tokens):
            return
        if scope == "class" and not {"static", "thread_local"} & {t.text for t in tokens}:
            return  # an ordinary member: one per object
        where = "a class's static data member" if scope == "class" else "namespace-scope data"
        self.data(tokens, where)

    def data(self, tokens: list[Token], where: str) -> None:
        problem = _mutable_data(tokens)
        if problem:
            name = _declared_name(tokens)
            self.refuse(f"keeps state across calls in {where}: {name} ({problem})", tokens[0])


def _without_preamble(tokens: list[Token]) -> list[Token]:
    """Drop template headers and access labels, which do not change what is declared."""
    start = 0
    while start < len(tokens):
        text = tokens[start].text
        if text in ("public", "private", "protected") and start + 1 < len(tokens):
            start += 2
        elif text == "template" and start + 1 < len(tokens) and tokens[start + 1].text == "<":
            depth, start = 0, start + 1
            while start < len(tokens):
                depth += {"<": 1, ">": -1}.get(tokens[start].text, 0)
                start += 1
                if depth == 0:
                    break
        else:
            break
    return tokens[start:]


SKIPPED_STARTS = {"using", "typedef", "static_assert", "friend", "namespace", "template",
                  "enum", "__extension__"}  # fmt: skip


def _is_type_only(tokens: list[Token]) -> bool:
    """Aliases, assertions, forward declarations: nothing that holds a value."""
    first = tokens[0].text
    if first in SKIPPED_STARTS:
        return True
    if first in CLASS_KEYS:
        rest = [t for t in tokens[1:] if t.text not in ("{}", "final")]
        # "struct S;" or "struct S {...};" (no declarator after the body)
        return len(rest) <= 1 or (tokens[-1].text == "{}" and tokens[-2].kind == "id")
    return False


def _looks_like_function(tokens: list[Token]) -> bool:
    """``T name(params)``: the parentheses after the name hold parameter declarations."""
    for index, token in enumerate(tokens[1:], start=1):
        previous = tokens[index - 1]
        if token.text == "(" and previous.kind == "id" and previous.text not in NOT_FUNCTION:
            inside, depth = [], 0
            for part in tokens[index + 1 :]:
                if part.text in ("(", "["):
                    depth += 1
                elif part.text in (")", "]"):
                    if depth == 0:
                        break
                    depth -= 1
                inside.append(part)
            return _parameters(inside)
        if token.text == "=":
            return False
    return False


def _parameters(tokens: list[Token]) -> bool:
    if not tokens:
        return True
    segments: list[list[Token]] = [[]]
    depth = 0
    for token in tokens:
        depth += {"(": 1, ")": -1, "<": 1, ">": -1}.get(token.text, 0)
        if token.text == "," and depth == 0:
            segments.append([])
        else:
            segments[-1].append(token)
    for segment in segments:
        head = segment[: next((i for i, t in enumerate(segment) if t.text == "="), len(segment))]
        words = [t.text for t in head]
        if (
            not head
            or head[0].kind in ("num", "str", "chr")
            or head[0].text in ("-", "+", "&", "{")
        ):
            return False
        typed = len(head) >= 2 or words[0] in ARITHMETIC | {"void", "auto"} or words == ["..."]
        if not typed:
            return False
    return True


def _mutable_data(tokens: list[Token]) -> str:
    """Why a declaration's objects can change; empty when none can."""
    words = [t.text for t in tokens]
    if "extern" in words and "__shared__" not in words:
        return "extern data: a global defined elsewhere is state too"
    if "__shared__" in words or "constexpr" in words:
        return ""
    initialized = "=" in words or "{}" in words or "{" in words
    if "__constant__" in words:
        return (
            ""
            if initialized
            else "a __constant__ needs an initializer; pass per-call data as arguments"
        )
    if "const" not in words:
        return "not const: make it constexpr, or pass it in"
    for declarator in _declarators(tokens):
        before = declarator[
            : next((i for i, t in enumerate(declarator) if t.text in "=[({"), len(declarator))
        ]
        texts = [t.text for t in before]
        types = [t for t in texts[:-1] if t not in QUALIFIERS and t not in ("*", "&", "&&")]
        if any(t not in ARITHMETIC for t in types):
            return "const of a class type can still change (a tensor's data, a container's items): make it constexpr"
        stars = [i for i, t in enumerate(texts) if t in ("*", "&", "&&")]
        if stars and "const" not in texts[: stars[0]]:
            return "it points to data that is not const"
        if any(t == "*" and texts[i + 1 : i + 2] != ["const"] for i, t in enumerate(texts)):
            return "a pointer that is not itself const"
    return ""


def _declarators(tokens: list[Token]) -> list[list[Token]]:
    """The declaration split at its top-level commas (specifiers stay with the first part)."""
    parts: list[list[Token]] = [[]]
    depth = 0
    for token in tokens:
        depth += {"(": 1, ")": -1, "[": 1, "]": -1, "{": 1, "}": -1}.get(token.text, 0)
        if token.text == "," and depth == 0:
            parts.append([])
        else:
            parts[-1].append(token)
    specifiers = [t for t in parts[0] if t.text in QUALIFIERS or t.text in ARITHMETIC]
    return [parts[0], *([*specifiers, *part] for part in parts[1:])]


def _declared_name(tokens: list[Token]) -> str:
    end = next((i for i, t in enumerate(tokens) if t.text in ("=", "[", "(", "{")), len(tokens))
    named = [t.text for t in tokens[:end] if t.kind == "id"]
    return named[-1] if named else tokens[0].text
