"""Running the application: uvicorn on one address, a graceful stop on SIGTERM, and who may listen where.

`run_server` serves until SIGTERM or Ctrl-C, then stops taking connections,
answers every request already taken (each bounded by the request
timeout), and returns 0: what a supervisor (systemd, Kubernetes) expects
of a clean stop. `/readyz` turns 503 as soon as the signal arrives, so a
load balancer stops sending. Listening anywhere but loopback needs a token
or an explicit `--no-auth` (`check_listening_address`).
"""

import ipaddress
import signal

import uvicorn

from keras_transformer_runtime.errors import UserInputError

LOOPBACK_NAMES = ("localhost",)


def is_loopback(host):
    """Whether `host` (an address or "localhost") is reachable from this machine only.

    Example:

    >>> is_loopback("127.0.0.1"), is_loopback("::1"), is_loopback("0.0.0.0"), is_loopback("localhost")
    (True, True, False, True)
    """
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def check_listening_address(host, token, no_auth):
    """Refuses to listen beyond loopback without a token, unless `no_auth` says the user means it.

    Raises:
        UserInputError: `host` is not loopback, and neither a token nor `no_auth` was given.
    """
    if token is None and not no_auth and not is_loopback(host):
        raise UserInputError(
            f"--host {host} is reachable from other machines: pass --token-file FILE (requests then need "
            "'Authorization: Bearer TOKEN') or, behind your own gateway, --no-auth.")


def read_token(path):
    """The bearer token in file `path` (its first line, stripped).

    Raises:
        UserInputError: the file cannot be read, or holds no token.
    """
    try:
        with open(path, encoding="utf-8") as file:
            token = file.readline().strip()
    except (OSError, UnicodeDecodeError) as error:
        raise UserInputError(f"--token-file {path!r} cannot be read: {error}")
    if not token:
        raise UserInputError(f"--token-file {path!r} holds no token: write one on its first line.")
    return token


class _Server(uvicorn.Server):
    """uvicorn's server that tells the application when it starts to drain and where it listens."""

    def __init__(self, config, state, log):
        super().__init__(config)
        self._state = state
        self._log = log
        self.bound_port = None

    def handle_exit(self, sig, frame):
        if not self._state.draining:
            self._log("stopping: no new requests; answering the ones already taken")
        self._state.draining = True
        super().handle_exit(sig, frame)

    async def startup(self, sockets=None):
        await super().startup(sockets)
        for server in self.servers:
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                self.bound_port = port
                self._log(f"listening on http://{f'[{host}]' if ':' in host else host}:{port}")


def run_server(app, host, port, log):
    """Serves `app` on `host:port` until SIGTERM or Ctrl-C; returns the exit status (0, or 1 if loading failed).

    Args:
        app: from `create_app` (its `state.server` is read).
        host, port: where to listen (port 0: any free port, said in the log).
        log: callable taking one line.
    """
    state = app.state.server
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on",
                            server_header=False)
    server = _Server(config, state, log)

    def stop_on_load_failure(error):
        server.should_exit = True

    state.on_load_failure = stop_on_load_failure
    # uvicorn raises the signal again once it has drained: ours then only returns, so the exit is 0.
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log(f"stopped: {state.accepted} translation requests taken, {state.answered} answered, "
        f"{state.timed_out} timed out, {state.failed} failed")
    return 1 if state.load_error is not None else 0
