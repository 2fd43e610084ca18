"""Screenshot of a rammer run-time trace in a browser-based trace viewer (speedscope, headless Chromium).

Set-up (once): apt-get install -y chromium; pip install playwright; npm install --prefix /tmp/ss speedscope
Then:  rammer run --zoo nasnet-small --profile trace.json
       python ci/trace_screenshot.py trace.json docs/profile-speedscope.png --viewer /tmp/ss/node_modules/speedscope

speedscope reads the Chrome trace-event JSON that `rammer run --profile` writes (as chrome://tracing and
Perfetto do); its "Time Order" view shows one track per vEU.  The viewer is served on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import shutil
import sys
import tempfile
import threading


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--viewer", required=True, help="the speedscope npm package folder")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--width", type=int, default=1500)
    ap.add_argument("--height", type=int, default=650)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    site = tempfile.mkdtemp()
    shutil.copytree(os.path.join(args.viewer, "dist", "release"), site, dirs_exist_ok=True)
    shutil.copy(args.trace, os.path.join(site, "trace.json"))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=site)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=args.chromium, args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-quic"])
            page = browser.new_page(viewport={"width": args.width, "height": args.height})
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/index.html#profileURL=trace.json")
            page.wait_for_timeout(3000)
            page.screenshot(path=args.out)
            browser.close()
    finally:
        server.shutdown()
        shutil.rmtree(site, ignore_errors=True)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
