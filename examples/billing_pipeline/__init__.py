"""The design's billing pipeline: initiator → processors → controller, exactly-once in effect.

See README.md in this folder; ``python -m examples.billing_pipeline`` runs it.
"""
