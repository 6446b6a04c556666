"""What an app's declared csp may not ask for (visitor/app_checks.py): any origin at all."""

from __future__ import annotations

import pytest

from mcp_host.visitor.app_checks import AppRefused, anywhere, csp_problem, reach, too_large
from mcp_host.wire import AppVersion

ANYWHERE = [
    "*",
    " * ",
    "https:",
    "HTTP:",
    "wss:",
    "ws:",
    "https://*",
    "*:443",
    "https://*:*",
    "*.com",
    "https://*.dev/",
]
ANYWHERE += ["*.", "https://api.*.example.com", "*.*.example.com", ""]
SOMEWHERE = ["https://api.example.com", "*.example.com", "https://*.example.com:8443", "data:", "blob:"]
SOMEWHERE += ["http://[::1]:8080", "api.example.com:443", "*.co.uk"]


@pytest.mark.parametrize("source", ANYWHERE)
def test_a_source_that_reaches_any_origin_is_anywhere(source: str) -> None:
    assert anywhere(source) is True


@pytest.mark.parametrize("source", SOMEWHERE)
def test_a_named_origin_or_a_sites_subdomains_is_not_anywhere(source: str) -> None:
    assert anywhere(source) is False


def _app(*declared: object) -> AppVersion:
    return AppVersion("ui://x/app.html", "0" * 64, 10, tuple(declared))


def test_the_csp_problem_names_the_field_and_the_value() -> None:
    fair = {"csp": {"connectDomains": ["https://api.example.com"], "resourceDomains": []}}
    assert csp_problem(_app(None, fair, {"permissions": {}})) is None
    assert csp_problem(_app(fair, {"csp": {"baseUriDomains": ["https:"]}})) == (
        "its app 'ui://x/app.html' declares csp.baseUriDomains 'https:', which lets it reach any origin;"
        " name each origin it needs"
    )
    assert csp_problem(_app({"csp": {"frameDomains": "*"}})) == (
        "its app 'ui://x/app.html' declares csp.frameDomains that is not a list of origins"
    )


def test_reach_gathers_each_kind_once_sorted() -> None:
    declared = [
        {"csp": {"connectDomains": ["https://b.example", "https://a.example"], "frameDomains": [3]}},
        {"csp": {"connectDomains": ["https://a.example"], "baseUriDomains": ["https://base.example"]}},
        None,
        {"csp": "not a mapping"},
    ]
    assert reach(declared) == {
        "connect": ["https://a.example", "https://b.example"],
        "resources": [],
        "frames": [],
        "base_uri": ["https://base.example"],
    }


def test_an_app_past_the_cap_or_the_childs_message_limit_is_too_large() -> None:
    assert too_large("ui://x/a.html", 5_000_000, 4 * 1024 * 1024) == AppRefused(
        "its app 'ui://x/a.html' is larger than 4 MiB (5000000 bytes)"
    )
    assert too_large("ui://x/a.html", None, 512 * 1024) == AppRefused(
        "its app 'ui://x/a.html' is larger than 0.5 MiB", sticky=True
    )
