"""Zero-config targets: how each changed module is built and called, found by running code the
repository already has (its tests, or a command the user names) with hooks on those classes.

``records``: what a capture found (pydantic, crosses the worker boundary); ``hooks``: the
recording, inside the worker; ``worker``: the sandboxed worker that runs the tests or the command;
``run``: the parent's side, the worker started and its findings made into Problems; ``freeze``:
captured targets written out as TOML and a factory file (``kernelpilot targets --write``).
"""
