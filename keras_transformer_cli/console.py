"""The `keras-transformer` console script: `main`, and after `translate` an exit without the interpreter's teardown.

Once `translate` has flushed its output the process has nothing left to do,
but a normal exit tears down JAX, XLA and every imported module first, a
noticeable part of a one-sentence call (benchmarks/findings/decoding.md,
"The compiled engine on a CPU"). `os._exit` skips that teardown (and
`atexit` handlers, of which `translate` needs none: its files are written
and closed by then).
Other verbs keep the normal exit: `train` and `serve` may still hold
threads and writers that a teardown closes.
"""

import os
import sys

from keras_transformer_cli import main

# The verbs whose process ends right after its output is flushed.
FAST_EXIT_VERBS = ("translate",)


def verb_of(argv):
    """The verb of a command line: its first word that is not an option (the only top-level option takes no value).

    Example:

    >>> verb_of(["--verbose", "translate", "--model", "runs/es-en", "Hola."]), verb_of(["--help"])
    ('translate', None)
    """
    return next((word for word in argv if not word.startswith("-")), None)


def console_main(argv=None):
    """Runs `main(argv)`; after a `FAST_EXIT_VERBS` verb, flushes stdout and stderr and ends the process at once.

    Args:
        argv: the arguments (default: `sys.argv[1:]`).

    Returns:
        `main`'s status, for the other verbs (the console script exits with it).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    status = main(argv)
    if verb_of(argv) in FAST_EXIT_VERBS:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status or 0)
    return status
