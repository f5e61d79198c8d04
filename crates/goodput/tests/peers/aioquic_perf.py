#!/usr/bin/env python3
"""A QUIC perf peer on aioquic (PyPI), for goodput's interop tests.

The perf protocol (draft-banks-quic-performance) over a QUIC stack that is
not quinn: ALPN "perf"; on each client stream the first 8 bytes are the
response size (u64, big-endian), then any upload, then FIN; the server
answers after the FIN with exactly that many bytes and FIN, on the same
stream for a bidirectional request and on a new server stream for a
unidirectional one.

  server --port P [--no-empty-uni]   serve until killed; prints "ready PORT".
      A size-0 unidirectional request gets an empty reply stream (as quinn
      perf's server does) unless --no-empty-uni (none, as the draft's text
      reads).
  client --port P [--bidi N,...] [--uni N,...] [--upload N]
      all requests at once; each bidirectional reply must be exactly its
      size; the unidirectional replies, taken as they come, must have
      exactly the sizes asked (one stream per request, size 0 included).
      Prints one JSON line; exits 1 on any mismatch.
"""

import argparse
import asyncio
import datetime
import json
import os
import ssl
import sys
import tempfile

from aioquic.asyncio import QuicConnectionProtocol, connect, serve
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamDataReceived
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

ALPN = ["perf"]
CHUNK = 1 << 16


def is_uni(stream_id):
    return stream_id & 2 == 2


def certificate(directory):
    """A fresh ECDSA P-256 self-signed certificate for localhost."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path = os.path.join(directory, "cert.pem")
    key_path = os.path.join(directory, "key.pem")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return cert_path, key_path


class PerfServer(QuicConnectionProtocol):
    empty_uni = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.requests = {}

    def quic_event_received(self, event):
        if not isinstance(event, StreamDataReceived):
            return
        got = self.requests.setdefault(event.stream_id, bytearray())
        if len(got) < 8:
            got.extend(event.data[: 8 - len(got)])
        if not event.end_stream:
            return
        del self.requests[event.stream_id]
        if len(got) < 8:
            if not is_uni(event.stream_id):
                self._quic.send_stream_data(event.stream_id, b"", end_stream=True)
            self.transmit()
            return
        size = int.from_bytes(got, "big")
        if size > 1 << 30:
            # Unlimited (or absurd): not served by this peer.
            if not is_uni(event.stream_id):
                self._quic.reset_stream(event.stream_id, 1)
                self.transmit()
            return
        if is_uni(event.stream_id):
            if size == 0 and not self.empty_uni:
                return
            reply = self._quic.get_next_available_stream_id(is_unidirectional=True)
        else:
            reply = event.stream_id
        self._quic.send_stream_data(reply, b"0" * size, end_stream=True)
        self.transmit()


class PerfClient(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.bidi = {}
        self.uni_replies = {}
        self.uni_done = []
        self.changed = asyncio.Event()
        self.closed = None

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            self.closed = event.reason_phrase or f"error {event.error_code}"
            self.changed.set()
        if not isinstance(event, StreamDataReceived):
            return
        if is_uni(event.stream_id):
            n = self.uni_replies.get(event.stream_id, 0) + len(event.data)
            self.uni_replies[event.stream_id] = n
            if event.end_stream:
                self.uni_done.append(n)
        else:
            n, _ = self.bidi.get(event.stream_id, (0, False))
            self.bidi[event.stream_id] = (n + len(event.data), event.end_stream)
        self.changed.set()

    def request(self, size, uni, upload):
        stream = self._quic.get_next_available_stream_id(is_unidirectional=uni)
        self._quic.send_stream_data(stream, size.to_bytes(8, "big") + b"x" * upload, end_stream=True)
        if not uni:
            self.bidi[stream] = (0, False)
        return stream


async def run_client(args):
    conf = QuicConfiguration(is_client=True, alpn_protocols=ALPN, verify_mode=ssl.CERT_NONE)
    conf.server_name = "localhost"
    bidi = [int(x) for x in args.bidi.split(",") if x]
    uni = [int(x) for x in args.uni.split(",") if x]
    async with connect("127.0.0.1", args.port, configuration=conf, create_protocol=PerfClient) as c:
        asked = {c.request(n, False, args.upload): n for n in bidi}
        for n in uni:
            c.request(n, True, args.upload)
        c.transmit()

        def done():
            return c.closed or (
                all(c.bidi[s][1] for s in asked) and len(c.uni_done) >= len(uni)
            )

        loop = asyncio.get_running_loop()
        deadline = loop.time() + args.timeout
        while not done() and loop.time() < deadline:
            c.changed.clear()
            try:
                await asyncio.wait_for(c.changed.wait(), deadline - loop.time())
            except asyncio.TimeoutError:
                break
        # Replies that should not come (a second empty stream, say).
        await asyncio.sleep(0.2)
        result = {
            "bidi_asked": [asked[s] for s in asked],
            "bidi_got": [c.bidi[s][0] if c.bidi[s][1] else None for s in asked],
            "uni_asked": sorted(uni),
            "uni_got": sorted(c.uni_done),
            "closed": c.closed,
        }
    result["ok"] = (
        result["bidi_asked"] == result["bidi_got"]
        and result["uni_asked"] == result["uni_got"]
        and result["closed"] is None
    )
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


async def run_server(args):
    PerfServer.empty_uni = not args.no_empty_uni
    with tempfile.TemporaryDirectory() as d:
        conf = QuicConfiguration(is_client=False, alpn_protocols=ALPN, max_datagram_frame_size=65536)
        conf.load_cert_chain(*certificate(d))
        server = await serve("127.0.0.1", args.port, configuration=conf, create_protocol=PerfServer)
        print(f"ready {args.port}", flush=True)
        try:
            await asyncio.sleep(args.timeout)
        finally:
            server.close()
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--bidi", default="")
    p.add_argument("--uni", default="")
    p.add_argument("--upload", type=int, default=0)
    p.add_argument("--no-empty-uni", action="store_true")
    p.add_argument("--timeout", type=float, default=30.0)
    args = p.parse_args()
    run = run_server if args.role == "server" else run_client
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
