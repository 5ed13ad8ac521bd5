"""The lines `translate` reads: answered as they arrive, checked one by one.

Lines that come slowly (a terminal, a pipe fed by another program) are
translated as soon as each arrives, like `fairseq-interactive`; lines that
come fast (a file, a pipe fed all at once) are gathered into batches of up
to `BATCH_LINES`, since a batch translates many times faster per line.
The rule is simply "translate whatever has arrived": nothing waits for more
input while some is pending.

A line that is not valid UTF-8, or holds a NUL byte (binary data, not
text), is reported in one line naming its number and the byte, and the
others are still translated, in order. With `invalid="replace"` such bytes
become U+FFFD instead, and are counted.
"""

import os
import select

# The most lines translated at once when input comes fast.
BATCH_LINES = 256
_READ_BYTES = 1 << 16


class BadLine(ValueError):
    """A line that is not text: invalid UTF-8 or a NUL byte. Its message names the line and the byte."""


def decode_line(raw, number, invalid="skip"):
    """One line's bytes as text.

    Args:
        raw: the line's bytes, without its newline.
        number: the line's number (from 1), for the message.
        invalid: `"skip"` raises `BadLine`; `"replace"` returns the text
            with each bad byte (and NUL) as U+FFFD.

    Returns:
        `(text, replaced)`: the text, and whether anything was replaced.

    Raises:
        BadLine: with `invalid="skip"`, for a line that is not text.

    Example:

    >>> decode_line("Sea la luz".encode(), 1)
    ('Sea la luz', False)
    >>> decode_line(b"Sea \\xff", 2, invalid="replace")
    ('Sea \\ufffd', True)
    >>> try:
    ...     decode_line(b"Sea \\xff", 2)
    ... except BadLine as error:
    ...     print(error)
    line 2: not UTF-8 at byte 5 (0xff); skipped
    """
    nul = raw.find(b"\0")
    try:
        text = raw.decode("utf-8")
        problem = None if nul < 0 else f"line {number}: a NUL byte at byte {nul + 1}; skipped"
    except UnicodeDecodeError as error:
        problem = f"line {number}: not UTF-8 at byte {error.start + 1} (0x{raw[error.start]:02x}); skipped"
    if problem is None:
        return text, False
    if invalid != "replace":
        raise BadLine(problem)
    return raw.decode("utf-8", errors="replace").replace("\0", "\ufffd"), True


def decode_argument(text, number, invalid="skip"):
    """A command-line argument as text: Python keeps bytes that are not UTF-8 as lone surrogates.

    Example:

    >>> decode_argument("Sea la luz", 1)
    ('Sea la luz', False)
    """
    return decode_line(os.fsencode(text), number, invalid)


def arriving_batches(stream, batch_lines=BATCH_LINES):
    """The lines of a binary stream, in batches of whatever has arrived.

    Blocks only when nothing is pending: a batch is yielded as soon as the
    stream has nothing more to read at once, or holds `batch_lines` lines.
    A stream that `select` cannot watch is read whole, in batches.

    Args:
        stream: a binary file object (e.g. `sys.stdin.buffer`).
        batch_lines: the most lines a batch holds.

    Yields:
        Lists of `(number, raw_bytes)`, numbered from 1, without newlines
        (a `\\r` before the newline is dropped too).

    Example:

    >>> import io
    >>> list(arriving_batches(io.BytesIO(b"a\\nb\\r\\nc"), batch_lines=2))
    [[(1, b'a'), (2, b'b')], [(3, b'c')]]
    """
    try:
        descriptor = stream.fileno()
        select.select([descriptor], [], [], 0)
    except (AttributeError, OSError, ValueError):
        descriptor = None
    pending, partial, number, ended = [], b"", 0, False
    while True:
        readable = ended or descriptor is None or bool(select.select([descriptor], [], [], None if not pending else 0)[0])
        if readable and not ended:
            chunk = os.read(descriptor, _READ_BYTES) if descriptor is not None else stream.read(_READ_BYTES)
            if chunk:
                lines = (partial + chunk).split(b"\n")
                partial = lines.pop()
                for line in lines:
                    number += 1
                    pending.append((number, line[:-1] if line.endswith(b"\r") else line))
                if len(pending) < batch_lines:
                    continue
            else:
                ended = True
                if partial:
                    number += 1
                    pending.append((number, partial[:-1] if partial.endswith(b"\r") else partial))
                    partial = b""
        while pending and (len(pending) >= batch_lines or not readable or ended):
            yield pending[:batch_lines]
            pending = pending[batch_lines:]
        if ended and not pending:
            return
