"""Where each weight lies inside a run's `model.keras`, so a cache entry can refer to it instead of copying it.

Keras writes `model.keras` as a zip whose `model.weights.h5` member is
stored uncompressed, and HDF5 keeps each weight that is not chunked as one
contiguous run of bytes: every weight therefore lies at a fixed offset of
the `.keras` file itself. `stored_arrays` lists those offsets (with h5py,
which Keras installs); `locate_arrays` finds, for each array a translation
program takes, the stored weight holding the same bytes. An array found
there is read from the run's own file; one not found (a quantized kernel,
a weight the program derives) is kept in the cache entry. Matching by
content rather than by name makes the mapping right by construction: two
stored weights with equal bytes are interchangeable.
"""

import struct
import zipfile

import numpy as np

WEIGHTS_MEMBER = "model.weights.h5"
# A zip's local file header: 30 bytes, the name's and the extra field's lengths at 26 and 28.
_LOCAL_HEADER = struct.Struct("<4s22xHH")
_LOCAL_SIGNATURE = b"PK\x03\x04"
# Bytes compared before a whole array is: enough to tell random weights apart at once.
_PROBE_BYTES = 256
_COMPARED_BLOCK_BYTES = 1 << 24


def member_data_offset(path, member=WEIGHTS_MEMBER):
    """The offset in the zip file `path` of `member`'s bytes, or None when it is missing or compressed.

    Example:

    >>> import pathlib, tempfile, zipfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "model.keras"
    >>> with zipfile.ZipFile(path, "w") as archive:
    ...     archive.writestr("config.json", "{}")
    ...     archive.writestr(WEIGHTS_MEMBER, b"weights")
    >>> offset = member_data_offset(path)
    >>> path.read_bytes()[offset: offset + 7]
    b'weights'
    """
    try:
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo(member)
        if info.compress_type != zipfile.ZIP_STORED:
            return None
        with open(path, "rb") as file:
            file.seek(info.header_offset)
            signature, name_length, extra_length = _LOCAL_HEADER.unpack(file.read(_LOCAL_HEADER.size))
    except (OSError, KeyError, zipfile.BadZipFile, struct.error):
        return None
    if signature != _LOCAL_SIGNATURE:
        return None
    return info.header_offset + _LOCAL_HEADER.size + name_length + extra_length


def stored_arrays(path):
    """Every weight of a `.keras` file that lies contiguous in it: `[(offset, dtype, shape), ...]`.

    Args:
        path: a `model.keras`.

    Returns:
        A list of `(offset in the file, numpy dtype, shape tuple)`; empty
        when the weights member is compressed or the file is not a zip.

    Example:

    >>> stored_arrays("no such model.keras")
    []
    """
    start = member_data_offset(path)
    if start is None:
        return []
    import h5py

    found = []
    # The member read in place through an offset view: a zip member's own reader seeks backwards by decoding
    # from its start again, which makes HDF5's many small reads of a large file quadratic.
    with open(path, "rb") as file, h5py.File(_Slice(file, start), "r") as weights:
        def visit(_, item):
            if isinstance(item, h5py.Dataset) and item.size and item.dtype.kind in "fiub":
                offset = item.id.get_offset()
                if offset is not None and item.chunks is None and item.compression is None:
                    found.append((start + int(offset), np.dtype(item.dtype), tuple(item.shape)))

        weights.visititems(visit)
    return found


class _Slice:
    """A read-only file object over `file` from byte `start` on (a stored zip member, for h5py)."""

    def __init__(self, file, start):
        self._file, self._start = file, start
        self._file.seek(start)

    def seek(self, offset, whence=0):
        return self._file.seek(offset + self._start if whence == 0 else offset, whence) - self._start

    def tell(self):
        return self._file.tell() - self._start

    def read(self, size=-1):
        return self._file.read(size)

    def readinto(self, buffer):
        return self._file.readinto(buffer)

    def seekable(self):
        return True

    def readable(self):
        return True


def _file_holds(file, offset, raw):
    """Whether `file` holds the bytes `raw` (uint8) at `offset`, read a block at a time."""
    block = np.empty(min(raw.size, _COMPARED_BLOCK_BYTES), np.uint8)
    file.seek(offset)
    for start in range(0, raw.size, block.size):
        part = block[: min(block.size, raw.size - start)]
        if file.readinto(memoryview(part)) != part.size or not np.array_equal(part, raw[start: start + part.size]):
            return False
    return True


def locate_arrays(arrays, path):
    """For each array, the offset in `path` of a stored weight with the same dtype, shape and bytes, or None.

    Args:
        arrays: NumPy arrays (a translation program's weights).
        path: the run's `model.keras`.

    Returns:
        A list as long as `arrays`: an int offset, or None for an array the
        file does not hold as it is.

    Example:

    >>> locate_arrays([np.zeros(3)], "no such model.keras")
    [None]
    """
    candidates = {}
    stored = stored_arrays(path)
    if not stored:
        return [None] * len(arrays)

    # Read, not mapped: pages read through a mapping would count in this process' memory, the whole model's
    # worth at once, beside the arrays the caller holds.
    with open(path, "rb", buffering=0) as file:
        def ends(offset, size):
            file.seek(offset)
            head = file.read(min(size, _PROBE_BYTES))
            file.seek(offset + max(size - _PROBE_BYTES, 0))
            return head, file.read(min(size, _PROBE_BYTES))

        for offset, dtype, shape in stored:
            size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            candidates.setdefault((dtype.str, shape, *ends(offset, size)), []).append(offset)
        located = []
        for array in arrays:
            raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
            key = (array.dtype.str, tuple(array.shape), raw[:_PROBE_BYTES].tobytes(), raw[-_PROBE_BYTES:].tobytes())
            located.append(next((offset for offset in candidates.get(key, ()) if _file_holds(file, offset, raw)),
                                None))
    return located
