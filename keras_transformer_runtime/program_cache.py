"""Where compiled translation programs are kept between processes, and when an entry is stale.

`keras-transformer translate` and `evaluate` keep each trained run's
decoding loop as an exported XLA program (`jax.export`), its weights, and
XLA's compiled code in one folder, so that from the second call on a
sentence is translated without importing Keras and without compiling.

- **Where**: `$KERAS_TRANSFORMER_CACHE_DIR`, else
  `$XDG_CACHE_HOME/keras-transformer`, else `~/.cache/keras-transformer`.
- **Off**: `KERAS_TRANSFORMER_CACHE=0` (or `translate --engine keras`).
- **Bounded**: after each write, the least recently used programs and
  XLA code go until they hold at most `KERAS_TRANSFORMER_CACHE_MB`
  megabytes (default 1024), never those of the entry being written. An
  entry refers to the weights its run's `model.keras` holds rather than
  copying them (`weights_file`); the weights it keeps itself (a quantized
  model's) are outside that limit and go with the entry when its run is
  removed or its model rewritten (`run.json` records which), so the
  cache grows with the models a user has, and two large runs used in turn
  both stay warm. `keras-transformer cache` shows and clears it.
- **Never stale**: an entry's name is a hash of everything that shapes the
  program: the bytes of `model.keras` and `vocabulary.spm` (a file's hash
  is remembered under `digests/` by its path, size, inode and time of
  change, and only once that time is `SETTLED_SECONDS` old, as git does
  for its index, so a file rewritten within the same clock tick is read
  again), the source of
  this package and of `keras_transformer` (so an upgrade, or an edit of
  an editable install, starts new entries), the versions of JAX and
  jaxlib, and the platform. XLA's compiled code is kept per CPU (its
  model and feature flags): code compiled for one CPU may not run on
  another that shares the home directory.
"""

import hashlib
import importlib.util
import json
import os
import pathlib
import platform
import shutil
import tempfile

from keras_transformer_runtime.cpu import cpu_flags
from keras_transformer_runtime.cpu import cpu_model
from keras_transformer_runtime.weights_file import INDEX_FILE
from keras_transformer_runtime.weights_file import WEIGHTS_FILE

ENABLED_VARIABLE = "KERAS_TRANSFORMER_CACHE"
DIRECTORY_VARIABLE = "KERAS_TRANSFORMER_CACHE_DIR"
SIZE_VARIABLE = "KERAS_TRANSFORMER_CACHE_MB"
DEFAULT_SIZE_MB = 1024
# Bumped when the layout of an entry changes.
FORMAT = 3
# The packages whose source shapes a program.
SOURCE_PACKAGES = ("keras_transformer", "keras_transformer_runtime")
# How old a file's last change must be before its hash is remembered: a
# file's times are as coarse as the kernel's clock tick, so a rewrite of
# the same size within one tick would otherwise keep an old hash.
SETTLED_SECONDS = 2.0
# An entry's record of its run: the folder, the model file it was written from and that file's size and time.
RUN_RECORD = "run.json"


def cache_enabled():
    """False when `KERAS_TRANSFORMER_CACHE` is `0`, `off`, `false` or `no`.

    Example:

    >>> cache_enabled() in (True, False)
    True
    """
    return os.environ.get(ENABLED_VARIABLE, "1").strip().lower() not in ("0", "off", "false", "no")


def cache_directory():
    """The cache's folder (not created here).

    Example:

    >>> cache_directory().name
    'keras-transformer'
    """
    if os.environ.get(DIRECTORY_VARIABLE):
        return pathlib.Path(os.environ[DIRECTORY_VARIABLE]).expanduser() / "keras-transformer"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "keras-transformer"


def size_limit_bytes():
    """The most bytes the cache keeps (`KERAS_TRANSFORMER_CACHE_MB`, default 1024 MB).

    Example:

    >>> size_limit_bytes() > 0
    True
    """
    text = os.environ.get(SIZE_VARIABLE, "")
    try:
        megabytes = float(text) if text else DEFAULT_SIZE_MB
    except ValueError:
        megabytes = DEFAULT_SIZE_MB
    return int(max(megabytes, 1) * 1024 * 1024)


def _hash_files(digest, paths):
    for path in paths:
        digest.update(str(path.name).encode())
        with open(path, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)


def file_digest(path, digests=None):
    """The SHA-256 of a file's bytes, remembered under `digests` while the file is unchanged.

    Hashing a 300 MB `model.keras` takes about half a second; a translate
    call that finds its program in the cache would spend it every time.
    The remembered hash is keyed by the file's path, size, inode, device
    and times of change (`os.stat`), and kept only for a file last changed
    more than `SETTLED_SECONDS` ago.

    Args:
        path: the file.
        digests: a folder for the remembered hashes, or None to hash every time.

    Returns:
        The hex digest.

    Example:

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> path = os.path.join(folder, "model.keras")
    >>> _ = open(path, "wb").write(b"weights")
    >>> file_digest(path, os.path.join(folder, "digests")) == file_digest(path)
    True
    """
    import time

    path = pathlib.Path(path).resolve()
    status = path.stat()
    stamp = [status.st_size, status.st_ino, status.st_dev, status.st_mtime_ns, status.st_ctime_ns]
    memo = None
    if digests is not None:
        memo = pathlib.Path(digests) / hashlib.sha256(os.fsencode(path)).hexdigest()[:32]
        try:
            remembered = json.loads(memo.read_text())
            if remembered.get("stamp") == stamp:
                return remembered["digest"]
        except (OSError, ValueError, AttributeError, KeyError):
            pass
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    digest = digest.hexdigest()
    if memo is not None and time.time() - max(status.st_mtime, status.st_ctime) > SETTLED_SECONDS:
        try:
            memo.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=memo.parent, prefix=".writing-")
            with os.fdopen(handle, "w") as file:
                json.dump({"path": os.fspath(path), "stamp": stamp, "digest": digest}, file)
            os.replace(temporary, memo)
        except OSError:  # a read-only cache still translates
            pass
    return digest


def source_fingerprint():
    """A hash of the installed source of `SOURCE_PACKAGES`, found without importing them.

    Example:

    >>> len(source_fingerprint())
    64
    """
    digest = hashlib.sha256()
    for package in SOURCE_PACKAGES:
        spec = importlib.util.find_spec(package)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            folder = pathlib.Path(folder)
            _hash_files(digest, sorted(folder.rglob("*.py")))
    return digest.hexdigest()


def cpu_fingerprint():
    """The CPU that XLA compiles for: its model and feature flags, hashed.

    Example:

    >>> len(cpu_fingerprint())
    16
    """
    text = f"{platform.machine()}|{cpu_model()}|{' '.join(sorted(cpu_flags()))}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def entry_key(run_directory, model_file, vocabulary_files, engine, digests=None):
    """The name of a run's cache entry: a hash of everything that shapes its programs.

    Args:
        run_directory: the training run's folder.
        model_file: the model's file name inside it.
        vocabulary_files: the vocabulary's file name, or a sequence of
            names (`run_files.vocabulary_files`).
        engine: a string naming the engine and its versions and platform
            (e.g. `"jax 0.10.2 jaxlib 0.10.2 cpu"`).
        digests: a folder where the files' hashes are remembered
            (`file_digest`; `ProgramCache.digests_directory()`), or None.

    Returns:
        A hex string.
    """
    digest = hashlib.sha256(f"format {FORMAT}|{engine}|{source_fingerprint()}".encode())
    folder = pathlib.Path(run_directory)
    names = [vocabulary_files] if isinstance(vocabulary_files, str) else list(vocabulary_files)
    for path in [folder / model_file, *(folder / name for name in names)]:
        digest.update(f"|{path.name}|{file_digest(path, digests)}".encode())
    return digest.hexdigest()[:32]


class ProgramCache:
    """A cache folder: entries of programs and weights, and XLA's compiled code.

    Args:
        directory: the folder (default: `cache_directory()`).
        limit_bytes: the most it keeps (default: `size_limit_bytes()`).

    Example:

    >>> import tempfile
    >>> cache = ProgramCache(tempfile.mkdtemp(), limit_bytes=10)
    >>> old = cache.write(cache.entry("old") / "x.bin", b"01234567")
    >>> new = cache.write(cache.entry("new") / "x.bin", b"0123456789abcdef")
    >>> old.exists(), new.exists()  # over the limit: the oldest go first, never the entry being written
    (False, True)
    """

    def __init__(self, directory=None, limit_bytes=None):
        self.directory = pathlib.Path(directory) if directory is not None else cache_directory()
        self.limit_bytes = size_limit_bytes() if limit_bytes is None else int(limit_bytes)

    def entry(self, key):
        """The folder of one entry."""
        return self.directory / "programs" / key

    def digests_directory(self):
        """The remembered hashes of run files (`file_digest`)."""
        return self.directory / "digests"

    def xla_directory(self):
        """XLA's compiled code, one folder per CPU."""
        return self.directory / "xla" / cpu_fingerprint()

    def read_json(self, path):
        """The JSON at `path`, or None if it is missing or damaged."""
        try:
            with open(path, encoding="utf-8") as file:
                return json.load(file)
        except (OSError, ValueError):
            return None

    def write(self, path, data):
        """Writes `data` (bytes, or a list of bytes-like chunks written in turn) at `path` atomically, then prunes.

        Returns `path`.
        """
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".writing-")
        try:
            with os.fdopen(handle, "wb") as file:
                for chunk in data if isinstance(data, list) else [data]:
                    file.write(chunk)
            os.replace(temporary, path)
        except BaseException:
            if os.path.exists(temporary):
                os.remove(temporary)
            raise
        # The entry being written stays whole, even alone over the limit (a model's weights may be larger
        # than the whole cache: NLLB-200-distilled-600M's are 2.4 GB): it is what the caller reads next.
        self.prune(keep=path.parent if path.parent.parent == self.directory / "programs" else None)
        return path

    def touch(self, *paths):
        """Marks files as just used, so the pruning keeps them longest."""
        for path in paths:
            try:
                os.utime(path)
            except OSError:
                pass

    def size_bytes(self, under=None):
        """The bytes the cache holds now (under the folder `under`, if given)."""
        return sum(size for _, size, _ in self._files(under))

    def _files(self, under=None):
        files = []
        for root, _, names in os.walk(self.directory if under is None else under):
            for name in names:
                path = os.path.join(root, name)
                try:
                    status = os.stat(path)
                except OSError:
                    continue
                files.append((status.st_mtime, status.st_size, path))
        return files

    def record_run(self, entry, run_directory, model_file, quantize=None):
        """Writes the entry's `run.json`: the run and its model file as they are now (`entry_state` reads it).

        Example:

        >>> import pathlib, tempfile
        >>> run = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (run / "model.keras").write_bytes(b"weights")
        >>> cache = ProgramCache(tempfile.mkdtemp())
        >>> _ = cache.record_run(cache.entry("a"), run, "model.keras")
        >>> cache.entry_state(cache.entry("a"))
        'current'
        >>> _ = (run / "model.keras").write_bytes(b"retrained")
        >>> cache.entry_state(cache.entry("a"))
        'stale'
        """
        model = pathlib.Path(run_directory).resolve() / model_file
        status = model.stat()
        record = {"run": os.fspath(model.parent), "model_file": model_file, "model_bytes": status.st_size,
                  "model_mtime_ns": status.st_mtime_ns, "quantize": quantize}
        return self.write(pathlib.Path(entry) / RUN_RECORD, (json.dumps(record, indent=2) + "\n").encode())

    def entry_state(self, entry):
        """`"current"` (its run's model file is as the entry recorded), `"stale"` (gone or rewritten), or
        `"unrecorded"` (no `run.json`: being written, or an older cache's)."""
        record = self.read_json(pathlib.Path(entry) / RUN_RECORD)
        if not isinstance(record, dict) or "run" not in record:
            return "unrecorded"
        try:
            status = os.stat(os.path.join(record["run"], record["model_file"]))
        except (OSError, KeyError, TypeError):
            return "stale"
        same = (status.st_size, status.st_mtime_ns) == (record.get("model_bytes"), record.get("model_mtime_ns"))
        return "current" if same else "stale"

    def entries(self):
        """The entry folders, in no order."""
        programs = self.directory / "programs"
        return sorted(path for path in programs.iterdir() if path.is_dir()) if programs.is_dir() else []

    def prune(self, keep=None):
        """Removes stale entries, then the least recently used programs and XLA code until they fit the limit.

        The weights a current entry keeps itself are outside the limit; nothing under `keep` goes.
        """
        keep = None if keep is None else os.path.join(os.fspath(keep), "")
        exempt = set()
        for entry in self.entries():
            state = self.entry_state(entry)
            if state == "stale" and os.path.join(os.fspath(entry), "") != keep:
                shutil.rmtree(entry, ignore_errors=True)
            elif state == "current":
                exempt.update(os.fspath(entry / name) for name in (WEIGHTS_FILE, INDEX_FILE))
        files = sorted(item for item in self._files() if item[2] not in exempt)
        total = sum(size for _, size, _ in files)
        for _, size, path in files:
            if total <= self.limit_bytes:
                break
            if keep is not None and path.startswith(keep):
                continue
            try:
                os.remove(path)
                total -= size
            except OSError:
                pass

    def clear(self):
        """Removes everything the cache holds: programs, weights, XLA's code and the remembered hashes."""
        for name in ("programs", "xla", "digests"):
            shutil.rmtree(self.directory / name, ignore_errors=True)
