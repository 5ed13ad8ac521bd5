"""Where a command's time goes: a few named phases, summed, shown on request.

`keras-transformer --verbose` (or `KERAS_TRANSFORMER_TIMINGS=1`) ends each
verb with one line such as
`time: start 0.04 s, import 0.52 s, load 0.08 s, compile 0.05 s, work 0.31 s, write 0.00 s, wall 1.02 s`:
*start* is the interpreter's own start and the command line's parsing,
*import* the libraries (Keras and its backend, or JAX alone), *load* the
model, vocabulary, corpus or cached program, *compile* tracing and XLA
(or loading XLA's compiled code from the cache), *work* translating or
training, *write* what the verb writes (a cache entry, a file); time in
none of them is *other*. The benchmark
`benchmarks/verb_wait.py` reads this line to keep the docs' table true.
"""

import contextlib
import os
import time

PHASES = ("start", "import", "load", "compile", "work", "write")
VARIABLE = "KERAS_TRANSFORMER_TIMINGS"

_seconds = {}
_started = time.perf_counter()


def _process_age():
    """Seconds since this process started (Linux `/proc`), else 0."""
    try:
        with open("/proc/self/stat") as file:
            start_ticks = int(file.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as file:
            uptime = float(file.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def begin():
    """Starts the clock of a command: *start* is the time the process has lived until now."""
    global _started
    _seconds.clear()
    _seconds["start"] = _process_age()
    _started = time.perf_counter() - _seconds["start"]


@contextlib.contextmanager
def phase(name):
    """Adds the time of the `with` block to phase `name` (nested phases count in their own only).

    Example:

    >>> with phase("load"):
    ...     pass
    >>> "load" in summary()
    True
    """
    start = time.perf_counter()
    outer = dict(_seconds)
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        inner = sum(_seconds.get(key, 0.0) - outer.get(key, 0.0) for key in _seconds)
        _seconds[name] = _seconds.get(name, 0.0) + elapsed - inner


def seconds():
    """The phases so far, and `wall`, in seconds."""
    result = {name: _seconds.get(name, 0.0) for name in PHASES}
    result["wall"] = time.perf_counter() - _started
    result["other"] = max(0.0, result["wall"] - sum(result[name] for name in PHASES))
    return result


def summary():
    """The phases as one line: `time: start 0.04 s, import 0.52 s, ..., wall 1.02 s`."""
    values = seconds()
    return "time: " + ", ".join(f"{name} {values[name]:.2f} s" for name in (*PHASES, "other", "wall"))


def wanted():
    """Whether the user asked for the line (`KERAS_TRANSFORMER_TIMINGS=1`)."""
    return os.environ.get(VARIABLE, "") not in ("", "0")
