"""``python -m workers`` is the ``cloudqueue`` command."""

from workers.cli import main

main()
