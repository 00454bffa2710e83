"""One process running workers: ``WorkerHost`` and what it builds around each hosted worker
(listener, controls, keys, partitions, batches, async handlers, live state, periodic jobs)."""
