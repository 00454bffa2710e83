"""Workflows on the queue's own store: groups of messages whose completion fires exactly once
(``cloudqueue.listener.workflows.group_ledger``). On the middleware seam and the stores'
protocol, so the loop core does not learn about groups."""
