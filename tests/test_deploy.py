"""The shipped deploy files: deploy/compose.yaml, deploy/haproxy.cfg, deploy/k8s/ and the
Containerfile (issue 25, defect 2).

No container engine or cluster runs here, so each file is checked by what knows its format:
the Kubernetes manifests against the Kubernetes API's JSON schema (kubernetes-validate, strict:
no unknown field) plus the rule the API server adds on top (procMount Unmasked needs hostUsers
false); haproxy.cfg by `haproxy -c` with the environment compose gives it; compose.yaml and the
Containerfile parsed, and what each replica, HAProxy and the image get read out of them. The
cluster tests (tests/cluster) run the same haproxy.cfg with the same replica settings on this
machine; here a real host listening on every interface shows that a request addressed to its
replica URL gets in.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import kubernetes_validate
import pytest
import yaml

from tests.hosting import REPO, free_port, host_settings, running_host
from tests.processes import needs_bwrap

DEPLOY = REPO / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
HAPROXY_CFG = DEPLOY / "haproxy.cfg"
CONTAINERFILE = REPO / "Containerfile"
K8S_FILES = sorted((DEPLOY / "k8s").glob("*.yaml"))
# The oldest Kubernetes the Deployment says it needs, and the newest the validator knows.
K8S_VERSIONS = ("1.33.0", kubernetes_validate.latest_version())

needs_haproxy = pytest.mark.skipif(
    shutil.which("haproxy") is None, reason="haproxy is not installed: apt-get install haproxy (scripts/test does)"
)


# --- Kubernetes -------------------------------------------------------------------------------


def k8s_documents() -> list[tuple[str, dict[str, Any]]]:
    """(file name, object) for every object of deploy/k8s/."""
    return [(path.name, doc) for path in K8S_FILES for doc in yaml.safe_load_all(path.read_text()) if doc]


def pod_specs() -> list[tuple[str, dict[str, Any]]]:
    """(object name, pod spec) of every object that runs pods."""
    return [
        (doc["metadata"]["name"], doc["spec"]["template"]["spec"])
        for _, doc in k8s_documents()
        if "template" in doc.get("spec", {})
    ]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_k8s_manifests_are_valid_kubernetes_objects(version: str) -> None:
    kinds = []
    for name, doc in k8s_documents():
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name}: {doc['kind']} at {'.'.join(map(str, exc.path))}: {exc.message}")
        kinds.append(doc["kind"])
    assert sorted(kinds) == ["Deployment", "PodDisruptionBudget", "Secret", "Service"]


def test_a_pod_with_unmasked_proc_runs_in_a_user_namespace_of_its_own() -> None:
    # The API server refuses procMount Unmasked unless hostUsers is false (its validation, not
    # the schema's): "hostUsers must be false to use Unmasked".
    unmasked = {
        name: spec.get("hostUsers", True)
        for name, spec in pod_specs()
        if any(c.get("securityContext", {}).get("procMount") == "Unmasked" for c in spec["containers"])
    }
    assert unmasked == {"mcp-host": False}


def expanded_env(container: dict[str, Any], values_from: dict[str, str]) -> dict[str, str]:
    """A container's environment as the kubelet builds it: `valueFrom` fields from `values_from`
    (by field path), and `$(NAME)` replaced by an earlier variable's value."""
    env: dict[str, str] = {}
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), var["value"])
        elif "fieldRef" in var["valueFrom"]:
            env[var["name"]] = values_from[var["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def test_each_k8s_replica_is_reached_at_its_pod_ip_and_trusts_the_proxy_in_front() -> None:
    (spec,) = [spec for name, spec in pod_specs() if name == "mcp-host"]
    (container,) = spec["containers"]
    (http,) = [p["containerPort"] for p in container["ports"] if p["name"] == "http"]
    env = expanded_env(container, {"status.podIP": "10.244.3.7"})
    trusted = [ipaddress.ip_network(n.strip()) for n in env.get("FORWARDED_ALLOW_IPS", "").split(",") if n.strip()]

    assert str(http) == image_env()["MCP_HOST_PORT"] == "8765"
    assert env.get("MCP_HOST_REPLICA_URL") == "http://10.244.3.7:8765"
    assert trusted == [ipaddress.ip_network("10.244.0.0/16")]  # the pod network the proxy runs in


# --- compose and HAProxy ----------------------------------------------------------------------


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())  # PyYAML resolves the `<<` merges
    return loaded


def replica_services(services: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Each service built from the Containerfile → its environment."""
    return {
        name: service["environment"]
        for name, service in services.items()
        if service.get("build", {}).get("dockerfile") == "Containerfile"
    }


def test_each_compose_replica_has_its_own_replica_url_and_trusts_haproxy() -> None:
    services = compose()["services"]
    replicas = replica_services(services)
    haproxy_address = services["haproxy"].get("networks", {}).get("default", {}).get("ipv4_address")
    port = image_env()["MCP_HOST_PORT"]

    seen = {name: (env.get("MCP_HOST_REPLICA_URL"), env.get("FORWARDED_ALLOW_IPS")) for name, env in replicas.items()}
    assert len(seen) >= 2 and haproxy_address is not None
    # Its service name is what the other replicas resolve on the compose network.
    assert seen == {name: (f"http://{name}:{port}", haproxy_address) for name in replicas}


def test_haproxys_fixed_address_is_one_no_other_container_gets() -> None:
    document = compose()
    (pool,) = document["networks"]["default"]["ipam"]["config"]
    address = ipaddress.IPv4Address(document["services"]["haproxy"]["networks"]["default"]["ipv4_address"])
    subnet, dynamic = ipaddress.IPv4Network(pool["subnet"]), ipaddress.IPv4Network(pool["ip_range"])
    assert (address in subnet, address in dynamic, dynamic.subnet_of(subnet)) == (True, False, True)


def haproxy_sections(text: str) -> dict[str, list[str]]:
    """Each section (`backend replicas`) → its lines, stripped; `.if` and `.endif` lines count
    as lines of the section they are in."""
    sections: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0].isspace() or line.startswith("."):
            current.append(line.strip())
        else:
            current = sections[line.strip()] = []
    return sections


def lb_servers(text: str, environment: dict[str, str]) -> dict[str, str]:
    """The backend's servers that `environment` turns on: server name → address."""
    lines = haproxy_sections(text)["backend replicas"]
    servers: dict[str, str] = {}
    for guard, server, end in zip(lines, lines[1:], lines[2:], strict=False):
        variable = re.fullmatch(r"\.if defined\((\w+)\)", guard)
        named = re.fullmatch(r'server (\S+) "\$\{(\w+)\}"', server)
        if variable and named and end == ".endif" and named[2] == variable[1] and variable[1] in environment:
            servers[named[1]] = environment[variable[1]]
    return servers


def test_haproxy_serves_every_compose_replica_and_passes_each_visitors_address_on() -> None:
    services = compose()["services"]
    port = image_env()["MCP_HOST_PORT"]
    backend = haproxy_sections(HAPROXY_CFG.read_text())["backend replicas"]

    servers = lb_servers(HAPROXY_CFG.read_text(), services["haproxy"].get("environment", {}))
    assert sorted(servers.values()) == sorted(f"{name}:{port}" for name in replica_services(services))
    assert "option forwardfor" in backend


@needs_haproxy
def test_haproxy_accepts_the_shipped_config_with_composes_environment(tmp_path: Path) -> None:
    # compose's host names do not resolve here: the config must still load (its servers then
    # wait for the names to resolve, as in compose while a replica container starts).
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **compose()["services"]["haproxy"].get("environment", {})}
    check = subprocess.run(
        ["haproxy", "-c", "-f", str(HAPROXY_CFG)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr


# --- the Containerfile ------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


def instructions(text: str) -> list[Instruction]:
    """The Containerfile's instructions: continuation lines joined, comments dropped (also those
    inside a continued instruction, as the builders do)."""
    found: list[Instruction] = []
    pending = ""
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        keyword, _, args = (pending + line).strip().partition(" ")
        found.append(Instruction(keyword.upper(), args.strip()))
        pending = ""
    return found


def shell_commands(run: str) -> list[list[str]]:
    """A RUN's commands (split at `&&`), its `--mount=...` options left out."""
    words = shlex.split(run)
    while words and words[0].startswith("--"):
        words.pop(0)
    commands: list[list[str]] = [[]]
    for word in words:
        if word == "&&":
            commands.append([])
        else:
            commands[-1].append(word)
    return commands


# The python image's PATH; and which Debian release ships which Node.js.
BASE_PATH = "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"
DEBIAN_NODE = {"bookworm": 18, "trixie": 20}


def set_env(env: dict[str, str], args: str) -> None:
    """Apply one ENV instruction (`KEY=value ...`) to `env`."""
    for pair in shlex.split(args):
        key, _, value = pair.partition("=")
        env[key] = value.replace("$PATH", env.get("PATH", ""))


def image_env() -> dict[str, str]:
    """The image's environment, from its ENV instructions."""
    env = {"PATH": BASE_PATH}
    for step in instructions(CONTAINERFILE.read_text()):
        if step.keyword == "ENV":
            set_env(env, step.args)
    return env


def image() -> dict[str, Any]:
    """What the Containerfile builds: its Debian release, the apt packages, the venvs it makes,
    and which program the install's `pip`, the entry point and the health check run (by the
    PATH at that step: a venv's bin folder, or the base image's Python in /usr/local/bin)."""
    env, venvs = {"PATH": BASE_PATH}, list[str]()
    summary: dict[str, Any] = {"apt": [], "venvs": venvs}

    def which(program: str) -> str:
        if "/" in program:
            return program
        for folder in env["PATH"].split(":"):
            if folder == "/usr/local/bin" or folder in (f"{v}/bin" for v in venvs):
                return f"{folder}/{program}"
        return program

    for step in instructions(CONTAINERFILE.read_text()):
        if step.keyword == "FROM":
            release = step.args.rpartition("-")[2]  # python:3.11-slim-trixie; unpinned, it floats
            summary["debian"] = release if release in DEBIAN_NODE else "unpinned"
        elif step.keyword == "ENV":
            set_env(env, step.args)
        elif step.keyword == "RUN":
            for command in shell_commands(step.args):
                if command[:2] == ["apt-get", "install"]:
                    summary["apt"] += [w for w in command[2:] if not w.startswith("-")]
                elif command[1:3] == ["-m", "venv"]:
                    venvs.append(command[3])
                elif command[1:2] == ["install"] and "/src" in command:
                    summary["pip"] = which(command[0])
        elif step.keyword == "ENTRYPOINT":
            program, *args = yaml.safe_load(step.args)  # the exec form is a JSON array
            summary["entrypoint"] = [which(program), *args]
        elif step.keyword == "HEALTHCHECK":
            summary["healthcheck"] = which(yaml.safe_load(step.args.partition(" CMD ")[2])[0])
    return summary


def test_the_image_has_node_npm_and_git_and_runs_the_host_from_a_venv() -> None:
    built = image()
    assert built == {
        "debian": "trixie",
        "apt": ["bubblewrap", "util-linux", "nodejs", "npm", "git", "ca-certificates"],
        "venvs": ["/app/venv"],
        "pip": "/app/venv/bin/pip",
        "entrypoint": ["/app/venv/bin/mcp-host", "serve"],
        "healthcheck": "/app/venv/bin/python",
    }
    assert DEBIAN_NODE[built["debian"]] >= 20  # `mcp-host plugin add npm:` asks for Node.js 20+


def test_every_run_of_the_containerfile_is_valid_shell() -> None:
    runs = [step.args for step in instructions(CONTAINERFILE.read_text()) if step.keyword == "RUN"]
    for run in runs:
        script = re.sub(r"^(--\S+\s+)+", "", run)
        checked = subprocess.run(["sh", "-n", "-c", script], capture_output=True, text=True, check=False)
        assert checked.returncode == 0, f"{script}: {checked.stderr}"
    assert len(runs) >= 3


# --- a replica reached at its replica URL -----------------------------------------------------


@needs_bwrap
@pytest.mark.anyio
async def test_a_replica_on_every_interface_accepts_a_request_addressed_to_its_replica_url(
    tmp_path: Path, database_url: str
) -> None:
    # As in the deploy files: listening on 0.0.0.0, reached by the other replicas at its own
    # address (127.0.0.2 stands in for the pod IP: on loopback, and none of the host's own names).
    port = free_port()
    settings = host_settings(
        tmp_path,
        database_url,
        ["echo"],
        host="0.0.0.0",
        port=port,
        public_url=f"http://127.0.0.1:{port}",
        replica_url=f"http://127.0.0.2:{port}",
    )
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    async with running_host(settings) as host:
        session = await host.new_session()
        headers = {"Authorization": f"Bearer {session['token']}", "Accept": "application/json, text/event-stream"}
        path = f"/v1/sessions/{session['session_id']}/mcp"
        async with httpx2.AsyncClient(timeout=30, headers=headers) as http:
            named = await http.post(f"http://127.0.0.2:{port}{path}", json=initialize)
            unnamed = await http.post(f"http://127.0.0.3:{port}{path}", json=initialize)
    assert (named.status_code, unnamed.status_code) == (200, 421)
