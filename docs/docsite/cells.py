"""Text from the code (docstrings, descriptions, comments) made safe for a generated Markdown table.

A docstring is prose that may say ``<queue>-poison`` or ``give_up: <Type>: <message>``: written
into Markdown as it is, ``<queue>`` is an HTML tag, which the browser hides, and the page reads
"-poison". Outside code spans the text is HTML-escaped; inside them (``x`` or `x`) Markdown shows
it literally already. A ``|`` would end the table cell wherever it stands, so it is escaped
everywhere, and a newline would end the row.
"""

from __future__ import annotations

import html
import re

_CODE_SPAN = re.compile(r"(`+)(?:.+?)\1", re.DOTALL)


def cell(text: str) -> str:
    """``text`` as it should read in a table cell: one line, tags shown, not interpreted."""
    parts: list[str] = []
    end = 0
    for span in _CODE_SPAN.finditer(text):
        parts.append(html.escape(text[end : span.start()], quote=False))
        parts.append(span.group(0))
        end = span.end()
    parts.append(html.escape(text[end:], quote=False))
    return " ".join("".join(parts).split()).replace("|", "\\|")


def plain(text: str) -> str:
    """What a reader sees of ``text`` (as the code says it, or as ``cell`` wrote it) on the built
    page: code marks and cell escapes off, spaces collapsed."""
    return " ".join(text.replace("`", "").replace("\\|", "|").split())


__all__ = ["cell", "plain"]
