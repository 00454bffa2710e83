"""``python -m cloudqueue`` is the ``cloudqueue`` command."""

from cloudqueue.workers.cli import main

main()
