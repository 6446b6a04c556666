"""Secrets at rest: the host key, and sealing small JSON values with it (AES-256-GCM).

Above: `connections` (a connector's secret settings). Below: `cryptography`'s AESGCM and the
data directory, where the key file lives when the environment gives none.

The key is 32 bytes: `MCP_HOST_SECRET_KEY` (base64, for replicas that must share it), else
`<data_dir>/host-key`, created at first start with mode 0600 and never rewritten. A sealed
value is `v1.<nonce>.<ciphertext>` (URL-safe base64), bound by associated data to where it
belongs (owner, category, connector), so a row copied to another owner does not open.
Losing the key loses the secrets, never more: the owner connects again.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import secrets
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from mcp_host.errors import InternalError

__all__ = ["HOST_KEY_FILE", "SealError", "SecretBox", "load_host_key"]

HOST_KEY_FILE = "host-key"
_KEY_BYTES = 32
_NONCE_BYTES = 12
_VERSION = "v1"


class SealError(InternalError):
    """A sealed value that does not open with this key (wrong key, altered, or not ours)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    """Base64, standard or URL-safe, padding optional; raises binascii.Error on anything else."""
    text = text.replace("+", "-").replace("/", "_")
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)


def load_host_key(data_dir: Path, from_env: str | None) -> bytes:
    """The host key: from the environment's base64 value, else the data dir's key file (made
    on first use, mode 0600). Raises ValueError for an environment value that is not 32 bytes."""
    if from_env is not None:
        try:
            key = _unb64(from_env.strip())
        except (binascii.Error, ValueError):
            raise ValueError("MCP_HOST_SECRET_KEY is not base64") from None
        if len(key) != _KEY_BYTES:
            raise ValueError(f"MCP_HOST_SECRET_KEY must decode to {_KEY_BYTES} bytes, not {len(key)}")
        return key
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = data_dir / HOST_KEY_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        key = path.read_bytes()
        if len(key) != _KEY_BYTES:
            raise ValueError(f"{path} does not hold a {_KEY_BYTES}-byte key") from None
        return key
    key = secrets.token_bytes(_KEY_BYTES)
    with os.fdopen(fd, "wb") as file:
        file.write(key)
        file.flush()
        os.fsync(file.fileno())
    return key


class SecretBox:
    """Seals and opens JSON values under the host key."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)

    def seal(self, value: Any, *, bound_to: str) -> str:
        nonce = secrets.token_bytes(_NONCE_BYTES)
        plain = json.dumps(value, separators=(",", ":")).encode()
        sealed = self._aead.encrypt(nonce, plain, bound_to.encode())
        return f"{_VERSION}.{_b64(nonce)}.{_b64(sealed)}"

    def open(self, sealed: str, *, bound_to: str) -> Any:
        """The value sealed for `bound_to`; raises SealError otherwise."""
        try:
            version, nonce, body = sealed.split(".")
            if version != _VERSION:
                raise SealError("unknown seal version")
            plain = self._aead.decrypt(_unb64(nonce), _unb64(body), bound_to.encode())
        except (ValueError, binascii.Error, InvalidTag):
            raise SealError("the sealed value does not open with this host key") from None
        return json.loads(plain)
