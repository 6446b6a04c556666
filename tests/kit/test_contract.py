"""The plugin contract (`mcp_host_kit.contract`): one home for what the host and the kit agree
on, imported by both, needing only the MCP SDK until a manifest is read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import mcp_host_kit
from mcp_host import errors as host_errors
from mcp_host.backchannel.ops import OPS as HOST_OPS_TABLE
from mcp_host.children import call_routing
from mcp_host.plugins import manifest as host_manifest
from mcp_host.store import checks as host_checks
from mcp_host.wire import meta as host_meta
from mcp_host_kit import contract
from mcp_host_kit import errors as kit_errors
from mcp_host_kit import session as kit_session
from mcp_host_kit.connection import CONNECTION_KEY
from mcp_host_kit.manifest import ManifestProblem, read_plugin_manifest
from mcp_host_kit.visitor import CALL_KEY


def test_the_contract_imports_with_the_mcp_sdk_alone() -> None:
    probe = (
        "import sys, mcp_host_kit.contract\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp_host', 'yaml', 'owner_facade')))\n"
    )
    root = str(Path(mcp_host_kit.__file__).resolve().parent.parent)
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env={"PYTHONPATH": root}, cwd="/"
    )
    assert out.stdout.strip() == "[]"


def test_the_host_op_table_validates_with_the_contracts_argument_models() -> None:
    assert {name: op.args for name, op in HOST_OPS_TABLE.items()} == {
        name: args for name, (args, _) in contract.OPS.items()
    }
    assert host_manifest.HOST_OPS is contract.OP_NAMES


def test_every_exception_class_of_host_and_kit_carries_a_contract_code() -> None:
    host = {
        cls.__name__: cls.code
        for cls in vars(host_errors).values()
        if isinstance(cls, type) and issubclass(cls, host_errors.HostError)
    }
    kit = {
        cls.__name__: cls.default_code
        for cls in vars(kit_errors).values()
        if isinstance(cls, type) and issubclass(cls, kit_errors.HostOpError)
    }

    assert set(host.values()) | set(kit.values()) <= set(contract.REFUSAL_CODES)
    assert {kit[name] for name in ("Denied", "QuotaExhausted", "InvalidArguments", "Unavailable")} == {
        host[name] for name in ("Denied", "QuotaExhausted", "InvalidArguments", "Unavailable")
    }


def test_host_and_kit_use_the_contracts_meta_keys() -> None:
    assert (host_meta.SESSION_KEY, host_meta.GRANT_KEY, host_meta.HOST_PREFIX) == (
        contract.SESSION_KEY,
        contract.GRANT_KEY,
        contract.HOST_PREFIX,
    )
    assert (kit_session.SESSION_KEY, kit_session.GRANT_KEY) == (contract.SESSION_KEY, contract.GRANT_KEY)
    assert call_routing.CALL_KEY == CALL_KEY == contract.CALL_KEY
    assert CONNECTION_KEY == contract.CONNECTION_KEY
    assert all(key.startswith(contract.HOST_PREFIX) for key in (contract.QUOTA_KEY, contract.CONNECTION_KEY))


def test_the_host_store_checks_are_the_contracts_raising_the_hosts_error() -> None:
    assert host_checks.StoreLimits is contract.StoreLimits
    with pytest.raises(host_errors.InvalidArguments) as raised:
        host_checks.check_key(contract.StoreLimits(), "")
    with pytest.raises(contract.ArgumentError) as same:
        contract.check_key(contract.StoreLimits(), "")

    assert raised.value.message == same.value.message


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("id: a\nid: b\n", "id: duplicate key 'id' (line 2)"),
        ("id: &x demo\nkind: *x\n", "aliases are not allowed"),
        ("id: !!binary aGk=\n", "id: tag 'tag:yaml.org,2002:binary' is not allowed (line 1)"),
    ],
)
def test_the_kit_reads_a_manifest_as_strictly_as_the_host(tmp_path: Path, text: str, problem: str) -> None:
    (tmp_path / "manifest.yaml").write_text(text)
    with pytest.raises(ManifestProblem) as kit:
        read_plugin_manifest(tmp_path)
    host = host_manifest.read_manifest(tmp_path)

    assert problem in str(kit.value)
    assert len(host.errors) == 1
    assert problem in str(host.errors[0])


def test_manifest_values_resolve_as_yaml_1_2_for_both(tmp_path: Path) -> None:
    (tmp_path / "manifest.yaml").write_text(
        "id: demo\nconfig: [{key: opens, default: 10:30}, {key: ok, default: no}]\n"
    )

    assert read_plugin_manifest(tmp_path).defaults["config"] == {"opens": "10:30", "ok": "no"}
    assert contract.read_yaml(tmp_path / "manifest.yaml", max_bytes=1024) == {
        "id": "demo",
        "config": [{"key": "opens", "default": "10:30"}, {"key": "ok", "default": "no"}],
    }
