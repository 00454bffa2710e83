"""``redact`` masks Azure Storage secrets wherever they appear in text, and nothing else."""

from __future__ import annotations

import pytest

from listener.redaction import MASK, redact

KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
SIGNATURE = "a1B2c3D4%2Bq%2Fz9%3D"
SAS = f"sv=2023-11-03&ss=q&srt=sco&sp=rwdlacup&se=2030-01-01T00:00:00Z&sig={SIGNATURE}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={KEY};EndpointSuffix=x",
            f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={MASK};EndpointSuffix=x",
        ),
        (f"accountkey={KEY}", f"accountkey={MASK}"),
        (f"{{'account_name': 'acct', 'account_key': '{KEY}'}}", None),
        (
            f"QueueEndpoint=https://acct.queue.core.windows.net;SharedAccessSignature={SAS};",
            f"QueueEndpoint=https://acct.queue.core.windows.net;SharedAccessSignature={MASK};",
        ),
        (
            f"GET https://acct.queue.core.windows.net/q/messages?{SAS}&numofmessages=32 failed",
            "GET https://acct.queue.core.windows.net/q/messages?sv=2023-11-03&ss=q&srt=sco"
            f"&sp=rwdlacup&se=2030-01-01T00:00:00Z&sig={MASK}&numofmessages=32 failed",
        ),
        ("url?se=1&sig%3Dabc%2B", f"url?se=1&sig%3D{MASK}"),
        (
            "Authorization: SharedKey devstoreaccount1:c2lnbmF0dXJl\nx-ms-version: 2025",
            f"Authorization: SharedKey {MASK}\nx-ms-version: 2025",
        ),
        ("{'Authorization': 'Bearer eyJ0eXAi.eyJhdWQi.c2ln', 'Accept': 'x'}", None),
        (
            "x-ms-copy-source-authorization: Bearer abc.def",
            f"x-ms-copy-source-authorization: Bearer {MASK}",
        ),
        (
            "signed with SharedKeyLite acct:c2lnbmF0dXJl, rejected",
            f"signed with SharedKeyLite acct:{MASK}, rejected",
        ),
    ],
)
def test_secrets_are_masked_and_the_rest_kept(text: str, expected: str | None) -> None:
    """Each kind of secret is replaced by the mask; the text around it is untouched."""
    redacted = redact(text)
    for secret in (KEY, SIGNATURE, "c2lnbmF0dXJl", "eyJ0eXAi", "abc.def", "abc%2B"):
        assert secret not in redacted
    if expected is not None:
        assert redacted == expected


def test_every_occurrence_is_masked() -> None:
    """Two connection strings in one message both lose their keys."""
    text = f"primary AccountKey={KEY}; secondary AccountKey={KEY[::-1]}"
    assert redact(text) == f"primary AccountKey={MASK}; secondary AccountKey={MASK}"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "get_messages on queue 'orders' failed: HTTP 503 ServerBusy",
        "AccountName=devstoreaccount1;QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;",
        "the signature=abc of a design; assigned=3; Design=ok",
    ],
)
def test_text_without_secrets_is_unchanged(text: str) -> None:
    """Account names, endpoints and words that merely contain "sig" are left alone."""
    assert redact(text) == text
