"""Worker and job class mistakes refused at load by ``run_until_drained`` and ``load_target``
(as by ``cloudqueue run``), each in one line naming the class; what is right still passes."""

from __future__ import annotations

import sys
import types
from datetime import datetime
from typing import Any

import pytest
from pydantic import BaseModel

from cloudqueue.listener import Middleware
from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.workers import PeriodicJob, QueueWorker
from cloudqueue.workers.api.periodic_job import load_target
from cloudqueue.workers.testing import run_until_drained


class Email(BaseModel):
    to: str
    subject: str


class Sms(BaseModel):
    number: str


class NoItemType(QueueWorker):  # type: ignore[type-arg]  # the mistake under test
    queue_name = "letters"

    def handle(self, item: Any) -> None:
        pass


class CeleryStyle(QueueWorker[Email]):
    queue_name = "letters"

    def handle(self, to: str, subject: str) -> None:  # type: ignore[override]
        pass


class Both(QueueWorker[Email]):
    queue_name = "letters"

    def handle(self, item: Email) -> None:
        pass

    def handle_batch(self, items: list[Email]) -> None:
        pass


class Neither(QueueWorker[Email]):
    queue_name = "letters"


class MisspeltSection(QueueWorker[Email]):
    queue_name = "letters"
    settings = {"scalling": {"max_threads": 2}}  # noqa: RUF012 - as users write it

    def handle(self, item: Email) -> None:
        pass


class BatchOfNothing(QueueWorker[Email]):
    queue_name = "letters"

    def handle_batch(self) -> None:  # type: ignore[override]
        pass


class CeleryHook(QueueWorker[Email]):
    queue_name = "letters"

    def handle(self, item: Email) -> None:
        pass

    def on_failure(self, error: Exception) -> None:
        pass


class AsyncOnStop(QueueWorker[Email]):
    queue_name = "letters"

    def handle(self, item: Email) -> None:
        pass

    async def on_stop(self) -> None:  # type: ignore[override]
        pass


class OnStartWithoutListener(QueueWorker[Email]):
    queue_name = "letters"

    def handle(self, item: Email) -> None:
        pass

    def on_start(self) -> None:  # type: ignore[override]
        pass


MISTAKES = {
    NoItemType: "'NoItemType' has no item type: declare it as class NoItemType(QueueWorker[Item])",
    CeleryStyle: "'CeleryStyle': handle(self, to, subject) must take one item",
    Both: "'Both' defines both handle and handle_batch",
    Neither: "'Neither' does not define handle(self, item) or handle_batch(self, items)",
    MisspeltSection: "unknown setting scalling.max_threads in settings of MisspeltSection: "
    "did you mean scaling.max_threads?",
    BatchOfNothing: "'BatchOfNothing': handle_batch(self) must take one list of items",
    CeleryHook: "'CeleryHook' defines on_failure, which is never called; the hooks are on_start",
    AsyncOnStop: "'AsyncOnStop': on_stop is called as a plain function, not awaited",
    OnStartWithoutListener: "'OnStartWithoutListener': on_start(self) must take the listener, "
    "as def on_start(self, listener)",
}


@pytest.mark.parametrize(
    ("worker", "message"), MISTAKES.items(), ids=[worker.__name__ for worker in MISTAKES]
)
def test_run_until_drained_refuses_the_mistake_before_anything_runs(
    worker: type[QueueWorker[Any]], message: str
) -> None:
    """ConfigurationError in one line, the same one `cloudqueue run` prints."""
    with pytest.raises(ConfigurationError) as refused:
        run_until_drained(worker, [])
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_load_target_refuses_a_worker_mistake_naming_the_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """load_target (behind `cloudqueue run` and `config show`) names MODULE:CLASS."""
    module = types.ModuleType("celery_port")
    module.CeleryStyle = CeleryStyle  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "celery_port", module)
    with pytest.raises(ConfigurationError, match="'celery_port:CeleryStyle': handle"):
        load_target("celery_port:CeleryStyle")


class Union(QueueWorker[Email | Sms]):
    queue_name = "letters"

    def handle(self, item: Email | Sms) -> None:
        pass


class PlainText(QueueWorker):  # type: ignore[type-arg]  # the explicit spelling
    queue_name = "letters"
    item_type = str

    def handle(self, item: str) -> None:
        pass


class Mixed(QueueWorker[Email], Middleware):  # type: ignore[misc]
    """A worker that is also a middleware: its ``on_*`` methods are the middleware's hooks."""

    queue_name = "letters"

    def handle(self, item: Email) -> None:
        pass

    def on_scaled(self, event: Any) -> None:
        pass


def test_a_union_an_explicit_item_type_and_a_middleware_mixin_pass() -> None:
    """A union of models is an item type; ``item_type = str`` says "plain text" explicitly."""
    assert run_until_drained(Union, [Sms(number="1")]) == [Sms(number="1")]
    assert run_until_drained(PlainText, ["hi"]) == ["hi"]
    assert run_until_drained(Mixed, []) == []


class TicklessJob(PeriodicJob):
    every_s = 5

    def run(self) -> None:  # type: ignore[override]
        pass


class AsyncStartJob(PeriodicJob):
    every_s = 5

    def run(self, tick: datetime) -> None:
        pass

    def startup_async(self) -> None:
        pass


@pytest.mark.parametrize(
    ("job", "message"),
    [
        (TicklessJob, "run(self) must take one tick, as def run(self, tick)"),
        (AsyncStartJob, "defines startup_async, which is never called"),
    ],
)
def test_a_job_mistake_is_refused_at_load(
    job: type[PeriodicJob], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = types.ModuleType("jobs_here")
    module.Job = job  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "jobs_here", module)
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_target("jobs_here:Job")
