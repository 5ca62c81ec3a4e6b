"""``python -m bot.cli``: the ``kernelpilot`` command."""

from bot.cli import main

main()
