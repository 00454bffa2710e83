"""Middleware that ship with cloudqueue, each on the one seam (``listener.consumer.middleware``)."""
