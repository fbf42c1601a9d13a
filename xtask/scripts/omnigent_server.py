"""Starts an Omnigent server (PyPI `omnigent`) with all its state in one directory.

Run with the Python of the venv that has `omnigent` installed:

    python omnigent_server.py --dir DIR [--host 127.0.0.1] [--port 0] [--timeout 120]
                              [--ignore-stdin]

Everything the server writes (home, config, data/logs, sqlite database, artifacts, temp files,
harness sockets) goes under DIR, which is created if needed. `--port 0` picks a free port. Once
the server answers `GET /health` with 200, one line `READY http://HOST:PORT` is printed on
stdout; the server's own output goes to DIR/server.log. The launcher then waits and stops the
server (its whole process group) on SIGTERM or SIGINT, on EOF on stdin (unless
`--ignore-stdin`; stdin is watched from READY on), or when its parent process exits; the server
also gets SIGTERM if the launcher itself is killed (Linux PR_SET_PDEATHSIG). Exit status: 0 after a requested stop,
1 if the server failed to start or died on its own.

Bind a loopback host: the server then runs in single-user mode (no login, no auth headers).
"""

import argparse
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_env(d: str) -> dict:
    # Drop inherited Omnigent settings (auth mode, database, ...) so the server is hermetic.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMNIGENT_")}
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True, help="directory for all server state")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: a free port")
    ap.add_argument("--timeout", type=float, default=120, help="seconds to wait for /health")
    ap.add_argument("--ignore-stdin", action="store_true", help="do not stop on stdin EOF")
    args = ap.parse_args()

    d = os.path.abspath(args.dir)
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

    code = 0
    while not stop.wait(0.5):
        if proc.poll() is not None:
            print(f"omnigent server exited ({proc.returncode}); see {d}/server.log",
                  file=sys.stderr, flush=True)
            code = 1
            break
        if os.getppid() != parent:
            break
    stop_server(proc)
    return code


if __name__ == "__main__":
    sys.exit(main())
