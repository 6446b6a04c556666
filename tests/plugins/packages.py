"""Local packages for the installer's tests, made offline by the test set-up: an npm tarball
(`npm pack` of tests/fixtures/packages/tiny-node, a dependency-free stdio MCP server with one
tool, `shout`) and a wheel written with `zipfile` (tiny-python's `whisper_server`, one tool,
`whisper`, console script `whisper-server`); the greeter (tests/fixtures/packages/greeter, one
tool, `greet`, answering with the greeting of its environment and the mark of its arguments)
as an MCP Bundle and as a wheel, with a registry `server.json` naming that wheel."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import zipfile
from pathlib import Path

from mcp_host.plugins import NpmSource, PypiSource

PACKAGES = Path(__file__).resolve().parents[1] / "fixtures" / "packages"
GREETER = PACKAGES / "greeter"
NPM_SOURCE = NpmSource("@tiny-test/shout-server")
PYPI_SOURCE = PypiSource("whisper-server")


def npm_tarball(folder: Path) -> Path:
    """`npm pack` of tiny-node into `folder`: the .tgz `npm install` takes with no registry."""
    work = folder / "tiny-node"
    shutil.copytree(PACKAGES / "tiny-node", work)
    return npm_pack(work, folder)


def npm_pack(work: Path, folder: Path) -> Path:
    """`npm pack` of the package in `work` into `folder`; the .tgz's path."""
    npm = shutil.which("npm")
    assert npm is not None
    done = subprocess.run(
        [npm, "pack", "--pack-destination", str(folder), "--loglevel=error"],
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return folder / done.stdout.strip().splitlines()[-1]


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel(folder: Path, *, scripts: dict[str, str] | None = None) -> Path:
    """A wheel of whisper_server 1.0.0 (pure Python, no dependencies); `scripts` replaces its
    console scripts (name -> entry point), `{}` for none."""
    scripts = {"whisper-server": "whisper_server:main"} if scripts is None else scripts
    summary = "A tiny stdio MCP server for the installer's tests: one tool, whisper."
    return _wheel(folder, PACKAGES / "tiny-python" / "whisper_server.py", "whisper-server", summary, scripts)


def greeter_wheel(folder: Path) -> Path:
    """A wheel of greeter_server 1.0.0, console script `greeter-server`."""
    summary = "Greets by name with the greeting of its environment."
    module = GREETER / "greeter_server.py"
    return _wheel(folder, module, "greeter-server", summary, {"greeter-server": "greeter_server:main"})


def greeter_bundle(path: Path) -> Path:
    """The greeter as an MCP Bundle at `path`: its manifest.json (user_config greeting and mark,
    each with a default, in mcp_config's env and args) and the server at server/."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.write(GREETER / "manifest.json", "manifest.json")
        archive.write(GREETER / "greeter_server.py", "server/greeter_server.py")
    return path


def _wheel(folder: Path, module: Path, name: str, summary: str, scripts: dict[str, str]) -> Path:
    """A pure-Python wheel of the one `module`, distribution `name` 1.0.0, with `scripts`."""
    dist = name.replace("-", "_")
    info = f"{dist}-1.0.0.dist-info"
    entry_points = "[console_scripts]\n" + "".join(f"{script} = {target}\n" for script, target in scripts.items())
    files = {
        module.name: module.read_bytes(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0.0\nSummary: {summary}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": entry_points.encode(),
    }
    record = "".join(f"{file},{_digest(data)},{len(data)}\n" for file, data in files.items()) + f"{info}/RECORD,,\n"
    path = folder / f"{dist}-1.0.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for file, data in files.items():
            archive.writestr(file, data)
        archive.writestr(f"{info}/RECORD", record)
    return path
