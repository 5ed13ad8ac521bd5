"""A cache entry's weights: one file mapped into memory, which JAX on a CPU uses without copying.

The weights' bytes lie in one NumPy `.npy` file (`weights.npy`), each
array at an offset that is a multiple of 64 bytes, and `weights.json` lists
each array's offset, dtype and shape. Read back with `np.load(...,
mmap_mode="r")`, every array is a view of the mapped file aligned to 64
bytes, and XLA's CPU client takes an array so aligned without copying it,
where it copies one a few bytes off (benchmarks/findings/decoding.md,
"Fixed-shape programs and mapped weights"). A second `translate` thus
neither reads the weights nor copies them; the pages come from the page
cache as the first decoding step touches them. The `safetensors` file this
replaced was read and copied on every load, and its arrays cannot be
placed at such offsets.

A bfloat16 array is named so in the index and viewed back with
`ml_dtypes`, as NumPy has no bfloat16 of its own.
"""

import io
import json

import numpy as np

WEIGHTS_FILE = "weights.npy"
INDEX_FILE = "weights.json"
# XLA's CPU client aliases host memory only at this alignment.
_ALIGNMENT = 64


def _aligned(offset):
    return -(-offset // _ALIGNMENT) * _ALIGNMENT


def weights_files(weights):
    """`(index, chunks)`: the bytes of `weights.json`, and those of `weights.npy` in order, for a list of arrays.

    The chunks are the `.npy` header, then each array's own memory and the
    zeros that pad it to the next multiple of 64: the file is written
    without a copy of the weights in memory (NLLB-200-distilled-600M's are
    2.4 GB).

    Example:

    >>> import ml_dtypes, pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> index, data = weights_files([np.arange(3, dtype=np.float32), np.ones((1, 2), ml_dtypes.bfloat16)])
    >>> _ = (folder / INDEX_FILE).write_bytes(index), (folder / WEIGHTS_FILE).write_bytes(b"".join(data))
    >>> [(value.dtype.name, value.shape, value.ctypes.data % 64) for value in read_weights(folder)]
    [('float32', (3,), 0), ('bfloat16', (1, 2), 0)]
    """
    arrays = [np.ascontiguousarray(value) for value in weights]
    entries, offset = [], 0
    for value in arrays:
        offset = _aligned(offset)
        entries.append({"offset": offset, "dtype": value.dtype.name, "shape": list(value.shape)})
        offset += value.nbytes
    total = _aligned(offset)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.uint8)), "fortran_order": False, "shape": (total,)})
    chunks, written = [header.getvalue()], 0
    for value, entry in zip(arrays, entries):
        chunks.append(bytes(entry["offset"] - written))
        chunks.append(memoryview(value.reshape(-1).view(np.uint8)))
        written = entry["offset"] + value.nbytes
    chunks.append(bytes(total - written))
    index = {"bytes": int(total), "arrays": entries}
    return (json.dumps(index) + "\n").encode(), chunks


def read_weights(entry):
    """The weights written into the folder `entry` (`weights_files`), in order: read-only views of the mapped file.

    Raises:
        OSError, ValueError: a file is missing, damaged, or does not match the other.
    """
    with open(entry / INDEX_FILE, encoding="utf-8") as file:
        index = json.load(file)
    blob = np.load(entry / WEIGHTS_FILE, mmap_mode="r", allow_pickle=False)
    if not isinstance(index, dict) or blob.dtype != np.uint8 or blob.shape != (index.get("bytes"),):
        raise ValueError(f"{entry / WEIGHTS_FILE} does not hold the {index['bytes']} bytes its index lists.")
    try:
        weights = []
        for item in index["arrays"]:
            dtype = _dtype(item["dtype"])
            size = int(np.prod(item["shape"], dtype=np.int64)) * dtype.itemsize
            weights.append(blob[item["offset"]: item["offset"] + size].view(dtype).reshape(item["shape"]))
    except (KeyError, TypeError) as error:
        raise ValueError(f"{entry / INDEX_FILE} is damaged: {error!r}") from None
    return weights


def _dtype(name):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)
