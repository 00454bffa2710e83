"""Middleware that ship with cloudqueue, each on the one seam
(``cloudqueue.listener.consumer.middleware``)."""
