"""The bench's processes and measurements: child processes that are stopped on every exit path,
commands run with a deadline, and what /proc and the kernel's TCP counters tell about a process
(CPU-seconds, RSS, bytes sent to a port) and the machine.
"""

import os
import re
import signal
import subprocess
import sys

CLK_TCK = os.sysconf("SC_CLK_TCK")


def say(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


class BenchError(Exception):
    pass


# ---------------------------------------------------------------- child processes

CHILDREN = []  # Popen objects started in their own session; stopped on every exit path


def _die_with_parent():
    """In the child: get SIGTERM if the bench itself dies, even by SIGKILL (PR_SET_PDEATHSIG)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def spawn(cmd, log, env=None):
    """Start cmd in its own process group, stdout+stderr appended to log."""
    f = open(log, "ab")
    p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         env=env, start_new_session=True, preexec_fn=_die_with_parent)
    f.close()
    CHILDREN.append(p)
    return p


def stop(p, grace=30.0):
    """SIGTERM the process group, SIGKILL after the grace period. Returns the exit code."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            say(f"pid {p.pid} did not stop in {grace:.0f}s; killing")
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=10)
    try:  # anything left in the group goes too
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if p in CHILDREN:
        CHILDREN.remove(p)
    return p.returncode


def stop_all():
    for p in list(CHILDREN):
        stop(p, grace=10)


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)


def run_main(main, *args):
    """A runner's `if __name__ == "__main__"` (bench, column-cost, querybench and its compat
    check, chaos): SIGTERM, SIGINT and SIGHUP unwind the run as an exit (on_signal), so its
    cleanup runs and the exit is said as such; a BenchError ends it with its message on one line
    and status 1; every child is stopped on the way out. Exits with main(*args)'s status."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        sys.exit(main(*args))
    except BenchError as e:
        say(f"error: {e}")
        sys.exit(1)
    except SystemExit as e:
        if isinstance(e.code, int) and e.code > 128:
            say(f"interrupted by signal {e.code - 128}; children stopped, run cleaned up")
        raise
    finally:
        stop_all()


def run(cmd, timeout, check=True, env=None, capture=True, log=None):
    """Run a command to completion with a deadline; output captured (or appended to log)."""
    out = open(log, "ab") if log else (subprocess.PIPE if capture else None)
    try:
        r = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT if (log or capture) else None,
                           stdin=subprocess.DEVNULL, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{' '.join(map(str, cmd[:3]))} … did not finish within {timeout}s")
    finally:
        if log:
            out.close()
    if check and r.returncode != 0:
        raise BenchError(f"{' '.join(map(str, cmd[:3]))} … exited with {r.returncode}"
                         + (f"; log: {log}" if log else ""))
    return r


# ---------------------------------------------------------------- /proc

def proc_cpu_seconds(pid):
    """utime + stime of the process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14, 15 of stat(5)


def proc_status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def machine_busy_seconds():
    """CPU-seconds the whole machine has spent busy (all CPUs, /proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal …
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / CLK_TCK


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def socket_inodes(pid):
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        pass
    return inodes


class SocketBytes:
    """Bytes a process has sent to one TCP port: the kernel's per-socket bytes_acked counter
    (tcp_info, via `ss`), summed over the process's sockets to that port. Sampled while the
    process runs; a socket's last value is kept after it closes, so only bytes sent after a
    socket's final sample are missed (the collectors keep their connections open)."""

    def __init__(self, port):
        self.port = port
        self.by_inode = {}

    def sample(self, pid):
        mine = socket_inodes(pid)
        if not mine:
            return
        r = subprocess.run(["ss", "-tinHe", f"( dport = :{self.port} )"], capture_output=True,
                           text=True, timeout=10)
        for rec in re.split(r"\n(?=\S)", r.stdout):
            ino = re.search(r"\bino:(\d+)", rec)
            acked = re.search(r"\bbytes_acked:(\d+)", rec)
            if ino and acked and ino.group(1) in mine:
                self.by_inode[ino.group(1)] = max(self.by_inode.get(ino.group(1), 0),
                                                  int(acked.group(1)))

    @property
    def total(self):
        return sum(self.by_inode.values())



def machine():
    model = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem_kib = int(open("/proc/meminfo").readline().split()[1])
    except OSError:
        mem_kib = 0
    return {"cpus": os.cpu_count(), "cpu_model": model, "memory_gib": round(mem_kib / 2**20, 1),
            "kernel": os.uname().release}
