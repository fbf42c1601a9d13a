"""Starts an Omnigent server (PyPI `omnigent`) and optionally a runner, all state in one directory.

Run with the Python of the venv that has `omnigent` installed:

    python omnigent_server.py --dir DIR [--host 127.0.0.1] [--port 0] [--timeout 120]
                              [--ignore-stdin] [--runner]

Everything the server writes (home, config, data/logs, sqlite database, artifacts, temp files,
harness sockets) goes under DIR, which is created if needed. `--port 0` picks a free port. Once
the server answers `GET /health` with 200, one line `READY http://HOST:PORT` is printed on
stdout; the server's own output goes to DIR/server.log. The launcher then waits and stops the
server (its whole process group) on SIGTERM or SIGINT, on EOF on stdin (unless
`--ignore-stdin`; stdin is watched from READY on), or when its parent process exits; the server
also gets SIGTERM if the launcher itself is killed (Linux PR_SET_PDEATHSIG). Exit status: 0
after a requested stop, 1 if the server failed to start or died on its own.

With `--runner`, a runner (`python -P -m omnigent.runner._entry`: the process that runs agent
turns; per bound session it starts a harness process and, when tmux is on PATH, a tmux server)
is started once the server is healthy, with the server's environment, its workspace in DIR/ws
(specs with `os_env.cwd: "."` work there), a random tunnel binding token and the runner id the
server derives from it; its output goes to DIR/runner.log. Once `GET /v1/runners/{id}/status`
says `"online": true` (waited for up to another `--timeout`), one line `RUNNER <runner_id>` is
printed, then the `READY` line; bind a session with `PATCH /v1/sessions/{id} {"runner_id": ID}`.
If the runner does not come online, or later dies on its own (it also quits by itself after an
hour without work, Omnigent's `runner.idle_timeout_s`), the launcher stops and exits 1. On stop
the runner gets SIGTERM first (it closes its sessions' harnesses and tmux servers; SIGKILL for
its process group after 10 s), then the server as above. Then a leak check: every live process
that started after the launcher and whose cwd, an environment value or its command line points
under DIR (a tmux server `-S DIR/tmp/.../tmux.sock`, say, left by a SIGKILLed runner) is
reported as `LEAK <pid> <cmdline>` on stderr and killed, and the exit status is 3 (unless it is
1). Zombies do not count; a shell you start in DIR while the launcher runs would.

Bind a loopback host: the server then runs in single-user mode (no login, no auth headers).
"""

import argparse
import ctypes
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

# Omnigent's environment prefixes: the current one and the legacy ones it still mirrors onto it.
OMNIGENT_ENV_PREFIXES = ("OMNIGENT_", "OMNIGENTS_", "OMNIAGENTS_")
RUNNER_STOP_GRACE_S = 10


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_env(d: str) -> dict:
    # Drop inherited Omnigent settings (auth mode, database, ...) so the server is hermetic.
    env = {k: v for k, v in os.environ.items() if not k.startswith(OMNIGENT_ENV_PREFIXES)}
    home = os.path.join(d, "home")
    env.update(
        HOME=home,
        XDG_CONFIG_HOME=os.path.join(home, ".config"),
        XDG_DATA_HOME=os.path.join(home, ".local", "share"),
        XDG_STATE_HOME=os.path.join(home, ".local", "state"),
        XDG_CACHE_HOME=os.path.join(home, ".cache"),
        TMPDIR=os.path.join(d, "tmp"),
        OMNIGENT_CONFIG_HOME=os.path.join(home, ".omnigent"),
        OMNIGENT_DATA_DIR=os.path.join(d, "data"),
        # Default is /tmp/omnigent-UID; unix socket paths must stay short, so keep this short.
        OMNIGENT_HARNESS_TMP_PARENT=os.path.join(d, "h"),
        # No network: telemetry, update checks and model-catalog lookups off.
        DO_NOT_TRACK="1",
        OMNIGENT_ANALYTICS="0",
        OMNIGENT_DISABLE_TELEMETRY="true",
        OMNIGENT_NO_UPDATE_CHECK="1",
        OMNIGENT_DISABLE_CATALOG_LOOKUP="1",
    )
    for sub in ("home", "tmp", "data", "artifacts", "h"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    return env


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return r.status == 200
    except Exception:
        return False


def runner_online(url: str, runner_id: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v1/runners/{runner_id}/status", timeout=2) as r:
            return r.status == 200 and json.load(r).get("online") is True
    except Exception:
        return False


try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before any fork
except (AttributeError, OSError):
    _prctl = None


def die_with_launcher() -> None:
    """Runs in the server child before exec: SIGTERM it if the launcher dies (Linux only)."""
    if _prctl is not None:
        _prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            pass


def start_runner(d: str, env: dict, url: str, log) -> tuple:
    """Starts the runner process; returns (proc, runner_id)."""
    # The runner id the server accepts for a tunnel is derived from its binding token.
    from omnigent.runner.identity import token_bound_runner_id

    token = secrets.token_urlsafe(32)
    runner_id = token_bound_runner_id(token)
    workspace = os.path.join(d, "ws")
    os.makedirs(workspace, exist_ok=True)
    env = dict(env)
    env.update(
        RUNNER_SERVER_URL=url,
        OMNIGENT_RUNNER_ID=runner_id,
        OMNIGENT_RUNNER_TUNNEL_BINDING_TOKEN=token,
        # Agent specs with `os_env.cwd: "."` work here (and the filesystem endpoints read it).
        OMNIGENT_RUNNER_WORKSPACE=workspace,
    )
    # No OMNIGENT_RUNNER_PARENT_PID: its watchdog hard-exits the runner 2 s after the parent
    # dies, which can cut its cleanup short; PR_SET_PDEATHSIG gives it a SIGTERM instead.
    proc = subprocess.Popen([sys.executable, "-P", "-m", "omnigent.runner._entry"], cwd=d,
                            env=env, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=die_with_launcher)
    return proc, runner_id


def stop_runner(proc: subprocess.Popen) -> None:
    """SIGTERM to the runner alone (it closes its sessions' harnesses and tmux servers, and
    must not get the signal at the same time as they do), then SIGKILL to its process group if
    it has not exited after a grace period."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(RUNNER_STOP_GRACE_S)
        return  # whatever it left behind is found by the leak check
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass


def _proc_start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), or None if gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # fields from 3 (state) on
    if fields[0] in ("Z", "X"):
        return None  # dead already; only its parent can reap it
    return fields[19]  # field 22, starttime


def process_snapshot() -> set:
    """(pid, start time) of every process alive now: these never count as leaks."""
    snap = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            start = _proc_start_time(int(name))
            if start is not None:
                snap.add((int(name), start))
    return snap


def instance_processes(d: str, before: set) -> list:
    """[(pid, start time, cmdline)] of live processes started after `before` that belong to
    the instance in `d`: cwd under d, an environment value (or `:`-list entry) under d, or a
    command line naming a path under d (tmux -S d/tmp/.../tmux.sock)."""
    prefix = d.rstrip("/") + "/"

    def under(p: str) -> bool:
        return p == d or p.startswith(prefix)

    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        pid = int(name)
        start = _proc_start_time(pid)
        if start is None or (pid, start) in before:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        hit = any(prefix in a for a in argv)
        if not hit:
            try:
                hit = under(os.readlink(f"/proc/{pid}/cwd"))
            except OSError:
                pass
        if not hit:
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    environ = f.read().split(b"\0")
                hit = any(under(v) for kv in environ
                          for v in kv.partition(b"=")[2].decode(errors="replace").split(":"))
            except OSError:
                pass
        if hit:
            found.append((pid, start, " ".join(argv)))
    return found


def kill_leaks(d: str, before: set) -> bool:
    """Reports (LEAK lines on stderr) and kills the instance's leftover processes."""
    leaks = instance_processes(d, before)
    for pid, _, cmdline in leaks:
        print(f"LEAK {pid} {cmdline}", file=sys.stderr, flush=True)

    def still(pid: int, start: str) -> bool:  # the same process (not a reused pid), alive
        return _proc_start_time(pid) == start

    alive = leaks
    for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 2)):
        alive = [(pid, start) for pid, start, *_ in alive if still(pid, start)]
        for pid, _ in alive:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait
        while alive and time.monotonic() < deadline:
            time.sleep(0.05)
            alive = [(pid, start) for pid, start in alive if still(pid, start)]
        if not alive:
            break
    return bool(leaks)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True, help="directory for all server state")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: a free port")
    ap.add_argument("--timeout", type=float, default=120,
                    help="seconds to wait for /health (and, with --runner, for the runner)")
    ap.add_argument("--ignore-stdin", action="store_true", help="do not stop on stdin EOF")
    ap.add_argument("--runner", action="store_true",
                    help="also start a runner; print RUNNER <id> before READY")
    args = ap.parse_args()

    d = os.path.abspath(args.dir)
    # Processes alive before anything starts are never this instance's leaks.
    before = process_snapshot() if args.runner else set()
    env = server_env(d)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log = open(os.path.join(d, "server.log"), "ab")
    parent = os.getppid()
    # A picked free port can be taken before the server binds it: retry a few times.
    for _attempt in range(1 if args.port else 3):
        port = args.port or free_port(args.host)
        url = f"http://{args.host}:{port}"
        cmd = [sys.executable, "-m", "omnigent", "server", "--host", args.host,
               "--port", str(port), "--database-uri", "sqlite:///" + os.path.join(d, "db.sqlite"),
               "--artifact-location", os.path.join(d, "artifacts"), "--no-open"]
        proc = subprocess.Popen(cmd, cwd=d, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=die_with_launcher)
        deadline = time.monotonic() + args.timeout
        while proc.poll() is None and not stop.is_set() and time.monotonic() < deadline:
            if healthy(url):
                break
            stop.wait(0.1)
        else:
            stop_server(proc)
            if stop.is_set():
                return 0
            if proc.returncode is not None and time.monotonic() < deadline:
                continue  # died early (port taken?): try another port
            print(f"omnigent server did not become healthy; see {d}/server.log",
                  file=sys.stderr, flush=True)
            return 1
        break
    else:
        print(f"omnigent server kept exiting at startup; see {d}/server.log",
              file=sys.stderr, flush=True)
        return 1

    runner = None
    code = 0
    if args.runner:
        runner_log = open(os.path.join(d, "runner.log"), "ab")
        runner, runner_id = start_runner(d, env, url, runner_log)
        deadline = time.monotonic() + args.timeout
        while True:
            if runner_online(url, runner_id):
                print(f"RUNNER {runner_id}", flush=True)
                break
            problem = None
            if runner.poll() is not None:
                problem = f"omnigent runner exited during startup ({runner.returncode})"
            elif proc.poll() is not None:
                problem = f"omnigent server exited ({proc.returncode})"
            elif time.monotonic() > deadline:
                problem = f"omnigent runner was not online within {args.timeout:g} s"
            elif stop.is_set():
                break
            if problem:
                print(f"{problem}; see {d}/runner.log and {d}/server.log",
                      file=sys.stderr, flush=True)
                code = 1
                break
            stop.wait(0.1)

    if not stop.is_set() and code == 0:
        print(f"READY {url}", flush=True)
        if not args.ignore_stdin:

            def watch_stdin() -> None:
                # Raw fd reads: a daemon thread blocked in sys.stdin's buffered reader holds its
                # lock and makes interpreter shutdown abort.
                try:
                    while os.read(0, 4096):
                        pass
                except OSError:
                    pass
                stop.set()

            threading.Thread(target=watch_stdin, daemon=True).start()

        while not stop.wait(0.5):
            if proc.poll() is not None:
                print(f"omnigent server exited ({proc.returncode}); see {d}/server.log",
                      file=sys.stderr, flush=True)
                code = 1
                break
            if runner is not None and runner.poll() is not None:
                print(f"omnigent runner exited ({runner.returncode}); see {d}/runner.log",
                      file=sys.stderr, flush=True)
                code = 1
                break
            if os.getppid() != parent:
                break
    if runner is not None:
        stop_runner(runner)
    stop_server(proc)
    if args.runner and kill_leaks(d, before) and code == 0:
        code = 3
    return code


if __name__ == "__main__":
    sys.exit(main())
