"""A provider's automatic prompt cache as the fake OpenAI server (``tests.fake_openai``)
counts it: OpenAI's rule, the longest prefix a prompt shares with an earlier request, from
1,024 tokens on, in steps of 128 tokens; a token is taken as 4 bytes."""

from __future__ import annotations

import json
from typing import Any

CACHE_MIN_TOKENS = 1024  # OpenAI caches a prompt's prefix from 1,024 tokens on,
CACHE_STEP_TOKENS = 128  # in steps of 128 tokens
BYTES_PER_TOKEN = 4  # the fake's tokenizer: about right for English and code


def prefix_cache_usage(prompt: bytes, earlier: list[bytes]) -> tuple[int, int]:
    """(prompt tokens, cached tokens) of ``prompt`` after the ``earlier`` prompts: the longest
    prefix it shares with one of them, counted from 1,024 tokens on, in steps of 128."""
    shared = max((_common_prefix(prompt, before) for before in earlier), default=0)
    shared_tokens = shared // BYTES_PER_TOKEN
    cached = 0
    if shared_tokens >= CACHE_MIN_TOKENS:
        steps = (shared_tokens - CACHE_MIN_TOKENS) // CACHE_STEP_TOKENS
        cached = CACHE_MIN_TOKENS + steps * CACHE_STEP_TOKENS
    return -(-len(prompt) // BYTES_PER_TOKEN), cached


def counted_usage(reply: bytes, request: Any, earlier: list[Any]) -> bytes:
    """The chat-completion body ``reply`` with its usage counted from the ``request`` body
    after the ``earlier`` ones: prompt tokens, and the cached ones in
    ``prompt_tokens_details`` as OpenAI sends them."""
    prompt, cached = prefix_cache_usage(
        prompt_bytes(request), [prompt_bytes(body) for body in earlier]
    )
    data = json.loads(reply)
    completion_tokens = data["usage"]["completion_tokens"]
    data["usage"] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
    }
    return json.dumps(data).encode()


def prompt_bytes(body: Any) -> bytes:
    """A chat request's messages as the fake's cache sees them: in order, role by content."""
    messages = body.get("messages", []) if isinstance(body, dict) else []
    return "".join(f"<{m.get('role')}>{m.get('content')}" for m in messages).encode()


def _common_prefix(a: bytes, b: bytes) -> int:
    size = min(len(a), len(b))
    return next((i for i in range(size) if a[i] != b[i]), size)
