#!/usr/bin/env python3
"""Page-ready times of dashboard pages in a real headless browser.

    python3 bench/dashboard_page.py [--loads N] URL...

Starts Debian's chromedriver, opens one headless chromium session (W3C
WebDriver over plain HTTP, the standard library only), then loads each
URL once as a warm-up and N times (default 7), with about:blank between
loads so each is a new navigation. After each load it reads the page's
Navigation Timing entry (`performance.getEntriesByType('navigation')[0]`),
all in milliseconds from the start of the navigation:

  first byte   responseStart   (the server's answer began)
  last byte    responseEnd     (the whole HTML arrived)
  dom          domComplete     (parsed and laid out, SVG included)
  ready        loadEventEnd    (the load event done: the page is ready)

and prints, per URL, the median, minimum and maximum of each, the HTML's
size, and one line `ready_ms URL MEDIAN` for a caller to parse.
"""

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Driver:
    def __init__(self):
        exe = shutil.which("chromedriver")
        if not exe:
            sys.exit("chromedriver not installed (apt-get install chromium chromium-driver)")
        binary = next(
            (b for b in ("/usr/bin/chromium", "/usr/lib/chromium/chromium") if os.path.exists(b)),
            "chromium",
        )
        self.port = free_port()
        self.profile = tempfile.mkdtemp(prefix="dashbench-chromium-")
        self.log = open(os.path.join(self.profile, "chromedriver.log"), "w")
        self.proc = subprocess.Popen(
            [exe, f"--port={self.port}"], stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.time() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if time.time() > deadline:
                    sys.exit("chromedriver did not start")
                time.sleep(0.05)
        caps = {
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "pageLoadStrategy": "normal",
                    "goog:chromeOptions": {
                        "binary": binary,
                        "args": [
                            "--headless=new",
                            "--no-sandbox",
                            "--disable-gpu",
                            "--disable-dev-shm-usage",
                            "--window-size=1280,1000",
                            f"--user-data-dir={self.profile}/profile",
                        ],
                    },
                }
            }
        }
        self.session = self.call("POST", "/session", caps)["sessionId"]

    def call(self, method, path, body=None):
        if path != "/session":
            path = f"/session/{self.session}{path}"
        data = None if method == "GET" else json.dumps(body or {}).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return json.load(r)["value"]
        except urllib.error.HTTPError as e:
            sys.exit(f"{method} {path}: {e.code} {e.read()[:500]!r}")

    def go(self, url):
        self.call("POST", "/url", {"url": url})

    def script(self, js):
        return self.call("POST", "/execute/sync", {"script": js, "args": []})

    def close(self):
        try:
            self.call("DELETE", "")
        finally:
            self.proc.terminate()
            self.proc.wait(10)
            self.log.close()
            shutil.rmtree(self.profile, ignore_errors=True)


TIMING = """
const n = performance.getEntriesByType('navigation')[0];
return {first: n.responseStart, last: n.responseEnd, dom: n.domComplete,
        ready: n.loadEventEnd, bytes: n.decodedBodySize,
        state: document.readyState, title: document.title};
"""


def main():
    args = sys.argv[1:]
    loads = 7
    if args[:1] == ["--loads"]:
        loads = int(args[1])
        args = args[2:]
    if not args:
        sys.exit(__doc__)
    d = Driver()
    try:
        for url in args:
            rows = []
            for i in range(loads + 1):
                d.go("about:blank")
                d.go(url)
                t = d.script(TIMING)
                # WebDriver returns after the load event; its end may
                # still be 0 for a moment.
                deadline = time.time() + 30
                while not t["ready"] and time.time() < deadline:
                    time.sleep(0.01)
                    t = d.script(TIMING)
                if not t["ready"]:
                    sys.exit(f"{url}: no load event in 30 s")
                if i > 0:
                    rows.append(t)
            print(f"{url}  ({rows[0]['title']}, {rows[0]['bytes'] / 1024:.0f} KiB of HTML, {loads} loads after a warm-up)")
            for k, what in (
                ("first", "first byte"),
                ("last", "last byte"),
                ("dom", "dom complete"),
                ("ready", "load event end"),
            ):
                v = [r[k] for r in rows]
                print(
                    f"  {what:<16} median {statistics.median(v):8.1f} ms   min {min(v):8.1f}   max {max(v):8.1f}"
                )
            print(f"ready_ms {url} {statistics.median(r['ready'] for r in rows):.1f}")
    finally:
        d.close()


if __name__ == "__main__":
    main()
