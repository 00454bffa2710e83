"""Importing a ``module:attribute`` the user named: what the error says when the module is not
there."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.imports import import_object


def test_from_the_wrong_folder_no_standard_library_module_is_suggested(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module missing from the working folder is not taken for a misspelt module of Python's
    own ('emails' is no typo of 'email'): the error names the folder that was searched."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError) as raised:
        import_object("emails:SendEmail", what="worker")
    message = str(raised.value)
    assert "did you mean" not in message
    assert f"no such module in the working folder {tmp_path}" in message


def test_a_misspelt_module_of_the_project_is_suggested(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A near miss of a module in the working folder is named, with the attribute asked for."""
    (tmp_path / "send_emails.py").write_text("class SendEmail: ...\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match="did you mean 'send_emails:SendEmail'"):
        import_object("send_email:SendEmail", what="worker")


def test_a_misspelt_package_on_the_path_is_suggested_with_the_rest_of_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'ap.workers:Renderer' beside an 'app' package suggests 'app.workers:Renderer'; a package
    not in the working folder at all names the folder."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "workers.py").write_text("class Renderer: ...\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match=r"did you mean 'app\.workers:Renderer'"):
        import_object("ap.workers:Renderer", what="worker")
    with pytest.raises(ConfigurationError, match="no such module in the working folder"):
        import_object("elsewhere.workers:Renderer", what="worker")
