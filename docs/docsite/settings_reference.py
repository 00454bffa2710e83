"""The settings reference: every key of ``CloudQueueSettings`` with its type, default, unit,
bounds, environment variable and meaning.

The meaning is the field's ``description`` when the model has one, else the comment beside the
key in ``config/cloudqueue.toml`` (the annotated file of defaults), so the page says what the
two sources say and never a third thing.
"""

from __future__ import annotations

import json
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from cloudqueue.workers.settings import DEFAULT_CONFIG_FILE, CloudQueueSettings
from cloudqueue.workers.settings.keys import env_name
from docsite.cells import cell

ROOT = Path(__file__).resolve().parents[2]
TOML_FILE = ROOT / DEFAULT_CONFIG_FILE

_UNITS = (
    ("_per_s", "per second"),
    ("_ms", "milliseconds"),
    ("_s", "seconds"),
    ("_usd", "US dollars"),
    ("_cores", "CPU cores"),
)
_KEY_LINE = re.compile(
    r"^#?\s*(?P<key>[a-z_0-9]+)\s*=\s*(?P<value>.*?)(?:\s+#\s*(?P<comment>.*))?$"
)
_SECTION_LINE = re.compile(r"^\[(?P<section>[a-z_]+)\]\s*$")
_READABLE: dict[Any, str] = {SecretStr: "secret string", Path: "path"}


@dataclass(frozen=True, slots=True)
class Setting:
    """One row of the reference."""

    key: str
    type: str
    default: str
    unit: str
    bounds: str
    environment: str
    description: str


@dataclass(frozen=True, slots=True)
class TomlNotes:
    """What ``config/cloudqueue.toml`` says beside each key and under each section header."""

    keys: dict[str, str]
    sections: dict[str, str]


def settings() -> Iterator[tuple[str | None, list[Setting]]]:
    """The top-level settings (section None), then each section's, in the model's order."""
    notes = toml_notes()
    top: list[Setting] = []
    sections: list[tuple[str | None, list[Setting]]] = []
    for name, field in CloudQueueSettings.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            rows = [
                _setting(f"{name}.{key}", sub, notes)
                for key, sub in annotation.model_fields.items()
            ]
            sections.append((name, rows))
        else:
            top.append(_setting(name, field, notes))
    yield None, top
    yield from sections


def toml_notes(path: Path = TOML_FILE) -> TomlNotes:
    """The comments of the annotated settings file, by dotted key and by section."""
    keys: dict[str, str] = {}
    sections: dict[str, str] = {}
    section = ""
    block: list[str] = []
    header_open = False  # comment lines right under a [section] header describe the section
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        header = _SECTION_LINE.match(line)
        key_line = _KEY_LINE.match(line)
        if header:
            section, block, header_open = header["section"], [], True
        elif key_line and (not line.startswith("#") or key_line["value"]):
            dotted = f"{section}.{key_line['key']}" if section else key_line["key"]
            comment = key_line["comment"] or " ".join(block)
            if comment:
                keys[dotted] = comment
            if header_open and block:
                sections[section] = " ".join(block)
            block, header_open = [], False
        elif line.startswith("#"):
            block.append(line.lstrip("#").strip())
        else:
            block = [] if not header_open else block
    return TomlNotes(keys, sections)


def render() -> str:
    """The reference as Markdown: one table per section."""
    notes = toml_notes()
    parts: list[str] = []
    for section, rows in settings():
        title = "Top level" if section is None else f"`[{section}]`"
        parts.append(f"### {title}\n")
        if section is not None and section in notes.sections:
            parts.append(f"{cell(notes.sections[section])}\n")
        parts.append("| key and environment variable | value | meaning |\n|---|---|---|")
        parts.extend(
            f"| `{row.key}`<br>`{row.environment}` | {_value(row)} | {cell(row.description)} |"
            for row in rows
        )
        parts.append("")
    return "\n".join(parts)


def _value(row: Setting) -> str:
    """Type, default, unit and bounds in one cell: ``float, seconds, ≥ 0; default `30.0```."""
    facts = ", ".join(fact for fact in (row.type, row.unit, row.bounds) if fact)
    return f"{facts}; default {row.default}"


def _setting(key: str, field: FieldInfo, notes: TomlNotes) -> Setting:
    return Setting(
        key=key,
        type=cell(type_name(field.annotation)),
        default=cell(_default(field)),
        unit=unit_of(key),
        bounds=_bounds(field),
        environment=env_name(key),
        description=field.description or notes.keys.get(key, ""),
    )


def type_name(annotation: Any) -> str:
    """A reader's name for a field's type: ``int``, ``seconds``, ``"auto" | "plain"``, ..."""
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin is typing.Annotated:  # a constrained item: ``list[Annotated[int, Field(ge=1)]]``
        bounds = bounds_of(annotation.__metadata__)
        return type_name(arguments[0]) + (f" {bounds}" if bounds else "")
    if origin is typing.Literal:
        return " | ".join(f'`"{value}"`' for value in arguments)
    if origin in (types.UnionType, typing.Union):
        named = [type_name(argument) for argument in arguments if argument is not type(None)]
        optional = len(named) < len(arguments)
        return " | ".join(named) + (" (optional)" if optional else "")
    if origin in (list, tuple):
        inner = ", ".join(type_name(argument) for argument in arguments)
        return f"list of {inner}" if origin is list else f"[{inner}]"
    return _READABLE.get(annotation) or str(getattr(annotation, "__name__", annotation))


def unit_of(key: str) -> str:
    """The unit a key's name carries (cloudqueue puts units in names: ``..._s`` is seconds)."""
    name = key.rsplit(".", 1)[-1]
    return next((unit for suffix, unit in _UNITS if name.endswith(suffix)), "")


def _default(field: FieldInfo) -> str:
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, Path):
        return f"`{value}`"
    return f"`{json.dumps(value)}`"


def _bounds(field: FieldInfo) -> str:
    return bounds_of(field.metadata)


def bounds_of(metadata: typing.Iterable[Any]) -> str:
    """The bounds pydantic constraints set (``≥ 1, ≤ 1000``), Field(...) markers unpacked."""
    constraints = [
        inner
        for item in metadata
        for inner in (item.metadata if isinstance(item, FieldInfo) else [item])
    ]
    words = {
        annotated_types.Ge: ("ge", "≥ {}"),
        annotated_types.Gt: ("gt", "> {}"),
        annotated_types.Le: ("le", "≤ {}"),
        annotated_types.Lt: ("lt", "< {}"),
        annotated_types.MinLen: ("min_length", "at least {} character(s)"),
    }
    found: list[str] = []
    for constraint in constraints:
        for kind, (attribute, template) in words.items():
            if isinstance(constraint, kind):
                found.append(template.format(getattr(constraint, attribute)))
    return ", ".join(found)
