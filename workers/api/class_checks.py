"""What a worker or job class is refused for at load, before any queue is touched.

Each mistake here would otherwise show only later, and far from its cause: a handler whose
signature cannot take one item fails every message (retried, then poisoned), and a hook that is
never called (``on_start_async``, Celery's ``on_failure``) or a coroutine where a plain call is
expected (``async def on_stop``) is silently dropped. These functions take the base class
(``QueueWorker``, ``PeriodicJob``) whose own methods are the defaults, so that they serve both
without importing either.
"""

from __future__ import annotations

import collections.abc
import inspect
import types
import typing
from typing import Any

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.imports import closest

LIFECYCLE_HOOKS = ("startup", "shutdown")
"""Hooks that may be ``def`` or ``async def``: run on the event loop of the async handlers."""
NOTHING = "no argument"
PLAIN_HOOKS = {"on_start": "startup", "on_stop": "shutdown"}
"""Hooks called as plain functions, each with the lifecycle hook to use for async work."""
PLAIN_HOOK_SHAPES = {
    "on_start": ("the listener", "on_start(self, listener)"),
    "on_stop": (NOTHING, "on_stop(self)"),
}


def defines(cls: type, base: type, name: str) -> bool:
    """True when ``cls`` overrides ``base``'s method ``name``."""
    return getattr(cls, name) is not getattr(base, name)


def check_takes(cls: type, target: str, name: str, what: str, shape: str) -> None:
    """Refuse a method ``name`` that cannot be called with ``what`` (``one item``, ``nothing``:
    one positional argument besides ``self``, or none); ``shape`` shows the right one."""
    arguments = 0 if what == NOTHING else 1
    raw = inspect.getattr_static(cls, name)
    bound = isinstance(raw, staticmethod | classmethod)  # no self to pass
    method = getattr(cls, name)
    if not callable(method):
        raise ConfigurationError(f"{target!r}: {name} must be a method taking {what}, def {shape}")
    try:
        signature = inspect.signature(method)
    except ValueError:
        return  # a builtin without a signature to read: nothing refused
    try:
        signature.bind(*[None] * (arguments + (0 if bound else 1)))
    except TypeError:
        raise ConfigurationError(
            f"{target!r}: {name}{_plain(signature)} must take {what}, as def {shape}"
        ) from None


def _plain(signature: inspect.Signature) -> str:
    """``(self, to, subject)``: the parameters as written, without their annotations."""
    empty = inspect.Parameter.empty
    parameters = [p.replace(annotation=empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=parameters, return_annotation=empty))


def check_item_type(cls: type, target: str) -> None:
    """Refuse a worker without an item type (it would hand its handler raw text)."""
    if getattr(cls, "item_type", None) is None:
        raise ConfigurationError(
            f"{target!r} has no item type: declare it as class {cls.__name__}(QueueWorker[Item]) "
            "(QueueWorker[str] for plain text), or set item_type = Item"
        )


def item_type_argument(argument: Any) -> Any:
    """The item type a ``QueueWorker[argument]`` declares, or None for a type variable (a
    generic base class, whose subclasses declare it)."""
    return None if isinstance(argument, typing.TypeVar) else argument


def check_chain(cls: type, base: type, target: str) -> None:
    """Refuse a ``then`` that is no worker class, on a batch handler, leading back to ``cls``,
    or contradicted by the handler's return annotation (``cloudqueue.listener.workflows
    .chains``)."""
    then = getattr(cls, "then", None)
    if then is None:
        return
    if not (isinstance(then, type) and issubclass(then, base)):
        raise ConfigurationError(
            f"{target!r}: then must be the next step's worker class (a QueueWorker subclass), "
            f"got {then!r}"
        )
    if defines(cls, base, "handle_batch"):
        raise ConfigurationError(
            f"{target!r}: then needs handle(self, item): a batch call's items come from several "
            "messages that settle one by one, so its one return value has no message to follow"
            f" (send on from handle_batch with {then.__name__}.send_many)"
        )
    check_item_type(then, then.__qualname__)
    _check_no_loop(cls, target)
    returned, item_type = _return_annotation(cls), getattr(then, "item_type", None)
    if returned is not None and not _returns_items_of(returned, item_type):
        raise ConfigurationError(
            f"{target!r}: handle returns {_named(returned)}, but then = {then.__name__} takes "
            f"{_named(item_type)}: return one of those, a list of them, or None"
        )


def _check_no_loop(cls: type, target: str) -> None:
    seen: set[type] = {cls}
    step: Any = getattr(cls, "then", None)
    while isinstance(step, type):
        if step in seen:
            raise ConfigurationError(
                f"{target!r}: then leads back to {step.__name__}: a chain must end"
            )
        seen.add(step)
        step = getattr(step, "then", None)


def _return_annotation(cls: type) -> Any:
    """The return annotation of ``cls.handle`` (an ``async def``'s inner one); None when it has
    none or it cannot be resolved (a name defined in a function's body)."""
    try:
        hints = typing.get_type_hints(cls.handle)  # type: ignore[attr-defined]
    except Exception:  # an annotation that cannot be resolved is not refused
        return None
    return hints.get("return")


_SEQUENCES = (list, tuple, typing.Sequence, collections.abc.Sequence)
_UNIONS = (typing.Union, types.UnionType)


def _returns_items_of(returned: Any, item_type: Any) -> bool:
    """True unless the annotation clearly contradicts: every part of it (a union's members, a
    sequence's items) is the item type, a subclass of it, or ``Any``; None alone is not."""
    origin = typing.get_origin(returned)
    if origin in _UNIONS:
        parts = [part for part in typing.get_args(returned) if part is not type(None)]
        return bool(parts) and all(_returns_items_of(part, item_type) for part in parts)
    if origin in _SEQUENCES and typing.get_args(returned):
        return all(
            part is Ellipsis or _is_item(part, item_type) for part in typing.get_args(returned)
        )
    return _is_item(returned, item_type)


def _is_item(part: Any, item_type: Any) -> bool:
    if part is Any or item_type is Any or part == item_type:
        return True
    if typing.get_origin(item_type) in _UNIONS:
        return any(_is_item(part, member) for member in typing.get_args(item_type))
    if isinstance(part, type) and isinstance(item_type, type):
        return issubclass(part, item_type)
    # Generics (dict[str, int] for dict[str, Any]): the same container is not contradicted.
    return (typing.get_origin(part) or part) is (typing.get_origin(item_type) or item_type)


def _named(annotation: Any) -> str:
    if annotation is type(None):
        return "None"
    return annotation.__name__ if isinstance(annotation, type) else str(annotation)


def check_hooks(cls: type, base: type, target: str) -> None:
    """Refuse a hook that would never be called, or whose coroutine would never be awaited:
    an ``async def`` plain hook, an ``on_*`` or ``*_async`` method the base does not have."""
    for name, instead in PLAIN_HOOKS.items():
        if not hasattr(base, name):
            continue
        if inspect.iscoroutinefunction(getattr(cls, name)):
            raise ConfigurationError(
                f"{target!r}: {name} is called as a plain function, not awaited: make it a "
                f"def, or put the async work in async def {instead}(self)"
            )
        what, shape = PLAIN_HOOK_SHAPES[name]
        check_takes(cls, target, name, what, shape)
    for name in LIFECYCLE_HOOKS:
        check_takes(cls, target, name, NOTHING, f"{name}(self)")
    known = sorted(n for n in vars(base) if n.startswith("on_") or n in LIFECYCLE_HOOKS)
    for name in _user_methods(cls, base):
        stem = name.removesuffix("_async")
        if stem != name and hasattr(base, stem):
            instead = PLAIN_HOOKS.get(stem, stem)
            raise ConfigurationError(
                f"{target!r} defines {name}, which is never called: define async def "
                f"{instead}(self{'' if instead in LIFECYCLE_HOOKS else ', ...'}) instead"
            )
        if name.startswith("on_") and not hasattr(base, name):
            suggestion = closest(name, [*known, *LIFECYCLE_HOOKS])
            hint = f": did you mean {suggestion}?" if suggestion else ""
            raise ConfigurationError(
                f"{target!r} defines {name}, which is never called; the hooks are "
                f"{', '.join(sorted({*known, *LIFECYCLE_HOOKS}))}{hint}"
            )


def _user_methods(cls: type, base: type) -> list[str]:
    """Methods the user's own classes define, leaving out what a mixin (say a ``Middleware``)
    brings: its ``on_*`` methods are its own hooks."""
    from_mixins = {
        name
        for klass in cls.__mro__
        if not (isinstance(klass, type) and issubclass(klass, base))
        for name in vars(klass)
    }
    return [
        name
        for klass in cls.__mro__
        if issubclass(klass, base) and klass is not base
        for name, value in vars(klass).items()
        if callable(value) and not name.startswith("_") and name not in from_mixins
    ]


__all__ = [
    "LIFECYCLE_HOOKS",
    "PLAIN_HOOKS",
    "check_chain",
    "check_hooks",
    "check_item_type",
    "check_takes",
    "defines",
    "item_type_argument",
]
