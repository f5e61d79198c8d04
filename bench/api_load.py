#!/usr/bin/env python3
"""Open-loop load on a goodput agent's API: first stores RUNS runs through
PUT /api/v1/runs/{id} (as the peer DEST hands over results: from DEST's
address, FROM), then sends RATE
requests a second for SECONDS over a mix of read calls, each on a new
connection, on its own schedule (a slow answer does not slow the sender),
and prints the latency percentiles.

  bench/api_load.py HOST:PORT TOKEN SOURCE DEST FROM RUNS RATE SECONDS
"""
import http.client
import json
import sys
import threading
import time

host, port = sys.argv[1].rsplit(":", 1)
port = int(port)
token, source, dest, peer = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
runs, rate, seconds = int(sys.argv[6]), float(sys.argv[7]), float(sys.argv[8])


def call(method, path, body=None, auth=False):
    # Handing over results comes from the peer's address, as the agent
    # checks; reads come from anywhere.
    src = (peer, 0) if auth else None
    c = http.client.HTTPConnection(host, port, timeout=30, source_address=src)
    headers = {"Content-Type": "application/json"}
    if auth:
        headers["Authorization"] = "Bearer " + token
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


now_ms = int(time.time() * 1000)
spec = {"kind": "stamp", "host": "127.0.0.2", "count": 100}
for i in range(runs):
    at = now_ms - (runs - i) * 60_000
    run = {
        "id": f"bench/{source}/{dest}/{i}", "task": "bench", "source": source, "dest": dest,
        "kind": "stamp", "class": "background", "state": "finished", "reason": None,
        "scheduled_ms": at, "start_ms": at, "end_ms": at + 1000, "measurement_key": "bench-key",
        "spec": spec, "result": None,
        "figures": {"throughput_up_bps": None, "throughput_down_bps": None, "loss_pct": 0.0,
                    "duplicates": 0.0, "reordered": 0.0, "delay_min_us": 20.0 + i % 7,
                    "delay_median_us": 30.0 + i % 11, "delay_p95_us": 50.0, "delay_max_us": 90.0,
                    "jitter_us": 3.0, "retransmits": None, "errors": 0.0},
    }
    status, data = call("PUT", f"/api/v1/runs/bench/{source}/{dest}/{i}", json.dumps(run), auth=True)
    if status != 204:
        sys.exit(f"PUT run {i}: HTTP {status}: {data[:200]!r}")

paths = [
    "/api/v1/health",
    "/api/v1/runs?limit=100",
    f"/api/v1/runs/bench/{source}/{dest}/{runs // 2}",
    f"/api/v1/series?key=bench-key&metric=delay_median&from_ms={now_ms - runs * 60_000}&to_ms={now_ms}",
    "/metrics",
    "/api/v1/schedule",
    "/api/v1/tasks",
]
latencies = []
errors = []
lock = threading.Lock()


def one(path):
    t = time.perf_counter()
    try:
        status, _ = call("GET", path)
        ok = status == 200
    except Exception as e:  # noqa: BLE001 - every failure counts
        ok, status = False, str(e)
    dt = time.perf_counter() - t
    with lock:
        latencies.append(dt)
        if not ok:
            errors.append((path, status))


threads = []
start = time.perf_counter()
n = int(rate * seconds)
for i in range(n):
    due = start + i / rate
    delay = due - time.perf_counter()
    if delay > 0:
        time.sleep(delay)
    th = threading.Thread(target=one, args=(paths[i % len(paths)],))
    th.start()
    threads.append(th)
for th in threads:
    th.join()
elapsed = time.perf_counter() - start
latencies.sort()


def pct(p):
    return latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] * 1000


print(f"{len(latencies)} requests in {elapsed:.1f} s ({len(latencies) / elapsed:.0f}/s offered {rate:.0f}/s), "
      f"{len(errors)} errors; latency p50 {pct(50):.2f} ms, p99 {pct(99):.2f} ms, max {latencies[-1] * 1000:.2f} ms")
if errors:
    print("errors:", errors[:5])
    sys.exit(1)
