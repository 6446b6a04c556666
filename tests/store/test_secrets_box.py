"""Secrets at rest: the host key and AES-GCM seals bound to where they belong."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest

from mcp_host.store.secrets_box import HOST_KEY_FILE, SealError, SecretBox, load_host_key


def test_a_sealed_value_opens_only_where_it_was_bound() -> None:
    box = SecretBox(bytes(32))
    sealed = box.seal({"password": "hunter2"}, bound_to="owner\x1fcalendar\x1fcaldav")

    assert "hunter2" not in sealed
    assert box.open(sealed, bound_to="owner\x1fcalendar\x1fcaldav") == {"password": "hunter2"}
    with pytest.raises(SealError):
        box.open(sealed, bound_to="other-owner\x1fcalendar\x1fcaldav")


def test_a_seal_does_not_open_with_another_key_or_once_altered() -> None:
    sealed = SecretBox(bytes(32)).seal("x", bound_to="b")
    version, nonce, body = sealed.split(".")
    altered = f"{version}.{nonce}.{body[:-2]}{'A' if body[-2] != 'A' else 'B'}{body[-1]}"

    for key, value in ((b"\x01" * 32, sealed), (bytes(32), altered), (bytes(32), "v1.x"), (bytes(32), "v9.a.b")):
        with pytest.raises(SealError):
            SecretBox(key).open(value, bound_to="b")


def test_the_host_key_file_is_made_once_private_and_then_reused(tmp_path: Path) -> None:
    first = load_host_key(tmp_path / "data", None)
    again = load_host_key(tmp_path / "data", None)

    assert first == again and len(first) == 32
    assert stat.S_IMODE((tmp_path / "data" / HOST_KEY_FILE).stat().st_mode) == 0o600


def test_a_key_from_the_environment_wins_and_must_be_32_bytes(tmp_path: Path) -> None:
    key = bytes(range(32))

    assert load_host_key(tmp_path, base64.urlsafe_b64encode(key).decode()) == key
    assert not (tmp_path / HOST_KEY_FILE).exists()
    with pytest.raises(ValueError, match="32 bytes"):
        load_host_key(tmp_path, base64.b64encode(b"short").decode())
    with pytest.raises(ValueError, match="not base64"):
        load_host_key(tmp_path, "!!!")
