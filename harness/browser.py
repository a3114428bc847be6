"""Headless Chromium driven through the DevTools protocol, for the UI journeys' tests.

    with Browser(tmp_dir) as browser:           Debian's chromium, headless, its own profile
        browser.goto(url)                       navigate, wait for the document to load
        browser.wait_for("a", text="Backfill")  an element that is shown and holds the text
        browser.click("button", text="Run")     a real mouse click at the element's centre
        browser.fill("input[name=username]", "admin")   keystrokes into a field
        browser.evaluate("document.title")      JavaScript in the page, its JSON value
        browser.screenshot(path)                the viewport as PNG

Chromium is started with `--remote-debugging-port=0` on 127.0.0.1 and a temporary user-data
dir; it writes the port it chose to `<user-data-dir>/DevToolsActivePort`, and the page's
target is driven over one websocket (the `websockets` package's sync client). Chromium runs in
a process group of its own and is stopped by that PID. A wait that times out raises one
BrowserError naming the selector, the text it wanted, the URL, and an excerpt of the page's
text, so a failed journey says what the page showed instead.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

CHROMIUM = "/usr/bin/chromium"  # Debian's package (scripts/install-system-deps.sh)
FLAGS = (
    "--headless",
    "--no-sandbox",  # root in a container has no user namespaces for the sandbox
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)


class BrowserError(RuntimeError):
    pass


# Finds the elements matching a selector whose visible text contains a string (or all of them,
# without a string), shown ones only: what a person can see and click.
_FIND = """
(function (selector, text) {
  return Array.from(document.querySelectorAll(selector)).filter(function (el) {
    var box = el.getBoundingClientRect();
    if (box.width === 0 && box.height === 0) return false;
    if (text === null) return true;
    var shown = (el.innerText || el.value || el.getAttribute("aria-label") || "");
    return shown.indexOf(text) >= 0;
  });
})
"""


class Browser:
    def __init__(
        self,
        workdir: Path | None = None,
        *,
        width: int = 1400,
        height: int = 900,
        timeout: float = 120.0,
        binary: str = CHROMIUM,
    ) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="chromium-", dir=workdir))
        self.width = width
        self.height = height
        # the default of every wait: generous, a shared 2-core machine was seen to keep
        # chromium from answering for a minute
        self.timeout = timeout
        self.binary = binary
        self.process: subprocess.Popen[bytes] | None = None
        self.socket: ClientConnection | None = None
        self._ids = itertools.count(1)
        self._closing = contextlib.ExitStack()  # the websocket's connection

    # -- start and stop ---------------------------------------------------------------

    def start(self, startup_timeout: float = 60.0) -> Browser:
        if not Path(self.binary).exists():
            raise BrowserError(
                f"no {self.binary}: scripts/install-system-deps.sh installs Debian's chromium"
            )
        log = open(self.profile / "chromium.log", "wb")  # noqa: SIM115 - the child keeps it
        with log:
            self.process = subprocess.Popen(
                [self.binary, *FLAGS, f"--user-data-dir={self.profile}",
                 f"--window-size={self.width},{self.height}", "about:blank"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        active = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + startup_timeout
        while not (active.exists() and len(active.read_text().splitlines()) >= 2):
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = (self.profile / "chromium.log").read_text(errors="replace")[-2000:]
                self.stop()
                raise BrowserError(f"chromium did not open its DevTools port: {tail}")
            time.sleep(0.1)
        port = int(active.read_text().splitlines()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as answer:
            targets = json.loads(answer.read())
        page = next(t for t in targets if t["type"] == "page")
        self.socket = self._closing.enter_context(
            connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=30)
        )
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
        )
        return self

    def stop(self) -> None:
        if self.socket is not None:
            with contextlib.suppress(Exception):
                self._closing.close()
            self.socket = None
        if self.process is not None:
            if self.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGTERM)
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self.process.pid, signal.SIGKILL)
                    self.process.wait()
            self.process = None
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the protocol -----------------------------------------------------------------

    def send(self, method: str, params: dict[str, Any] | None = None, timeout: float = 120) -> Any:
        """One DevTools command and its result (the events in between are dropped)."""
        if self.socket is None:
            raise BrowserError("the browser is not started")
        ident = next(self._ids)
        self.socket.send(json.dumps({"id": ident, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"{method}: no answer from chromium in {timeout:g} s")
            try:
                message = json.loads(self.socket.recv(timeout=left))
            except TimeoutError:
                continue
            if message.get("id") == ident:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str) -> Any:
        """The JSON value of `expression` in the page (a promise is awaited)."""
        result = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"JavaScript failed: {text}; in {expression[:200]!r}")
        return result.get("result", {}).get("value")

    # -- what a person does -----------------------------------------------------------

    @property
    def url(self) -> str:
        return str(self.evaluate("location.href"))

    def text(self) -> str:
        """The page's visible text."""
        return str(self.evaluate("document.body ? document.body.innerText : ''"))

    def html(self) -> str:
        return str(self.evaluate("document.documentElement.outerHTML"))

    def goto(self, url: str, timeout: float | None = None) -> None:
        answer = self.send("Page.navigate", {"url": url})
        if answer.get("errorText"):
            raise BrowserError(f"navigating to {url}: {answer['errorText']}")
        self._wait("document.readyState === 'complete'", timeout, f"the document at {url} to load")

    def wait_for(
        self, selector: str, *, text: str | None = None, timeout: float | None = None
    ) -> None:
        """Wait until an element matching `selector` is shown (holding `text`, if given)."""
        what = f"{selector!r}" + (f" with the text {text!r}" if text is not None else "")
        self._wait(f"{_FIND}({json.dumps(selector)}, {json.dumps(text)}).length > 0", timeout, what)

    def wait_gone(self, selector: str, timeout: float | None = None) -> None:
        """Wait until no element matching `selector` is shown (a closing popover's exit
        animation keeps it on screen for a moment after the click that closed it)."""
        self._wait(
            f"{_FIND}({json.dumps(selector)}, null).length === 0", timeout, f"{selector!r} gone"
        )

    def wait_text(self, text: str, timeout: float | None = None) -> None:
        """Wait until the page's visible text contains `text`."""
        self.wait_for("body", text=text, timeout=timeout)

    def click(
        self, selector: str, *, text: str | None = None, timeout: float | None = None
    ) -> None:
        """A mouse click at the centre of the first shown element matching (and holding `text`);
        the last such element when several nest (the innermost holds the text too)."""
        self.wait_for(selector, text=text, timeout=timeout)
        box = self.evaluate(
            f"""(function () {{
              var found = {_FIND}({json.dumps(selector)}, {json.dumps(text)});
              var el = found[found.length - 1];
              if ({json.dumps(text)} === null) el = found[0];
              el.scrollIntoView({{block: "center", inline: "center"}});
              var b = el.getBoundingClientRect();
              return {{x: b.left + b.width / 2, y: b.top + b.height / 2}};
            }})()"""
        )
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": box["x"], "y": box["y"], "button": "left", "clickCount": 1},
            )

    def fill(self, selector: str, value: str, timeout: float | None = None) -> None:
        """Type `value` into the first shown field matching `selector`, replacing what it held
        (a hidden one, such as a closed popover's that is still in the page, is passed over)."""
        self.wait_for(selector, timeout=timeout)
        self.evaluate(
            f"(function () {{ var el = {_FIND}({json.dumps(selector)}, null)[0];"
            " el.focus(); if (el.select) el.select(); return true; })()"
        )
        self.send("Input.insertText", {"text": value})

    def press(self, key: str) -> None:
        """One key, e.g. "Enter" or "Escape"."""
        codes = {"Enter": 13, "Escape": 27, "Tab": 9}
        for kind in ("keyDown", "keyUp"):
            params: dict[str, Any] = {"type": kind, "key": key, "code": key}
            if key in codes:
                params["windowsVirtualKeyCode"] = codes[key]
            if kind == "keyDown" and key == "Enter":
                params["text"] = "\r"
            self.send("Input.dispatchKeyEvent", params)

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        """The viewport (or the whole page) as a PNG at `path`."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.evaluate(
                "[document.documentElement.scrollWidth, document.documentElement.scrollHeight]"
            )
            params["clip"] = {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}
            params["captureBeyondViewport"] = True
        self.send("Page.bringToFront")
        # a frame is drawn for it: slow on a loaded machine (a 60 s wait was seen to run out)
        data = self.send("Page.captureScreenshot", params, timeout=300)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def _wait(self, condition: str, timeout: float | None, what: str) -> None:
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while True:
            with contextlib.suppress(BrowserError):  # a page navigating away mid-evaluation
                if self.evaluate(f"!!({condition})"):
                    return
            if time.monotonic() >= deadline:
                break
            time.sleep(0.25)
        try:
            url, excerpt = self.url, " ".join(self.text().split())[:1500]
        except BrowserError as exc:
            url, excerpt = "(unknown)", f"(the page could not be read: {exc})"
        raise BrowserError(
            f"timed out after {limit:g} s waiting for {what} at {url}; the page says: {excerpt!r}"
        )
