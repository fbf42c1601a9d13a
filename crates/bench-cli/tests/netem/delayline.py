#!/usr/bin/env python3
"""A packet delay line for kernels without sch_netem: netfilter queues each packet (an nft
`queue` rule), this process holds it for `--delay-ms` (± `--jitter-ms`, uniform) and lets it
go, or drops it with probability `--loss`. Packets leave in deadline order, so jitter can
reorder them, as netem's does. Standard library only: it speaks nfnetlink_queue over a raw
netlink socket (the protocol libnetfilter_queue wraps).

Run it in the network namespace whose nft rule queues to `--queue`; the rule should say
`bypass`, so packets pass (undelayed) whenever no delay line listens. It prints `ready` once
bound, and counts on SIGTERM/SIGINT: `delayline: N packets, D dropped`.
"""

import argparse
import heapq
import os
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NLM_F_REQUEST = 1
NLM_F_ACK = 4
NLMSG_ERROR = 2
NF_DROP = 0
NF_ACCEPT = 1


def attr(kind, payload):
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * ((4 - length % 4) % 4)


class Queue:
    def __init__(self, num):
        self.num = num
        self.seq = 0
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind((0, 0))

    def send(self, msg_type, attrs, ack=False):
        self.seq += 1
        body = struct.pack("!BBH", socket.AF_UNSPEC, 0, self.num) + b"".join(attrs)
        flags = NLM_F_REQUEST | (NLM_F_ACK if ack else 0)
        kind = (NFNL_SUBSYS_QUEUE << 8) | msg_type
        self.sock.send(struct.pack("=IHHII", 16 + len(body), kind, flags, self.seq, 0) + body)
        if ack:
            data = self.sock.recv(65536)
            _, t, _, _, _ = struct.unpack_from("=IHHII", data)
            if t == NLMSG_ERROR:
                (err,) = struct.unpack_from("=i", data, 16)
                if err != 0:
                    raise OSError(-err, os.strerror(-err))

    def bind(self):
        self.send(NFQNL_MSG_CONFIG, [attr(NFQA_CFG_CMD, struct.pack("!BBH", NFQNL_CFG_CMD_BIND, 0, 0))], ack=True)
        self.send(NFQNL_MSG_CONFIG, [attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META))], ack=True)
        self.send(NFQNL_MSG_CONFIG, [attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", 65536))], ack=True)

    def verdict(self, packet_id, verdict):
        self.send(NFQNL_MSG_VERDICT, [attr(NFQA_VERDICT_HDR, struct.pack("!II", verdict, packet_id))])

    def packets(self, data):
        """The packet ids in one datagram of netlink messages."""
        off = 0
        while off + 16 <= len(data):
            length, kind, _, _, _ = struct.unpack_from("=IHHII", data, off)
            if length < 16:
                break
            if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                a = off + 16 + 4  # past nlmsghdr and nfgenmsg
                end = off + length
                while a + 4 <= end:
                    alen, akind = struct.unpack_from("=HH", data, a)
                    if alen < 4:
                        break
                    if akind & 0x7FFF == NFQA_PACKET_HDR:
                        (pid,) = struct.unpack_from("!I", data, a + 4)
                        yield pid
                    a += (alen + 3) & ~3
            off += (length + 3) & ~3


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queue", type=int, default=0)
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--jitter-ms", type=float, default=0.0)
    p.add_argument("--loss", type=float, default=0.0, help="drop probability, 0..1")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    rng = random.Random(a.seed)
    q = Queue(a.queue)
    q.bind()
    stats = {"packets": 0, "dropped": 0}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    print("ready", flush=True)
    held = []  # (deadline, n, packet id)
    n = 0
    while not stop:
        now = time.monotonic()
        while held and held[0][0] <= now:
            _, _, pid = heapq.heappop(held)
            q.verdict(pid, NF_ACCEPT)
        timeout = max(0.0, held[0][0] - now) if held else 0.5
        try:
            ready, _, _ = select.select([q.sock], [], [], timeout)
        except InterruptedError:
            continue
        if not ready:
            continue
        try:
            data = q.sock.recv(1 << 20)
        except InterruptedError:
            continue
        arrived = time.monotonic()
        for pid in q.packets(data):
            stats["packets"] += 1
            if a.loss > 0 and rng.random() < a.loss:
                stats["dropped"] += 1
                q.verdict(pid, NF_DROP)
                continue
            d = a.delay_ms + (rng.uniform(-a.jitter_ms, a.jitter_ms) if a.jitter_ms else 0.0)
            n += 1
            heapq.heappush(held, (arrived + max(0.0, d) / 1000.0, n, pid))
    # Let whatever is held go: stopping must not cut the connections it carries.
    for _, _, pid in sorted(held):
        q.verdict(pid, NF_ACCEPT)
    print(f"delayline: {stats['packets']} packets, {stats['dropped']} dropped", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
