"""What a declaration in kernel sources declares, read from its tokens for
``harness.static.native_state`` (which walks the scopes): whether it is a function or only a
type, its declarators and the names they declare, and whether the data it declares could hold
state across calls (anything but ``constexpr`` or ``const`` of an arithmetic type).
"""

from __future__ import annotations

from harness.static.native_lex import Token

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
# Words before "(" that do not make a function declarator.
NOT_FUNCTION = {"alignas", "__align__", "__attribute__", "__declspec", "decltype", "sizeof",
                "alignof", "noexcept", "throw", "__launch_bounds__", "static_assert",
                "operator"} | ARITHMETIC  # fmt: skip
CLASS_KEYS = {"class", "struct", "union"}


def without_preamble(tokens: list[Token]) -> list[Token]:
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


def is_type_only(tokens: list[Token]) -> bool:
    """Aliases, assertions, forward declarations: nothing that holds a value."""
    first = tokens[0].text
    if first in SKIPPED_STARTS:
        return True
    if first in CLASS_KEYS:
        rest = [t for t in tokens[1:] if t.text not in ("{}", "final")]
        # "struct S;" or "struct S {...};" (no declarator after the body)
        return len(rest) <= 1 or (tokens[-1].text == "{}" and tokens[-2].kind == "id")
    return False


def looks_like_function(tokens: list[Token]) -> bool:
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
            return parameters(inside)
        if token.text == "=":
            return False
    return False


def parameters(tokens: list[Token]) -> bool:
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


def mutable_data(tokens: list[Token]) -> str:
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
    for declarator in declarators(tokens):
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


def declarators(tokens: list[Token]) -> list[list[Token]]:
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


def declared_name(tokens: list[Token]) -> str:
    end = next((i for i, t in enumerate(tokens) if t.text in ("=", "[", "(", "{")), len(tokens))
    named = [t.text for t in tokens[:end] if t.kind == "id"]
    return named[-1] if named else tokens[0].text
