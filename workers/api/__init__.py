"""What a user subclasses: ``QueueWorker`` and ``PeriodicJob`` (with the schedules jobs run on)."""
