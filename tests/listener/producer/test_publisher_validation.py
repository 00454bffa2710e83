"""A publisher checks each item against its item type before anything is sent: a dict becomes
the model, anything else that is no item is refused at the call, naming the field."""

from __future__ import annotations

import pydantic
import pytest
from pydantic import BaseModel

from cloudqueue.listener import InMemoryQueueStorage, MessageCodec, Publisher


class Email(BaseModel):
    to: str
    subject: str = ""


def test_a_dict_is_sent_as_the_model_it_validates_into(
    manual_storage: InMemoryQueueStorage, queue_name: str
) -> None:
    """``publish({...})`` sends exactly what publishing the model would."""
    Publisher(manual_storage, queue_name, Email).publish({"to": "ada@example.com"})
    (message,) = manual_storage.peek_messages(queue_name, max_messages=1)
    assert message.content == MessageCodec(Email).encode(Email(to="ada@example.com"))


def test_an_invalid_dict_raises_naming_the_field_and_sends_nothing(
    manual_storage: InMemoryQueueStorage, queue_name: str
) -> None:
    """A wrong field type is pydantic's ValidationError at the call, and the queue stays empty."""
    with pytest.raises(pydantic.ValidationError, match=r"(?s)\bto\b.*valid string"):
        Publisher(manual_storage, queue_name, Email).publish({"to": 1})
    assert manual_storage.approximate_message_count(queue_name) == 0


def test_a_model_built_without_validation_is_refused_naming_the_field(
    manual_storage: InMemoryQueueStorage, queue_name: str
) -> None:
    """``model_construct`` skips validation; the publisher does not, and sends nothing."""
    unchecked = Email.model_construct(to=1)
    with pytest.raises(pydantic.ValidationError, match=r"(?s)\bto\b.*valid string"):
        Publisher(manual_storage, queue_name, Email).publish(unchecked)
    assert manual_storage.approximate_message_count(queue_name) == 0


def test_a_value_of_another_type_is_refused(
    manual_storage: InMemoryQueueStorage, queue_name: str
) -> None:
    """An item that is neither the model nor a mapping of its fields is refused."""
    with pytest.raises(pydantic.ValidationError):
        Publisher(manual_storage, queue_name, Email).publish_many(["not an email"])  # type: ignore[list-item]
    assert manual_storage.approximate_message_count(queue_name) == 0


def test_publish_many_sends_the_items_before_the_invalid_one(
    manual_storage: InMemoryQueueStorage, queue_name: str
) -> None:
    """Items are read (and checked) lazily, in order: the ones before a bad item stay sent."""
    publisher = Publisher(manual_storage, queue_name, Email)
    with pytest.raises(pydantic.ValidationError):
        publisher.publish_many([{"to": "a@example.com"}, {"to": None}])
    assert publisher.items_sent == 1
