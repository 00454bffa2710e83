"""``redact`` masks Azure Storage secrets wherever they appear in text, and nothing else."""

from __future__ import annotations

import pytest

from cloudqueue.listener.redaction import MASK, redact

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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("redis://cache:6379/0?password=hunter2", f"redis://cache:6379/0?password={MASK}"),
        (
            "rediss://cache/0?ssl_cert_reqs=none&password=hunter2&db=1",
            f"rediss://cache/0?ssl_cert_reqs=none&password={MASK}&db=1",
        ),
        ("unix://:hunter2@/run/redis.sock?db=0", f"unix://:{MASK}@/run/redis.sock?db=0"),
        ("unix:///run/redis.sock?password=hunter2", f"unix:///run/redis.sock?password={MASK}"),
        ("redis://app:hunter2@cache:6379/0", f"redis://app:{MASK}@cache:6379/0"),
        ("redis://app:hun@ter2@cache/0", f"redis://app:{MASK}@cache/0"),
        ("redis://hunter2@cache/0", f"redis://{MASK}@cache/0"),
        ("https://h/x?api_key=hunter2&access_token=hunter2", None),
        ("https://h/x?client_secret=hunter2#top", f"https://h/x?client_secret={MASK}#top"),
    ],
)
def test_credentials_in_any_url_are_masked(text: str, expected: str | None) -> None:
    """Userinfo and password/key/token/secret query parameters of any URL lose their values."""
    redacted = redact(text)
    assert "hunter2" not in redacted
    if expected is not None:
        assert redacted == expected


@pytest.mark.parametrize(
    "text",
    [
        "sqlite:///data/q.db",
        "memory://",
        "redis://cache:6379/0?db=2&socket_timeout=5",
        "see https://learn.microsoft.com/azure/storage/queues?tabs=python for details",
    ],
)
def test_urls_without_credentials_are_left_as_they_are(text: str) -> None:
    """A URL with no credential in it is shown unchanged."""
    assert redact(text) == text
