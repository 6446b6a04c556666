"""The plugin folder, writable through a private, throwaway layer: each sandbox sees /plugin as
an overlay of the folder (read-only, below) and its own tmpfs (above), so a server that writes
beside its code (server-memory's `memory.jsonl` next to its `dist/index.js`) works, two
instances never see each other's files, and nothing reaches the folder on disk.

Above: `bwrap` puts `wrapper_argv` before bwrap (after the cgroup join) and binds the layer's
`plugin` and `tmp` directories at /plugin and /tmp; `launch` asks `available` once per host.
Below: util-linux `unshare` and `mount`, `/bin/sh`, exec'd by the caller; `available` runs
them once, on a scratch folder, to see whether this machine can.

Why not bwrap's own `--overlay-src`/`--tmp-overlay`: bubblewrap 0.8 (Debian 12) has neither
(they came in 0.9), and 0.9 puts the upper layer in its root tmpfs, which has no size. Here the
wrapper makes a new mount namespace (as a non-root host, inside a new user namespace where it
is root: the sandbox's uid 0 is then the host user, as bwrap's own user namespace maps it),
mounts one tmpfs of `limits.tmp_bytes` there, and on it the overlay (lower: the plugin folder,
opened as fd 3 so no host path is in the mount's options, which /proc/self/mountinfo shows,
and no comma or colon in a path can split them), then execs bwrap, which sees the layer in
that namespace only. /tmp is a directory of the same tmpfs: the child's /tmp and its writes
to /plugin share the one `tmp_bytes` cap, which is part of its memory budget (`Limits`), so the
budget is what it was. The layer lives as long as the sandbox's processes (the namespace's
last process gone, the tmpfs is freed); the host's mount table never sees it. The mounts are
done before bwrap runs, so the seccomp filter (loaded by bwrap later) has no say in them.
"""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import tempfile
from pathlib import Path

__all__ = ["PLUGIN_DIR", "TMP_DIR", "available", "probe", "wrapper_argv"]

logger = logging.getLogger(__name__)

# Within the layer's tmpfs: what bwrap binds at /plugin and at /tmp.
PLUGIN_DIR = "plugin"
TMP_DIR = "tmp"

_UNSHARE = "/usr/bin/unshare"
_SH = "/bin/sh"
_PROBE_TIMEOUT_S = 10.0
# $1 the mount point (a host directory, empty), $2 the plugin folder, $3 the tmpfs size; then
# the argv to exec. "upper" and "work" are relative (the cwd is the tmpfs), the lower is fd 3.
_SCRIPT = (
    "set -e; "
    'mount -t tmpfs -o "size=$3,mode=0755" mcp-plugin "$1"; '
    'cd "$1"; mkdir upper work ' + PLUGIN_DIR + " " + TMP_DIR + "; "
    'exec 3<"$2"; '
    "mount -t overlay -o lowerdir=/proc/self/fd/3,upperdir=upper,workdir=work mcp-plugin " + PLUGIN_DIR + "; "
    "exec 3<&-; "
    "shift 3; "
    'exec "$@"'
)


def wrapper_argv(mount_dir: Path, plugin_dir: Path, size: int) -> list[str]:
    """The argv prefix that mounts the layer in a new mount namespace, then execs the rest of
    the argv (bwrap). `mount_dir` is an existing host directory, only ever mounted on inside
    that namespace; `size` the tmpfs's bytes. Without --fork: the spawned pid becomes bwrap's.
    """
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return [
        _UNSHARE,
        *user,
        "--mount",
        "--propagation",
        "private",
        _SH,
        "-c",
        _SCRIPT,
        "mcp-plugin-layer",
        str(mount_dir),
        str(plugin_dir),
        str(size),
    ]


def probe(mount_dir: Path, plugin_dir: Path) -> bool:
    """Whether the layer can be made here: the wrapper run once on `plugin_dir`, writing a file
    through it. Never raises."""
    check = [_SH, "-c", f"echo probe > {PLUGIN_DIR}/.mcp-host-probe && echo probe > {TMP_DIR}/probe"]
    try:
        done = subprocess.run(
            [*wrapper_argv(mount_dir, plugin_dir, 1 << 20), *check],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        logger.info("plugin layer probe could not run: %s", exc)
        return False
    if done.returncode != 0:
        logger.info("plugin layer probe failed (%d): %s", done.returncode, done.stderr.decode(errors="replace")[-400:])
    return done.returncode == 0 and not (plugin_dir / ".mcp-host-probe").exists()


@functools.cache
def available() -> bool:
    """Whether this machine can give each sandbox its writable plugin layer, probed once per
    process; when it cannot, one warning: plugins then see their folder read-only."""
    with tempfile.TemporaryDirectory(prefix="mcp-host-layer-") as scratch:
        (Path(scratch) / "mount").mkdir()
        (Path(scratch) / "lower").mkdir()
        ok = probe(Path(scratch) / "mount", Path(scratch) / "lower")
    if not ok:
        logger.warning(
            "no private writable layer over plugin folders here (needs util-linux unshare and overlayfs in a "
            "mount namespace, and as a non-root host user namespaces): each plugin sees its folder read-only, "
            "so a server that writes beside its code fails"
        )
    return ok
