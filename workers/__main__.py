"""``python -m cloudqueue.workers`` is the ``cloudqueue`` command."""

from cloudqueue.workers.cli import main

main()
