"""Resumable multi-step work (seed 004): close an account in steps that survive a crash.

See README.md in this folder; ``python -m examples.resumable`` runs it.
"""
