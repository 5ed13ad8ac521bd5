"""What the program cache holds, entry by entry: its run, its programs, its weights; for `keras-transformer cache`.

Keras-free: it reads the entries' JSON files and sizes only.
"""

import dataclasses
import datetime
import json
import os

from keras_transformer_runtime.program_cache import RUN_RECORD
from keras_transformer_runtime.weights_file import INDEX_FILE
from keras_transformer_runtime.weights_file import WEIGHTS_FILE
from keras_transformer_runtime.weights_file import array_bytes
from keras_transformer_runtime.weights_file import entry_weight_bytes

PROGRAM_SUFFIX = ".jaxexport"
_MB = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class EntryContents:
    """One cache entry, as `keras-transformer cache` lists it.

    Args:
        name: the entry's folder name (a hash of what shapes its programs).
        run: the run folder it was written from, or None (an older cache's entry).
        state: `"current"`, `"stale"` or `"unrecorded"` (`ProgramCache.entry_state`).
        quantize: the Keras quantization mode of its programs, or None (float).
        programs: how many decoding programs it holds.
        program_bytes: their bytes, with the entry's small JSON files.
        own_weight_bytes: the bytes of weights the entry keeps itself (a quantized model's).
        run_weight_bytes: the bytes of weights it reads from the run's `model.keras` instead.
        last_used: the time its files were last used (seconds since the epoch).

    Example:

    >>> EntryContents("ab12", "runs/es-en", "current", None, 3, 2 * _MB, 0, 300 * _MB, 0.0).kind
    'float'
    """

    name: str
    run: object
    state: str
    quantize: object
    programs: int
    program_bytes: int
    own_weight_bytes: int
    run_weight_bytes: int
    last_used: float

    @property
    def kind(self):
        """`"float"`, or the quantization mode."""
        return self.quantize or "float"


def entry_contents(cache, entry):
    """The `EntryContents` of one entry folder of `cache` (a `ProgramCache`).

    Example:

    >>> import tempfile
    >>> from keras_transformer_runtime.program_cache import ProgramCache
    >>> cache = ProgramCache(tempfile.mkdtemp())
    >>> _ = cache.write(cache.entry("ab12") / "kept-beam4.jaxexport", b"program")
    >>> contents = entry_contents(cache, cache.entry("ab12"))
    >>> contents.programs, contents.program_bytes, contents.state
    (1, 7, 'unrecorded')
    """
    record = cache.read_json(entry / RUN_RECORD) or {}
    programs = program_bytes = 0
    last_used = 0.0
    for name in os.listdir(entry) if entry.is_dir() else ():
        try:
            status = os.stat(entry / name)
        except OSError:
            continue
        last_used = max(last_used, status.st_mtime)
        if name != WEIGHTS_FILE:
            program_bytes += status.st_size
            programs += name.endswith(PROGRAM_SUFFIX)
    return EntryContents(entry.name, record.get("run"), cache.entry_state(entry), record.get("quantize"), programs,
                         program_bytes, entry_weight_bytes(entry), _run_weight_bytes(entry / INDEX_FILE), last_used)


def _run_weight_bytes(index_path):
    try:
        with open(index_path, encoding="utf-8") as file:
            arrays = json.load(file)["arrays"]
        return sum(array_bytes(item) for item in arrays if "run_offset" in item)
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def describe_cache(cache):
    """The lines `keras-transformer cache` prints: where the cache is, each entry, XLA's code, the total.

    Args:
        cache: a `ProgramCache`.

    Returns:
        A list of str.

    Example:

    >>> import tempfile
    >>> from keras_transformer_runtime.program_cache import ProgramCache
    >>> describe_cache(ProgramCache(tempfile.mkdtemp(), limit_bytes=1024 * _MB))[-1]
    'total: 0.0 MB on disk; nothing cached yet'
    """
    entries = [entry_contents(cache, entry) for entry in cache.entries()]
    xla_bytes = cache.size_bytes(cache.directory / "xla")
    lines = [f"cache: {cache.directory} (limit {cache.limit_bytes / _MB:,.0f} MB for programs and XLA's code, "
             "KERAS_TRANSFORMER_CACHE_MB; a run's weights are read from its model.keras, a quantized model's "
             "kept beside its programs)"]
    for item in sorted(entries, key=lambda item: -item.last_used):
        used = datetime.datetime.fromtimestamp(item.last_used).strftime("%Y-%m-%d %H:%M") if item.last_used else "-"
        run = item.run or "a run not recorded (an older cache's entry)"
        lines.append(f"  {item.name[:12]}  {run} [{item.state}], {item.kind}: {item.programs} program(s) "
                     f"{item.program_bytes / _MB:,.1f} MB, own weights {item.own_weight_bytes / _MB:,.1f} MB, "
                     f"weights read from the run {item.run_weight_bytes / _MB:,.1f} MB; last used {used}")
    lines.append(f"  XLA's compiled code: {xla_bytes / _MB:,.1f} MB")
    total = cache.size_bytes()
    lines.append(f"total: {total / _MB:,.1f} MB on disk; " + (f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}"
                                                               if entries else "nothing cached yet"))
    return lines
