"""The previous release's collector, for the rolling-upgrade case: old and new binaries in one
consumer group, as a rollout (or a rollback) has them for a while.

The previous release is pinned (`PREVIOUS_RELEASE`): the last revision before commit metadata
named its log (`th2:` metadata, tokens `<topic>-<partition>-<first>-<last>`; issue 41). It is
built once from `git archive` of that revision, with its own cargo target directory (never the
checkout's: two trees in one target directory reuse each other's artifacts), as the matrix's
other binaries are (debug), and the binary is kept in the cache; the target directory is
removed afterwards. `TRACEHOUSE_PREVIOUS_COLLECTOR_BIN` names a binary to use instead.
"""

import os
import shutil
import subprocess
from pathlib import Path

from harness import REPO
from harness.procs import say

PREVIOUS_RELEASE = "d00aafdfda272c4f8b269719c2230b905b04843e"
CACHE = Path(os.environ.get("TRACEHOUSE_CACHE", Path.home() / ".cache" / "tracehouse"))


def previous_collector(rev=PREVIOUS_RELEASE):
    """Path of the previous release's collector binary, built on first use."""
    given = os.environ.get("TRACEHOUSE_PREVIOUS_COLLECTOR_BIN")
    if given:
        return given
    home = CACHE / f"previous-collector-{rev[:12]}"
    binary = home / "bin" / "tracehouse-collector"
    if binary.exists():
        return str(binary)
    src, target = home / "src", home / "target"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    say(f"building the previous release's collector ({rev[:12]}) into {home}: once, several minutes")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", rev],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    env = dict(os.environ, CARGO_TARGET_DIR=str(target), CARGO_TERM_COLOR="never")
    subprocess.run(["cargo", "build", "-p", "tracehouse-collector", "--bin", "tracehouse-collector"],
                   cwd=src, env=env, check=True)
    binary.parent.mkdir(parents=True, exist_ok=True)
    tmp = binary.with_suffix(".tmp")
    shutil.copy2(target / "debug" / "tracehouse-collector", tmp)
    tmp.rename(binary)
    shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(src, ignore_errors=True)
    return str(binary)


if __name__ == "__main__":
    print(previous_collector())
