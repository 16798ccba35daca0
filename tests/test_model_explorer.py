"""verify's findings on the graph, in a real browser: `jaxport verify --localize --node-data
--explore` on a model with a planted wrong lowering serves Model Explorer, the system's headless
Chromium renders it, and the test reads the page: the node data table names the planted node as
the one of largest error, in red, with nothing else red where each node ran on the reference's
inputs and everything downstream of it red on jaxport's own values; the screenshot has the
planted node's red box on the graph's canvas.

Needs Chromium (a Debian package: `apt-get install chromium`), Model Explorer and the DevTools
client (requirements/explore.txt, which `make setup` installs); it skips without them, except
where JAXPORT_BROWSER_TEST=required (.ci/run sets it, after installing Chromium), where it fails.
JAXPORT_SCREENSHOT_DIR keeps the screenshot there.
"""

from __future__ import annotations

import base64
import importlib.util
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest
import torch

from tests.support import browser
from tests.test_node_data import DOWNSTREAM, WRONG_AMAX, MinMax

#: node data colours as the page computes them (jaxport.verification.node_data.BANDS)
RED, DARK_GREEN, LIGHT_GREEN = "rgb(215, 48, 39)", "rgb(26, 152, 80)", "rgb(145, 207, 96)"

#: how long Model Explorer may take to be served (the model converted and run node by node first)
SERVE_SECONDS = 240


def _missing() -> str | None:
    if browser.chromium() is None:
        return "no Chromium (apt-get install chromium)"
    for module, what in (("model_explorer", "Model Explorer"), ("websocket", "websocket-client")):
        if importlib.util.find_spec(module) is None:
            return f"no {what} (pip install -r requirements/explore.txt)"
    return None


@pytest.fixture(scope="module")
def needs_browser():
    missing = _missing()
    if missing and os.environ.get("JAXPORT_BROWSER_TEST") == "required":
        pytest.fail(f"the browser test is required here (JAXPORT_BROWSER_TEST=required) and has {missing}")
    if missing:
        pytest.skip(missing)


class Server:
    """`jaxport verify ... --explore` in a process of its own (its session, so that Ctrl+C can be
    sent to it alone), its output read line by line. `BROWSER=true` keeps Model Explorer from
    opening a browser of its own; a proxy that refuses (but not for localhost) makes its look for
    a newer release on the package index, in a thread the process waits for at exit, fail at once
    rather than wait on a network this machine may not reach."""

    def __init__(self, args: list[str], cwd: str):
        env = dict(os.environ, PYTHONUNBUFFERED="1", BROWSER="true", HTTP_PROXY="http://127.0.0.1:9",
                   HTTPS_PROXY="http://127.0.0.1:9", NO_PROXY="localhost,127.0.0.1")
        self.process = subprocess.Popen([sys.executable, "-m", "jaxport", *args], cwd=cwd, env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        start_new_session=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def url(self, timeout: float) -> str:
        """The page's address, as Model Explorer prints it once it serves."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                break
            self.output.append(line)
            if line.startswith("http://"):
                return line.strip()
        raise AssertionError("Model Explorer was not served:\n" + "".join(self.output))

    def stop(self) -> int:
        """Ctrl+C, as a user stops it; its exit code."""
        browser.stop_group(self.process, signal.SIGINT, timeout=60)
        try:
            while (line := self.lines.get(timeout=10)) is not None:
                self.output.append(line)
        except queue.Empty:
            pass
        return self.process.returncode


#: The node data table of the side panel: its header (one column per node data file) and each
#: row's cells, as [text, computed background colour].
READ_TABLE = """(() => {
  const table = [...document.querySelectorAll('table.results')].find(t => t.querySelector('td.node-label'));
  if (!table) return null;
  const cells = row => [...row.querySelectorAll('td, th')].map(c => [c.textContent.trim(), getComputedStyle(c).backgroundColor]);
  return {header: cells(table.querySelector('tr')), rows: [...table.querySelectorAll('tbody tr')].map(cells)};
})()"""

#: How many pixels of each colour a PNG (base64) holds inside the graph's canvas (the largest).
COUNT_PIXELS = """(async () => {
  const image = new Image();
  image.src = 'data:image/png;base64,%s';
  await image.decode();
  const canvas = document.createElement('canvas');
  canvas.width = image.width; canvas.height = image.height;
  const context = canvas.getContext('2d');
  context.drawImage(image, 0, 0);
  const graph = [...document.querySelectorAll('canvas')].map(c => c.getBoundingClientRect())
    .sort((a, b) => b.width * b.height - a.width * a.height)[0];
  const pixels = context.getImageData(graph.left, graph.top, graph.width, graph.height).data;
  const colours = %s, counts = colours.map(() => 0);
  for (let i = 0; i < pixels.length; i += 4)
    colours.forEach((c, k) => { if (Math.abs(pixels[i] - c[0]) + Math.abs(pixels[i + 1] - c[1]) + Math.abs(pixels[i + 2] - c[2]) < 12) counts[k]++; });
  return counts;
})()"""


def _rgb(css: str) -> list[int]:
    return [int(part) for part in css[css.index("(") + 1:-1].split(",")]


def test_model_explorer_shows_the_planted_node_as_the_one_of_largest_error(needs_browser, tmp_path, record_property):
    torch.manual_seed(21)
    ep = torch.export.export(MinMax().eval(), (torch.randn(5, 6),))
    torch.export.save(ep, tmp_path / "minmax.pt2")
    (tmp_path / "wrong_amax.py").write_text(WRONG_AMAX)
    start = time.perf_counter()
    server = Server(["verify", "minmax.pt2", "--localize", "--node-data", "errors.json", "--explore",
                     "--lowerings", "wrong_amax.py", "--seed", "3"], cwd=str(tmp_path))
    try:
        url = server.url(SERVE_SECONDS)
        record_property("served_seconds", round(time.perf_counter() - start, 1))
        data = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)["data"][0]
        assert str(tmp_path / "errors.json") in data and str(tmp_path / "minmax.pt2") in data
        with browser.Browser(browser.chromium()) as page:
            page.navigate(url)
            # both files' values in, each row a cell per file
            table = page.wait_for(f"(t => t && t.rows.filter(r => r.length == 4 && r[2][0] !== '-' && r[3][0] !== '-')"
                                  f".length >= 8 && t)({READ_TABLE})", timeout=60)
            names = [text for text, _ in table["header"][2:]]
            assert [n.removesuffix("visibility").removesuffix("visibility_off").strip() for n in names] == \
                ["1 errors.propagated.json", "2 errors.json"], names
            rows = [row for row in table["rows"] if row[3][0] != "-"]
            local = {row[1][0]: (float(row[3][0]), row[3][1]) for row in rows}
            spread = [(row[1][0], float(row[2][0]), row[2][1]) for row in rows]

            # Each node on the reference's inputs: the planted node is the largest error, the only red.
            largest = max(local, key=lambda label: local[label][0])
            assert largest == "aten.aminmax" and local[largest] == (pytest.approx(0.5, rel=1e-3), RED), local
            assert all(colour in (DARK_GREEN, LIGHT_GREEN) for label, (_, colour) in local.items()
                       if label != largest), local
            # On jaxport's own values: green before it, red from it on (the graph's order).
            labels = [label for label, _, _ in spread]
            planted = labels.index("aten.aminmax")
            assert all(colour in (DARK_GREEN, LIGHT_GREEN) for _, _, colour in spread[:planted]), spread
            assert [colour for _, _, colour in spread[planted:]] == [RED] * (1 + len(DOWNSTREAM)), spread

            # The graph: the row's click brings its node into view; its box is red on the canvas.
            page.evaluate("[...document.querySelectorAll('td.node-label')]"
                          ".find(c => c.textContent.trim() === 'aten.aminmax').click()")
            time.sleep(3)  # its animation over
            shot = page.screenshot()
            (tmp_path / "model-explorer.png").write_bytes(shot)
            if os.environ.get("JAXPORT_SCREENSHOT_DIR"):
                shutil.copy(tmp_path / "model-explorer.png", os.environ["JAXPORT_SCREENSHOT_DIR"])
            red, green = page.evaluate(COUNT_PIXELS % (base64.b64encode(shot).decode(), [_rgb(RED), _rgb(DARK_GREEN)]))
            record_property("canvas_pixels_red_green", [red, green])
            assert red > 1500 and green > red, (red, green)

            # Served from the package: every request the page made went to Model Explorer's own
            # server, but for one web font it falls back from (fonts.gstatic.com) when offline.
            hosts = {urllib.parse.urlparse(u).hostname for u in page.requests if u.startswith("http")}
            assert hosts <= {"localhost", "127.0.0.1", "fonts.gstatic.com"}, hosts
    finally:
        code = server.stop()
    output = "".join(server.output)
    assert code == 1, output  # the model does not match: verify's exit code, after Ctrl+C
    assert "first diverging node" in output and "node amax (aten.amax.default)" in output, output
