"""A `keras-transformer serve` process on a free loopback port, for tests and benchmarks.

`ServerProcess` starts `serve ... --host 127.0.0.1 --port 0`, reads the
address the server logs, waits (bounded) until `/readyz` answers 200, and
always stops the process: SIGTERM, which lets the server drain and exit 0,
then a kill if it has not exited in time; it is reaped however the body
ends. Its log (stderr) is kept for the error messages of whoever uses it.
"""

import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

_LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
_POLL_SECONDS = 0.05
# Loopback only: an http_proxy in the environment must not see the probes.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServerProcess:
    """A `keras-transformer serve` process on `127.0.0.1` and a free port, ready inside the `with` block.

    Entering starts the process and returns once its log has said the
    address and `/readyz` answers 200; leaving (even by an exception)
    sends SIGTERM, kills it after `stop_timeout` seconds, and reaps it.

    Args:
        arguments: list of str, `serve`'s arguments (`--model ...` and any
            flags); `--host 127.0.0.1 --port 0` are added after them.
        env: mapping, the process' whole environment; None (the default)
            inherits this one's.
        program: list of str, the command that runs `keras-transformer`
            (`serve` and `arguments` follow it). Defaults to
            `[sys.executable, "-m", "keras_transformer_cli"]`.
        start_timeout: float, seconds to wait for readiness (the first
            start on a compiled engine writes and compiles its programs).
            Defaults to 300.
        stop_timeout: float, seconds SIGTERM has to stop it before a kill.
            Defaults to 60.

    Attributes:
        process: the `subprocess.Popen`.
        url: `"http://127.0.0.1:PORT"` once entered.
        log_lines: list of str, the lines of its stderr so far.

    Raises:
        RuntimeError: on entering, when the server exits or is not ready
            within `start_timeout` seconds (the message holds its log); the
            process is stopped first.

    Example (with a run folder `runs/es-en`):

    >>> import urllib.request
    >>> with ServerProcess(["--model", "runs/es-en"]) as server:  # doctest: +SKIP
    ...     print(urllib.request.urlopen(f"{server.url}/readyz").status)
    200
    >>> server.process.returncode  # doctest: +SKIP
    0
    """

    def __init__(self, arguments, env=None, program=None, start_timeout=300, stop_timeout=60):
        self.command = [*(program or [sys.executable, "-m", "keras_transformer_cli"]), "serve", *arguments,
                        "--host", "127.0.0.1", "--port", "0"]
        self.env = env
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.process = None
        self.url = None
        self.log_lines = []
        self._reader = None

    def __enter__(self):
        self.process = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                        encoding="utf-8", errors="replace", env=self.env)
        self._reader = threading.Thread(target=self._read_log, name="serve-log", daemon=True)
        self._reader.start()
        try:
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exception):
        self.stop()

    def log(self):
        """The log so far, one string; once the process has exited, to its last line.

        Returns:
            str, the lines of its stderr joined by newlines.
        """
        if self.process is not None and self.process.poll() is not None:
            self._reader.join(timeout=10)
        return "\n".join(self.log_lines)

    def stop(self):
        """Sends SIGTERM if it still runs, kills it after `stop_timeout` seconds, and reaps it.

        Returns:
            int, its exit status (0 after a clean drain; negative: the signal that ended it).
        """
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait(timeout=30)
        self._reader.join(timeout=10)
        if not self._reader.is_alive():
            self.process.stderr.close()
        return self.process.returncode

    def _read_log(self):
        for line in self.process.stderr:
            self.log_lines.append(line.rstrip("\n"))
            found = _LISTENING.search(line)
            if found:
                self.url = found.group(1)

    def _wait_until_ready(self):
        deadline = time.monotonic() + self.start_timeout
        while not self._answers_ready():
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode} before it was ready:\n"
                                   + self.log())
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server was not ready within {self.start_timeout:g} s:\n" + self.log())
            time.sleep(_POLL_SECONDS)

    def _answers_ready(self):
        if self.url is None:
            return False
        try:
            with _NO_PROXY.open(f"{self.url}/readyz", timeout=10) as response:
                return response.status == 200
        except urllib.error.HTTPError as error:  # 503 while loading
            error.close()
            return False
        except OSError:  # not accepting yet (URLError is an OSError)
            return False

