#!/usr/bin/env python3
"""Bytes out / bytes in for every UDP service of `goodput server`, from a
source that never answers (as a forged address would), on loopback.

Usage: bench/amplification.py [path/to/goodput]   (default target/release/goodput)

For each service it sends a fixed set of datagrams from a fresh socket,
listens for 1.5 s (QUIC without Retry: past the handshake deadline), and
counts payload bytes and on-wire bytes (payload + 28 B of IPv4 and UDP
headers per datagram) both ways. The QUIC Initials are real ones, captured
from `goodput quic` aimed at a socket of this script that never answers.
Prints a Markdown table; docs/benchmarks.md keeps the latest one.
"""

import os
import socket
import struct
import subprocess
import sys
import time

GP = sys.argv[1] if len(sys.argv) > 1 else "target/release/goodput"
HEADERS = 28


def free_port(kind):
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def udp_socket():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 20)
    s.bind(("127.0.0.1", 0))
    s.settimeout(0.1)
    return s


def exchange(port, datagrams, listen=1.5):
    s = udp_socket()
    sent = [0, 0]
    got = [0, 0, 0]  # payload, datagrams, largest
    for d in datagrams:
        s.sendto(d, ("127.0.0.1", port))
        sent[0] += len(d)
        sent[1] += 1
    end = time.time() + listen
    while time.time() < end:
        try:
            d, _ = s.recvfrom(70000)
        except socket.timeout:
            continue
        got[0] += len(d)
        got[1] += 1
        got[2] = max(got[2], len(d))
    s.close()
    return sent, got


def wait_udp(port):
    needle = ":%04X" % port
    for _ in range(200):
        with open("/proc/net/udp") as f:
            if needle in f.read():
                return
        time.sleep(0.02)
    raise SystemExit(f"nothing bound UDP {port}")


def capture_initials(n):
    sink = udp_socket()
    sink.settimeout(0.2)
    port = sink.getsockname()[1]
    client = subprocess.Popen(
        [GP, "quic", "127.0.0.1", str(port), "--insecure", "-c", str(n)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    seen = {}
    end = time.time() + 10
    while len(seen) < n and time.time() < end:
        try:
            d, _ = sink.recvfrom(70000)
        except socket.timeout:
            continue
        if len(d) >= 1200 and d[0] & 0x80 and d[0] & 0x30 == 0:
            seen.setdefault(d[6 : 6 + d[5]], d)
    client.kill()
    client.wait()
    if len(seen) < n:
        raise SystemExit(f"captured {len(seen)} of {n} Initials")
    return list(seen.values())


def server(extra):
    ports = {
        "tcp": free_port(socket.SOCK_STREAM),
        "stamp": free_port(socket.SOCK_DGRAM),
        "discard": free_port(socket.SOCK_STREAM),
        "iperf3": free_port(socket.SOCK_STREAM),
        "quic": free_port(socket.SOCK_DGRAM),
    }
    cmd = [GP, "server", "--listen", "127.0.0.1", "--port", str(ports["tcp"]), "-v", "0",
           "--stamp", "--stamp-listen", "127.0.0.1", "--stamp-port", str(ports["stamp"]),
           "--discard-port", str(ports["discard"]),
           "--iperf3", "--iperf3-listen", "127.0.0.1", "--iperf3-port", str(ports["iperf3"]),
           "--quic", "--quic-listen", "127.0.0.1", "--quic-port", str(ports["quic"])] + extra
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for k in ("stamp", "quic", "tcp"):
        wait_udp(ports[k]) if k != "tcp" else None
    wait_udp(ports["tcp"])  # the media service shares the TCP port number
    return p, ports


def media_request(nonce):
    # The media wire's Request without a cookie: magic, version 1, kind 1,
    # nonce, bit rate, frame rate, length, datagram size, flags, buffer,
    # 16 zero cookie bytes, padded to 64 bytes.
    b = b"GPMS" + bytes([1, 1]) + struct.pack(">QQIIIBI", nonce, 25_000_000, 60, 10, 1400, 0, 2000)
    return (b + bytes(16)).ljust(64, b"\0")


def row(name, sent, got):
    pin, nin = sent
    pout, nout, largest = got
    win, wout = pin + HEADERS * nin, pout + HEADERS * nout
    return (f"| {name} | {nin} / {pin} B / {win} B | {nout} / {pout} B / {wout} B | "
            f"{pout / pin:.3f} | {wout / win:.3f} | {largest} B |")


def main():
    if not os.path.exists(GP):
        raise SystemExit(f"{GP} not found: cargo build --release first")
    stamp_sizes = [0, 1, 13, 14, 20, 43, 44, 100, 512, 1000, 1472, 4000, 9000, 9500]
    junk = [os.urandom(n) for n in stamp_sizes]
    initials = capture_initials(20)
    rows = []
    p, ports = server([])
    try:
        rows.append(row("STAMP reflector, 14 sizes 0–9,500 B", *exchange(ports["stamp"], junk)))
        rows.append(row("STAMP, one 14-B TWAMP-Light request", *exchange(ports["stamp"], [os.urandom(14)])))
        rows.append(row("UDP discard, 14 sizes", *exchange(ports["discard"], junk)))
        rows.append(row("iperf3 port (UDP, no test running), 14 sizes", *exchange(ports["iperf3"], junk)))
        rows.append(row("media: Request without cookie (64 B)", *exchange(ports["tcp"], [media_request(7)])))
        rows.append(row("media: junk, 14 sizes", *exchange(ports["tcp"], junk)))
        rows.append(row("QUIC (default, Retry): 20 Initials", *exchange(ports["quic"], initials)))
    finally:
        p.terminate()
        p.wait()
    p, ports = server(["--stamp-pad-short", "--quic-no-retry", "--hello-timeout", "1s"])
    try:
        rows.append(row("STAMP --stamp-pad-short, one 14-B request", *exchange(ports["stamp"], [os.urandom(14)])))
        rows.append(row("QUIC --quic-no-retry: 20 Initials", *exchange(ports["quic"], initials, listen=3.0)))
    finally:
        p.terminate()
        p.wait()
    print("| service and input | in: datagrams / payload / wire | out: datagrams / payload / wire "
          "| out/in payload | out/in wire | largest reply |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
