"""Debian's headless Chromium, driven over the DevTools protocol with aiohttp's websocket client (the `ui` extra)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import urllib.request
from typing import Any, List, Optional

from scaler.testing.processes import stop_process_group, wait_for

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_command(user_data_dir: str, *extra: str) -> List[str]:
    return [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={user_data_dir}", *extra]


def remove_profile(profile: str) -> None:
    """The profile, and the directory of Chromium's singleton socket that it links to (in the temporary directory),
    which a Chromium stopped by a signal leaves behind."""
    for link in ("SingletonSocket", "SingletonCookie"):
        try:
            target = os.readlink(os.path.join(profile, link))
        except OSError:
            continue
        directory = os.path.dirname(target)
        if os.path.basename(directory).lstrip(".").startswith("org.chromium.Chromium."):
            shutil.rmtree(directory, ignore_errors=True)
    shutil.rmtree(profile, ignore_errors=True)


class HeadlessChromium:
    """One browser with a fresh profile, showing `url`; evaluate() runs JavaScript in the page and returns its value."""

    def __init__(self, url: str, width: int = 1400, height: int = 1000) -> None:
        import aiohttp  # the `ui` extra, which the test extra pulls in

        self._aiohttp = aiohttp
        self._profile = tempfile.mkdtemp(prefix="scaler-chromium-")
        self._loop = asyncio.new_event_loop()
        self._session: Optional[Any] = None
        self._socket: Optional[Any] = None
        self._next_id = 0
        command = chromium_command(self._profile, "--remote-debugging-port=0", f"--window-size={width},{height}", url)
        self._log = open(os.path.join(self._profile, "chromium.log"), "wb")
        self.popen = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._connect(url)
        except BaseException:
            self.close()
            raise

    def _connect(self, url: str) -> None:
        port_file = os.path.join(self._profile, "DevToolsActivePort")
        wait_for(lambda: os.path.exists(port_file) and os.path.getsize(port_file) > 0, 30, "chromium's DevTools port")
        with open(port_file) as file:
            port = int(file.readline())
        pages: List[dict] = []

        def page_listed() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as response:
                pages[:] = [target for target in json.load(response) if target["type"] == "page"]
            return any(target["url"].startswith(url) for target in pages)

        wait_for(page_listed, 30, f"chromium to open {url}")
        target = next(target for target in pages if target["url"].startswith(url))

        async def connect() -> None:
            self._session = self._aiohttp.ClientSession()
            self._socket = await self._session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0)

        self._loop.run_until_complete(asyncio.wait_for(connect(), 30))
        wait_for(
            lambda: self.evaluate("document.readyState + ' ' + location.href") == f"complete {url}",
            30,
            f"{url} to finish loading",
        )

    def evaluate(self, expression: str, timeout: float = 10.0) -> Any:
        self._next_id += 1
        request_id = self._next_id

        async def call() -> Any:
            await self._socket.send_json(
                {
                    "id": request_id,
                    "method": "Runtime.evaluate",
                    "params": {"expression": expression, "returnByValue": True, "awaitPromise": True},
                }
            )
            while True:
                answer = await self._socket.receive_json()
                if answer.get("id") == request_id:
                    return answer

        answer = self._loop.run_until_complete(asyncio.wait_for(call(), timeout))
        result = answer.get("result", {})
        if "error" in answer or "exceptionDetails" in result:
            raise AssertionError(f"{expression!r} failed in the page: {answer}")
        return result["result"].get("value")

    def close(self) -> None:
        async def disconnect() -> None:
            if self._socket is not None:
                await self._socket.close()
            if self._session is not None:
                await self._session.close()

        try:
            self._loop.run_until_complete(asyncio.wait_for(disconnect(), 10))
        finally:
            self._loop.close()
            stop_process_group(self.popen)
            self._log.close()
            remove_profile(self._profile)

    def __enter__(self) -> HeadlessChromium:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
