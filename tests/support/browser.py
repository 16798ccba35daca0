"""Headless Chromium driven over the Chrome DevTools protocol, for tests that read a web page.

The browser is the system's (`chromium`, a Debian package; none is downloaded), started with a
fresh profile and without the network services a first run would reach for, and spoken to over
its DevTools websocket (`websocket-client`, requirements/explore.txt): navigate, evaluate
JavaScript, capture a screenshot, and the URL of every request the page made.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from typing import Any

#: The flags every start passes: headless, no sandbox (the tests run as root), no GPU (WebGL in
#: SwiftShader, which Chromium asks to be allowed explicitly), and nothing fetched on its own.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-default-browser-check", "--remote-debugging-port=0")


def chromium() -> str | None:
    """The system's Chromium, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def stop_group(process: subprocess.Popen, first: signal.Signals, timeout: float) -> int:
    """Send `first` to `process`'s group (while it runs), SIGKILL after `timeout` s; its exit code."""
    if process.poll() is None:
        os.killpg(process.pid, first)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return process.returncode


class Browser:
    """A headless Chromium with one page, closed with the context."""

    def __init__(self, executable: str, width: int = 1400, height: int = 900, timeout: float = 30.0):
        import websocket  # requirements/explore.txt

        self.profile = tempfile.mkdtemp(prefix="jaxport-chromium-")
        self.process = subprocess.Popen([executable, *FLAGS, f"--user-data-dir={self.profile}",
                                         f"--window-size={width},{height}", "about:blank"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.socket = None
        self.calls = 0
        self.requests: list[str] = []
        try:
            port = self._port(timeout)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=timeout) as answer:
                pages = [t for t in json.load(answer) if t["type"] == "page"]
            self.socket = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=timeout,
                                                      suppress_origin=True)
        except BaseException:
            self.close()
            raise
        self.call("Network.enable")
        self.call("Page.enable")

    def _port(self, timeout: float) -> int:
        """The DevTools port Chromium chose (it writes it into the profile)."""
        path = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.process.returncode} before it listened")
            try:
                with open(path) as f:
                    return int(f.readline())
            except (OSError, ValueError):
                time.sleep(0.1)
        raise TimeoutError("chromium did not open its DevTools port")

    def call(self, method: str, **params: Any) -> dict:
        """One DevTools command; its result. Events that arrive meanwhile are read for requests."""
        self.calls += 1
        self.socket.send(json.dumps({"id": self.calls, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("method") == "Network.requestWillBeSent":
                self.requests.append(message["params"]["request"]["url"])
            if message.get("id") == self.calls:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        """A JavaScript expression's value (promises awaited)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript failed: {result['exceptionDetails'].get('text')}: {expression[:200]}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60.0, every: float = 0.25) -> Any:
        """Evaluate `expression` until its value is truthy; that value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"the page never satisfied: {expression[:200]}")
            time.sleep(every)

    def screenshot(self) -> bytes:
        """The page as a PNG."""
        return base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])

    def close(self) -> None:
        try:
            if self.socket is not None:
                self.socket.close()
        finally:
            stop_group(self.process, signal.SIGTERM, timeout=10)
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
