"""Checking an email address a plugin is given, in one place for every plugin.

Above: plugins (the caldav and smtp connectors' settings and arguments, `mail.send`'s Reply-To).
Below: nothing. A plain `local@domain` address only: no display name, no comments, no quoted
local part, no IP-literal domain, no control character — what can go into a header or an
iCalendar property without escaping.
"""

from __future__ import annotations

import re

__all__ = ["is_email"]

_EMAIL = re.compile(
    r"\A[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@"
    r"(?=.{1,253}\Z)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+\Z"
)


def is_email(value: str) -> bool:
    """Whether `value` is one plain email address."""
    return _EMAIL.match(value) is not None
