"""A cache entry's weights: the run's own `model.keras` where it holds them, one mapped file for the rest.

A translation program's weights are mostly the run's weights as they are:
the entry does not copy those, `weights.json` names each one's offset in
the run's `model.keras` (`keras_file_arrays`). The others (a quantized
model's kernels) lie in one NumPy `.npy` file (`weights.npy`), each array
at an offset that is a multiple of 64 bytes. Read back, every array is
64-byte aligned, and XLA's CPU client takes an array so aligned without
copying it, where it copies one a few bytes off
(benchmarks/findings/decoding.md, "Fixed-shape programs and mapped
weights"): an entry's own arrays and a run's aligned ones are views of the
mapped files, whose pages come from the page cache as the first decoding
step touches them; a run's weight off that alignment is read once into an
aligned buffer. A process thus holds each weight once, and the disk too.

A bfloat16 array is named so in the index and viewed back with
`ml_dtypes`, as NumPy has no bfloat16 of its own.
"""

import io
import json

import numpy as np

WEIGHTS_FILE = "weights.npy"
INDEX_FILE = "weights.json"
# XLA's CPU client aliases host memory only at this alignment.
ALIGNMENT = 64


def _aligned(offset):
    return -(-offset // ALIGNMENT) * ALIGNMENT


def weights_files(weights, in_run=None, run_file_bytes=None):
    """`(index, chunks)`: the bytes of `weights.json`, and those of `weights.npy` in order, for a list of arrays.

    The chunks are the `.npy` header, then each array's own memory and the
    zeros that pad it to the next multiple of 64: the file is written
    without a copy of the weights in memory (NLLB-200-distilled-600M's are
    2.4 GB). An array the run's `model.keras` already holds (`in_run`) is
    only named in the index, by its offset there, and not written again.

    Args:
        weights: the arrays, in the program's order.
        in_run: None, or a list as long as `weights`: each array's offset in
            the run's `model.keras` (`keras_file_arrays.locate_arrays`), or
            None for one the entry keeps.
        run_file_bytes: with `in_run`, the size of that `model.keras`
            (`read_weights` refuses a file of another size).

    Example:

    >>> import ml_dtypes, pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> index, data = weights_files([np.arange(3, dtype=np.float32), np.ones((1, 2), ml_dtypes.bfloat16)])
    >>> _ = (folder / INDEX_FILE).write_bytes(index), (folder / WEIGHTS_FILE).write_bytes(b"".join(data))
    >>> [(value.dtype.name, value.shape, value.ctypes.data % 64) for value in read_weights(folder)]
    [('float32', (3,), 0), ('bfloat16', (1, 2), 0)]
    """
    arrays = [np.ascontiguousarray(value) for value in weights]
    in_run = list(in_run) if in_run is not None else [None] * len(arrays)
    entries, kept, offset = [], [], 0
    for value, run_offset in zip(arrays, in_run):
        if run_offset is not None:
            entries.append({"run_offset": int(run_offset), "dtype": value.dtype.name, "shape": list(value.shape)})
            continue
        offset = _aligned(offset)
        entries.append({"offset": offset, "dtype": value.dtype.name, "shape": list(value.shape)})
        kept.append((value, offset))
        offset += value.nbytes
    total = _aligned(offset)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.uint8)), "fortran_order": False, "shape": (total,)})
    chunks, written = [header.getvalue()], 0
    for value, start in kept:
        chunks.append(bytes(start - written))
        chunks.append(memoryview(value.reshape(-1).view(np.uint8)))
        written = start + value.nbytes
    chunks.append(bytes(total - written))
    index = {"bytes": int(total), "arrays": entries}
    if any(item is not None for item in in_run):
        index["run_file_bytes"] = int(run_file_bytes)
    return (json.dumps(index) + "\n").encode(), chunks


def entry_weight_bytes(entry):
    """The bytes of weights a cache entry keeps itself (those the run's file holds not counted); 0 if unreadable."""
    try:
        with open(entry / INDEX_FILE, encoding="utf-8") as file:
            return int(json.load(file).get("bytes", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return 0


def read_weights(entry, run_file=None):
    """The weights written into the folder `entry` (`weights_files`), in order, each 64-byte aligned.

    An array the entry keeps is a read-only view of its mapped
    `weights.npy`. One the index places in the run's `model.keras` is a
    view of that file where it lies 64-byte aligned, and otherwise read
    from it into one aligned buffer: either way the process holds each
    weight once, and XLA's CPU client uses it in place.

    Args:
        entry: the entry's folder.
        run_file: the run's `model.keras` (needed when the index refers to it).

    Raises:
        OSError, ValueError: a file is missing, damaged, or does not match the index.
    """
    with open(entry / INDEX_FILE, encoding="utf-8") as file:
        index = json.load(file)
    if not isinstance(index, dict):
        raise ValueError(f"{entry / INDEX_FILE} is damaged.")
    blob = np.load(entry / WEIGHTS_FILE, mmap_mode="r", allow_pickle=False) if index.get("bytes") else None
    if blob is not None and (blob.dtype != np.uint8 or blob.shape != (index.get("bytes"),)):
        raise ValueError(f"{entry / WEIGHTS_FILE} does not hold the {index['bytes']} bytes its index lists.")
    try:
        items = [(item, _dtype(item["dtype"]), tuple(item["shape"])) for item in index["arrays"]]
        from_run = [(item, dtype, shape) for item, dtype, shape in items if "run_offset" in item]
        run_arrays = _run_arrays(run_file, index.get("run_file_bytes"), from_run) if from_run else {}
        weights = []
        for item, dtype, shape in items:
            if "run_offset" in item:
                weights.append(run_arrays[item["run_offset"]])
            else:
                size = array_bytes(item)
                weights.append(blob[item["offset"]: item["offset"] + size].view(dtype).reshape(shape))
    except (KeyError, TypeError) as error:
        raise ValueError(f"{entry / INDEX_FILE} is damaged: {error!r}") from None
    return weights


def _run_arrays(run_file, run_file_bytes, items):
    """`{offset: array}` of the arrays the index places in the run's file: aligned ones mapped, the rest read."""
    if run_file is None:
        raise ValueError("The entry refers to the run's model file, and none was given.")
    mapped = np.memmap(run_file, dtype=np.uint8, mode="r")
    if mapped.size != run_file_bytes:
        raise ValueError(f"{run_file} holds {mapped.size} bytes, not the {run_file_bytes} the entry was written for.")
    arrays, unaligned = {}, []
    for item, dtype, shape in items:
        start = item["run_offset"]
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if start % ALIGNMENT == 0:
            arrays[start] = mapped[start: start + size].view(dtype).reshape(shape)
        elif start not in arrays:
            unaligned.append((start, size, dtype, shape))
    total = sum(_aligned(size) for _, size, _, _ in unaligned)
    memory = np.empty(total + ALIGNMENT, np.uint8)
    offset = -memory.ctypes.data % ALIGNMENT
    with open(run_file, "rb") as file:
        for start, size, dtype, shape in unaligned:
            target = memory[offset: offset + size]
            file.seek(start)
            if file.readinto(memoryview(target)) != size:
                raise ValueError(f"{run_file} ends before the weight at {start}.")
            arrays[start] = target.view(dtype).reshape(shape)
            offset += _aligned(size)
    return arrays


def array_bytes(item):
    """The bytes of one array an index lists (`{"dtype": ..., "shape": [...]}`).

    Example:

    >>> array_bytes({"dtype": "bfloat16", "shape": [2, 3]})
    12
    """
    return int(np.prod(item["shape"], dtype=np.int64)) * _dtype(item["dtype"]).itemsize


def _dtype(name):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)
