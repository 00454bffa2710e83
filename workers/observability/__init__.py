"""Seeing and probing a running worker: Prometheus metrics and liveness / readiness probes.

``metrics`` holds the metric families, ``observed`` the decorators that feed them from the
listener's existing seams (its storage, its scaler's pool control, its handler), ``health`` the
probe decisions, ``server`` the HTTP endpoint, ``multiprocess`` the one endpoint of a supervisor
covering all its children, and ``process`` puts them together for one worker process.
"""
