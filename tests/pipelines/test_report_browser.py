"""The run report in real headless Chromium: it loads with no console error, every image renders.

Chromium is driven over the DevTools protocol (no test framework): one browser, one page target,
``Page.navigate``, then ``Runtime.evaluate`` for the images' natural widths and
``Page.captureScreenshot`` for the artifact (``test-artifacts/report.png``). A deliberately broken
page is loaded in the same browser first, so the error collection is shown to catch what it must.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.report import write_report

CHROMIUM = Path("/usr/bin/chromium")
REPO = Path(__file__).resolve().parents[2]
ARTIFACT = REPO / "test-artifacts" / "report.png"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
    "--window-size=1280,2000",
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (/usr/bin/chromium)"),
]
websocket = pytest.importorskip("websocket", reason="needs websocket-client to speak the DevTools protocol")


class Page:
    """A DevTools-protocol session on one page target, collecting the errors the page reports."""

    def __init__(self, ws_url: str) -> None:
        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self.next_id = 0
        self.errors: list[str] = []
        self.events: list[str] = []
        for method in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.call(method)

    def _event(self, msg: dict) -> None:
        method, params = msg["method"], msg.get("params", {})
        self.events.append(method)
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(
                "console: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
            )
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.errors.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append(
                "exception: " + str(details.get("exception", {}).get("description", details.get("text")))
            )

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self._event(msg)

    def open(self, url: str, timeout: float = 30) -> None:
        """Navigate and wait for the load event; errors and events start afresh."""
        self.errors, self.events = [], []
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while "Page.loadEventFired" not in self.events:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not load in {timeout}s")
            self._event(json.loads(self.ws.recv()))
        self.call("Runtime.evaluate", expression="1")  # drain events queued before the load event

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def screenshot(self, path: Path) -> None:
        size = self.call("Page.getLayoutMetrics")["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))


def _devtools_port(profile: Path, proc: subprocess.Popen, timeout: float = 30) -> int:
    active = profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with {proc.returncode}")
        if active.exists() and active.read_text().strip():
            return int(active.read_text().split()[0])
        time.sleep(0.1)
    raise TimeoutError("chromium wrote no DevToolsActivePort")


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Iterator[Page]:
    profile = tmp_path_factory.mktemp("chromium-profile")
    proc = subprocess.Popen(
        [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port = _devtools_port(profile, proc)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
            targets = json.load(resp)
        target = next(t for t in targets if t["type"] == "page")
        session = Page(target["webSocketDebuggerUrl"])
        yield session
        session.ws.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def test_error_collection_catches_a_broken_page(page: Page, tmp_path: Path) -> None:
    """Control: a missing image, a console.error and an exception are all reported."""
    broken = tmp_path / "broken.html"
    broken.write_text(
        '<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body><img src="missing.png">'
        "<script>console.error('seen'); undefinedFunction();</script></body></html>"
    )
    page.open(broken.as_uri())
    assert page.evaluate("Array.from(document.images).map(i => i.naturalWidth)") == [0]
    kinds = {e.split(":", 1)[0] for e in page.errors}
    assert {"console", "exception", "log"} <= kinds, page.errors


def test_report_renders_in_chromium(page: Page, sample_run: Path) -> None:
    index = write_report(sample_run)
    page.open(index.as_uri())
    assert page.evaluate("document.readyState") == "complete"
    widths = page.evaluate("Array.from(document.images).map(i => i.complete ? i.naturalWidth : -1)")
    assert len(widths) >= 5, widths  # funnel, removals, languages, lengths, clusters, domains
    assert all(w > 0 for w in widths), widths
    assert page.errors == []
    headings = page.evaluate("Array.from(document.querySelectorAll('h2')).map(h => h.textContent)")
    assert {"Funnel", "Removals by rule", "Languages", "Sampled documents"} <= set(headings)
    page.screenshot(ARTIFACT)
    assert ARTIFACT.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
