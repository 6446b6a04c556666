"""The egress proxy's cost (issue 29), as a sandboxed child sees it: one ~1 MiB transfer and 100
small requests on one httpx client, over http (the proxy forwards each request, absolute-form,
on a connection of its own) and https (a CONNECT tunnel; TLS end to end), through the host's
egress proxy against the same child going straight out.

Legs (two `mcp-host serve`, embedded PostgreSQL each, the bench plugin in bench/egress_plugin,
the site served by this process on two loopback ports, http and https):
  proxied  sandbox on: the child's own network namespace, the bridge inside, the host's proxy;
           the plugin's egress names the site's two ports (and its loopback address in
           allow_private).
  direct   the same plugin and client code in a child of a host with the sandbox off
           (`MCP_HOST_SANDBOX=off`): the host's network, no proxy. The fairest baseline left:
           since issue 29 `allow_net: true` goes through the proxy too, and a sandbox without
           the proxy has no network; what the sandbox adds besides the proxy (namespaces,
           seccomp, limits) costs a network exchange next to nothing.
Each sample is one tool call timing, inside the child, the big GET and then the 100 small ones;
the two hosts are called in turn. Medians, p90, and proxied/direct. Results go to
bench-results/egress.json. Run by `scripts/bench`; `--quick` for fewer samples.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import json
import shutil
import statistics
import sys
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from legs import http_client
from procs import Processes, free_port
from servers import REPO, start_host
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository: `tests.*`

from tests.hosting import serving  # noqa: E402

PLUGIN = Path(__file__).resolve().parent / "egress_plugin"
RESULTS = REPO / "bench-results" / "egress.json"
BIG = 1024 * 1024
SMALL = 100
ERA = "2026-07-28"


def _site() -> Starlette:
    big = b"x" * BIG

    async def large(request: Request) -> Response:
        return Response(big, media_type="application/octet-stream")

    async def small(request: Request) -> Response:
        return Response(b"ok", media_type="text/plain")

    return Starlette(routes=[Route("/big", large), Route("/small", small)])


def _certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own trust anchor) and its key."""
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench site")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "site-cert.pem", folder / "site-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    key_path.write_bytes(pem)
    return cert_path, key_path


def _plugin_copy(root: Path, cert: Path, egress: list[str], allow_private: list[str]) -> Path:
    """A plugins root holding a copy of the bench plugin with `egress`, and the site's certificate."""
    dest = root / "bench_egress"
    shutil.copytree(PLUGIN, dest, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(cert, dest / "site-cert.pem")
    manifest: dict[str, Any] = yaml.safe_load((PLUGIN / "manifest.yaml").read_text())
    if egress:
        manifest["transport"]["sandbox"] = {"egress": egress, "allow_private": allow_private}
    (dest / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return root


def _ms(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)
    return {
        "median_ms": statistics.median(ordered) / 1e6,
        "p90_ms": ordered[int(len(ordered) * 0.9)] / 1e6,
        "n": len(ordered),
    }


async def bench(args: argparse.Namespace, procs: Processes, workdir: Path) -> dict[str, Any]:
    cert, key = _certificate(workdir)
    http_port, https_port = free_port(), free_port()
    sites = {"http": f"http://127.0.0.1:{http_port}", "https": f"https://127.0.0.1:{https_port}"}
    egress = [f"127.0.0.1:{http_port}", f"127.0.0.1:{https_port}"]
    proxied_root = _plugin_copy(workdir / "proxied", cert, egress, ["127.0.0.1"])
    direct_root = _plugin_copy(workdir / "direct", cert, [], [])
    async with (
        serving(_site(), http_port, lifespan="off"),
        serving(_site(), https_port, lifespan="off", ssl_certfile=str(cert), ssl_keyfile=str(key)),
        AsyncExitStack() as stack,
    ):
        hosts = {
            "proxied": await start_host(procs, "egress-proxied", plugins=proxied_root, data_dir=workdir / "dp"),
            "direct": await start_host(
                procs,
                "egress-direct",
                plugins=direct_root,
                data_dir=workdir / "dd",
                settings={"MCP_HOST_SANDBOX": "off"},
            ),
        }
        clients = {}
        for name, host in hosts.items():
            visitor = await host.open_session()
            clients[name] = await http_client(stack, visitor.mcp_url, ERA, visitor.token)

        async def sample(route: str, scheme: str) -> dict[str, int]:
            result = await clients[route].call_tool("egress_timing", {"base": sites[scheme], "small": SMALL})
            if result.is_error or (result.structured_content or {}).get("big_bytes") != BIG:
                raise RuntimeError(f"egress_timing ({route}, {scheme}) answered {result!r}")
            return dict(result.structured_content or {})

        samples: dict[str, list[int]] = {}
        print(f"[egress] warm-up; then {args.n} samples per route and scheme, in turn")
        for route in hosts:
            for scheme in sites:
                await sample(route, scheme)
        for _ in range(args.n):
            for route in hosts:
                for scheme in sites:
                    got = await sample(route, scheme)
                    samples.setdefault(f"{route} {scheme} 1 MiB", []).append(got["big_ns"])
                    samples.setdefault(f"{route} {scheme} {SMALL} small", []).append(got["small_ns"])
    legs = {name: _ms(values) for name, values in samples.items()}
    ratios = {
        f"{scheme} {what}": legs[f"proxied {scheme} {what}"]["median_ms"] / legs[f"direct {scheme} {what}"]["median_ms"]
        for scheme in sites
        for what in ("1 MiB", f"{SMALL} small")
    }
    return {"legs": legs, "proxied_over_direct": ratios, "baseline": "direct: the same child, MCP_HOST_SANDBOX=off"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/egress.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=30, help="samples per route and scheme (default 30)")
    parser.add_argument("--quick", action="store_true", help="n=8")
    args = parser.parse_args(argv)
    if args.quick:
        args.n = 8
    workdir = Path(tempfile.mkdtemp(prefix="mcpe-", dir="/tmp"))
    procs = Processes(workdir)
    try:
        result = anyio.run(bench, args, procs, workdir)
    finally:
        procs.close()
        shutil.rmtree(workdir, ignore_errors=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print("[egress] leg                          median      p90      n")
    for name, leg in result["legs"].items():
        print(f"[egress] {name:<27} {leg['median_ms']:8.2f} {leg['p90_ms']:8.2f} ms {leg['n']:4d}")
    for name, ratio in result["proxied_over_direct"].items():
        print(f"[egress] proxied/direct {name:<16} {ratio:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
