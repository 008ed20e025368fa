"""A terminal program run in its own tmux server, typed at with send-keys and read with capture-pane."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from typing import List

import psutil

from scaler.testing.processes import ROOT, wait_exited

EXIT_MARK = "exited with status"


class Tmux:
    """One private tmux server, its socket in a directory of its own (removed by kill()), so killing it never touches
    anyone else's sessions and nothing is left in /tmp/tmux-UID."""

    def __init__(self) -> None:
        self._directory = tempfile.mkdtemp(prefix="scaler-tmux-")
        self.socket_path = os.path.join(self._directory, "socket")
        self.started = False

    def _tmux(self, *args: str) -> str:
        result = subprocess.run(
            ["tmux", "-S", self.socket_path, *args], capture_output=True, text=True, timeout=10, check=True
        )
        return result.stdout

    def start(self, command: List[str], width: int, height: int) -> None:
        """Run `command` in a `width` x `height` pane; once it exits, the pane says so and shows its exit status."""
        shell = f"{shlex.join(command)}; echo {EXIT_MARK} $?; sleep 600"
        self._tmux("new-session", "-d", "-s", "main", "-x", str(width), "-y", str(height), "-c", ROOT, shell)
        self.started = True

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "main")

    def lines(self) -> List[str]:
        return self.screen().splitlines()

    def press(self, key: str) -> None:
        self._tmux("send-keys", "-t", "main", key)

    def resize(self, width: int, height: int) -> None:
        self._tmux("resize-window", "-t", "main", "-x", str(width), "-y", str(height))

    def kill(self) -> None:
        """Stop the server and make sure what ran in it is gone too (tmux hangs up on it; SIGKILL if it lingers)."""
        if not self.started:
            shutil.rmtree(self._directory, ignore_errors=True)
            return
        try:
            pane = psutil.Process(int(self._tmux("display-message", "-p", "-t", "main", "#{pane_pid}")))
            tree = [pane, *pane.children(recursive=True)]
        except (subprocess.CalledProcessError, ValueError, psutil.NoSuchProcess):
            tree = []
        subprocess.run(["tmux", "-S", self.socket_path, "kill-server"], capture_output=True, timeout=10)
        self.started = False
        for process in wait_exited(tree, 5):
            process.kill()
        shutil.rmtree(self._directory, ignore_errors=True)  # the server's socket, which tmux leaves behind
