"""When a storage call returns: after the service's latency, and, with a limited service, after
the calls asked for before it.

Azure serves 2,000 messages a second on one queue: a pool rarely waits for it, and every call
simply takes ``ServiceModel.request_latency_s``. An emulator on a shared machine answers a few
hundred calls a second: with ``ServiceModel.storage_calls_per_s`` set, calls are answered one
at a time at that rate, in the order asked -- the producer's puts among them -- so a burst's
deletes queue up behind its puts and each other as they did.
"""

from __future__ import annotations

from cloudqueue.listener.simulation.report import ServiceModel


class StorageLine:
    """The storage service as the simulated calls meet it."""

    def __init__(self, service: ServiceModel) -> None:
        self.latency_s = service.request_latency_s
        self.calls_per_s = service.storage_calls_per_s
        self._free_s = 0.0

    @property
    def limited(self) -> bool:
        """True when calls wait for the ones ahead of them."""
        return self.calls_per_s is not None

    def answers_s(self, asked_s: float) -> float:
        """When a call asked for at ``asked_s`` returns (and, if limited, takes its turn)."""
        if self.calls_per_s is None:
            return asked_s + self.latency_s
        starts_s = max(asked_s, self._free_s)
        self._free_s = starts_s + 1.0 / self.calls_per_s
        return max(asked_s + self.latency_s, self._free_s)
