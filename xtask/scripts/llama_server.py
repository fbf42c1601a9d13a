"""Starts llama.cpp's OpenAI-compatible HTTP server through xllamacpp.

Used by `cargo xtask it llama`; runs inside the venv that task creates.

    python llama_server.py --model PATH [--n-ctx 8192] [--parallel 2] [--threads N]
                           [--host 127.0.0.1] [--port 0] [--alias NAME] [--address-file PATH]

`--port 0` lets llama.cpp pick a free port. Once the model is loaded the listening address
(`http://HOST:PORT`) is printed on one line `listening: ADDRESS` and, with `--address-file`,
written to that file. The process then serves until SIGTERM or SIGINT, or until its parent
process exits (so a killed caller never leaves a server behind).
"""

import argparse
import os
import signal
import sys
import threading


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="GGUF file")
    ap.add_argument("--n-ctx", type=int, default=8192, help="total KV cache (all slots)")
    ap.add_argument("--parallel", type=int, default=2, help="parallel slots")
    ap.add_argument("--threads", type=int, default=0, help="0: llama.cpp's default")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: a free port")
    ap.add_argument("--alias", default="", help="model name served by /v1/models")
    ap.add_argument("--address-file", default="")
    args = ap.parse_args()

    import xllamacpp as xlc  # imported late so --help works without it

    params = xlc.CommonParams()
    params.model.path = args.model
    params.n_ctx = args.n_ctx
    params.n_parallel = args.parallel
    params.hostnames = [args.host]
    params.port = args.port
    params.endpoint_metrics = True
    if args.alias:
        params.model_alias = {args.alias}
    if args.threads > 0:
        params.cpuparams.n_threads = args.threads
        params.cpuparams_batch.n_threads = args.threads

    server = xlc.Server(params)
    address = server.listening_address
    if args.address_file:
        tmp = args.address_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(address + "\n")
        os.replace(tmp, args.address_file)
    print(f"listening: {address}", flush=True)

    parent = os.getppid()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(0.5):
        if os.getppid() != parent:
            print("parent exited", flush=True)
            break
    print("stopping", flush=True)
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main())
