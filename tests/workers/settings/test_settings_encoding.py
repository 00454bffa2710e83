"""Settings for reading other producers' queues: listener.encoding and its older boolean form."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cloudqueue.workers.settings import ListenerSettings


def test_auto_is_the_default_encoding() -> None:
    """Out of the box a worker reads plain and base64 messages alike."""
    assert ListenerSettings().encoding == "auto"


@pytest.mark.parametrize(("flag", "encoding"), [(True, "base64"), ("false", "plain")])
def test_the_older_base64_flag_still_means_an_encoding(flag: object, encoding: str) -> None:
    """A config written for `listener.base64` keeps working instead of being silently ignored."""
    assert ListenerSettings.model_validate({"base64": flag}).encoding == encoding


def test_an_unknown_encoding_names_the_choices() -> None:
    """A typo in listener.encoding is refused with the accepted values."""
    with pytest.raises(ValidationError, match="'auto', 'base64' or 'plain'"):
        ListenerSettings.model_validate({"encoding": "utf8"})
