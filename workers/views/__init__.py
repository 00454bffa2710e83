"""Read models shared by the command line and the dashboard: what they show, computed once.

``snapshot`` is one queue at one refresh (``cloudqueue status QUEUE``), ``fleet`` the running
workers on it, ``queue_facts`` the queue's own depth split, ``overview`` every queue of the store,
``jobs`` the running periodic jobs, ``queue_list`` the rows of ``queues list``, ``poison`` what a
poison message says, and ``sampler`` the dashboard's sampled state with its history. They read
storage and the live-state files and return plain values; ``cloudqueue.workers.cli`` and
``cloudqueue.workers.dashboard`` only word, draw and serve them.
"""
