"""Messages as producers not written here put them in a queue: JSON, plain or base64.

Each producer turns a JSON document into queue text exactly as that producer's defaults do, so a
test can fill a queue the way a team's existing services would.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

Producer = Callable[[dict[str, Any]], str]


def sdk_plain(document: dict[str, Any]) -> str:
    """The Python and JavaScript SDKs' default: the JSON text as it is."""
    return json.dumps(document, ensure_ascii=False)


def sdk_base64(document: dict[str, Any]) -> str:
    """``TextBase64EncodePolicy`` or Azure Functions' output binding: base64 of UTF-8 JSON."""
    return base64.b64encode(sdk_plain(document).encode("utf-8")).decode("ascii")


PRODUCERS: dict[str, Producer] = {"sdk-plain": sdk_plain, "sdk-base64": sdk_base64}
