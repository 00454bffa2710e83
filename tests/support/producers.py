"""Messages as producers not written here put them in a queue: JSON, plain or base64."""

from __future__ import annotations

import base64
import json
from typing import Any


def sdk_plain(document: dict[str, Any]) -> str:
    """The Python and JavaScript SDKs' default: the JSON text as it is."""
    return json.dumps(document, ensure_ascii=False)


def sdk_base64(document: dict[str, Any]) -> str:
    """``TextBase64EncodePolicy`` or Azure Functions' output binding: base64 of UTF-8 JSON."""
    return base64.b64encode(sdk_plain(document).encode("utf-8")).decode("ascii")
