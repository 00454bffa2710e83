"""Reading a running worker's /metrics, /healthz and /readyz over real HTTP."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def get(port: int, path: str) -> tuple[int, str]:
    """The status code and body of ``GET path`` (a 503 is an answer, not an error)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def scrape(port: int) -> Samples:
    """Every sample of /metrics, parsed by prometheus_client, keyed by name and labels."""
    status, body = get(port, "/metrics")
    assert status == 200, body
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; 0 when the series is absent."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def port_answers(port: int) -> bool:
    try:
        return get(port, "/healthz")[0] in (200, 503)
    except OSError:
        return False
