"""What every Hugging Face checkpoint folder shares: its file names, its weights read without torch, a hub id fetched.

`marian` and `nllb` read their own `config.json` and tokenizer; both read
the weights and fetch a hub id here.
"""

import os

import numpy as np

from keras_transformer_runtime.errors import UserInputError

CONFIG_FILE = "config.json"
GENERATION_CONFIG_FILE = "generation_config.json"
SAFETENSORS_FILE = "model.safetensors"
PYTORCH_FILE = "pytorch_model.bin"


class CheckpointTensors:
    """A checkpoint's tensors by name (without transformers' `model.` prefix), read one at a time when asked.

    A `model.safetensors` is opened (`safetensors.safe_open`), not read:
    `shape` comes from its header and `tensor` reads one tensor, so an
    import holds the model's variables and one tensor at a time, not the
    whole file beside them. Each tensor is read through a handle of its own,
    closed at once: the file is mapped into memory, and the pages a handle
    has read stay in the process' memory until it is closed (the whole
    file's, 296 MB at opus-mt's size, had one handle read every tensor). A
    `pytorch_model.bin`, which torch reads whole, is kept as a dict.

    Args:
        source: a `safe_open` handle, or a dict of arrays.
        names: for each short name, the name in `source`.
        path: the safetensors file `source` opened (each tensor is read
            through a handle of its own); unused for a dict.

    Example:

    >>> import numpy as np
    >>> tensors = CheckpointTensors({"model.shared.weight": np.ones((2, 3))}, {"shared.weight": "model.shared.weight"})
    >>> "shared.weight" in tensors, tensors.shape("shared.weight"), tensors.tensor("shared.weight").dtype
    (True, (2, 3), dtype('float32'))
    """

    def __init__(self, source, names, path=None):
        self._source = source
        self._names = names
        self._path = path

    def __contains__(self, name):
        return name in self._names

    def __iter__(self):
        return iter(self._names)

    def shape(self, name):
        """The shape of one tensor, read from the file's header."""
        full = self._names[name]
        if isinstance(self._source, dict):
            return tuple(self._source[full].shape)
        return tuple(self._source.get_slice(full).get_shape())

    def tensor(self, name):
        """One tensor as a float32 NumPy array, read now."""
        full = self._names[name]
        if isinstance(self._source, dict):
            return np.asarray(self._source[full], np.float32)
        from safetensors import safe_open

        with safe_open(self._path, "np") as handle:
            return np.asarray(handle.get_tensor(full), np.float32)


def read_weights(directory):
    """`(tensors, path)`: a Hugging Face folder's weights file as `CheckpointTensors`, and the file.

    `model.safetensors` is opened with `safetensors` (no torch) and read a
    tensor at a time; a `pytorch_model.bin` alone needs torch.

    Raises:
        UserInputError: no weights file, or one that cannot be read
            (truncated, not a checkpoint).
    """
    safetensors_path = os.path.join(directory, SAFETENSORS_FILE)
    pytorch_path = os.path.join(directory, PYTORCH_FILE)
    if os.path.isfile(safetensors_path):
        path = safetensors_path
        from safetensors import safe_open

        try:
            source = safe_open(safetensors_path, "np")  # checks that the data covers the header's tensors
            names = list(source.keys())
        except Exception as error:  # safetensors raises its own SafetensorError, and OSError
            raise UserInputError(f"{safetensors_path}: not a readable safetensors file ({error}).") from None
    elif os.path.isfile(pytorch_path):
        path = pytorch_path
        try:
            import torch
        except ImportError:
            raise UserInputError(f"{pytorch_path}: reading a pytorch_model.bin needs torch; install it, or "
                                 "save the model with safetensors.") from None
        try:
            state = torch.load(pytorch_path, map_location="cpu", weights_only=True)
        except Exception as error:  # torch raises many kinds for a damaged pickle
            raise UserInputError(f"{pytorch_path}: not a readable PyTorch checkpoint ({error}).") from None
        source = {name: value.float().numpy() for name, value in state.items()}
        names = list(source)
    else:
        raise UserInputError(f"{directory}: holds neither {SAFETENSORS_FILE} nor {PYTORCH_FILE}.")
    return CheckpointTensors(source, {_short_name(name): name for name in names}, path), path


def _short_name(name):
    # MarianMTModel saves its MarianModel under "model."; a bare MarianModel does not.
    return name[len("model."):] if name.startswith("model.") else name


def _is_hub_id(source):
    parts = source.split("/")
    return len(parts) == 2 and all(parts) and not source.startswith((".", "/")) and " " not in source


def fetch_folder(source, patterns):
    """A local folder for `source`: the folder itself, or a hub id (`Helsinki-NLP/opus-mt-es-en`) downloaded.

    Args:
        source: a folder, or a Hugging Face hub id, fetched with
            `huggingface_hub.snapshot_download` (its cache) where the network is available.
        patterns: the file names to fetch of a hub model (no others).

    Returns:
        The folder's path.

    Raises:
        UserInputError: neither a folder nor a hub id that can be fetched.

    Example:

    >>> fetch_folder("no such folder", ["config.json"])
    Traceback (most recent call last):
    ...
    keras_transformer_runtime.errors.UserInputError: no such folder: no such folder, and not a hub id ...
    """
    source = os.fspath(source)
    if os.path.isdir(source):
        return source
    if not _is_hub_id(source) or os.path.exists(source):
        raise UserInputError(f"{source}: no such folder, and not a hub id (ORGANIZATION/NAME, e.g. "
                             "Helsinki-NLP/opus-mt-es-en).")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise UserInputError(f"{source}: fetching a hub model needs huggingface_hub (pip install huggingface_hub); "
                             "or pass a local folder.") from None
    try:
        return snapshot_download(repo_id=source, allow_patterns=list(patterns))
    except Exception as error:  # offline, unknown id, no permission: huggingface_hub raises many kinds
        raise UserInputError(f"{source}: could not fetch it from the Hugging Face hub "
                             f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
                             "on a machine without the network, pass a local folder.") from None


def check_output(output, overwrite):
    """`output` as a path, once it is sure a run folder may be written there (before any long work).

    Raises:
        UserInputError: `output` exists and is not empty (without
            `overwrite`), or is a file.

    Example:

    >>> import tempfile
    >>> check_output(tempfile.mkstemp()[1], overwrite=True)
    Traceback (most recent call last):
    ...
    keras_transformer_runtime.errors.UserInputError: --output ...: is a file, not a folder.
    """
    output = os.fspath(output)
    if os.path.exists(output) and not os.path.isdir(output):
        raise UserInputError(f"--output {output}: is a file, not a folder.")
    if os.path.isdir(output) and os.listdir(output) and not overwrite:
        raise UserInputError(f"--output {output}: exists and is not empty; pass --overwrite to replace it.")
    return output


def write_run_folder(output, overwrite, write):
    """Calls `write(folder)` on a folder beside `output`, then moves it to `output` whole.

    A failure (or an interruption) leaves nothing in `output`.

    Args:
        output: the run folder to write.
        overwrite: replace a run folder that exists; otherwise an
            existing, non-empty `output` is refused.
        write: a function of the staging folder's path, which fills it.

    Raises:
        UserInputError: `output` exists and is not empty, or is a file.

    Example:

    >>> import os, tempfile
    >>> output = os.path.join(tempfile.mkdtemp(), "run")
    >>> write_run_folder(output, False, lambda folder: open(os.path.join(folder, "a"), "w").close())
    >>> os.listdir(output)
    ['a']
    """
    import shutil

    output = check_output(output, overwrite)
    parent = os.path.dirname(os.path.abspath(output))
    os.makedirs(parent, exist_ok=True)
    staging = os.path.join(parent, f".{os.path.basename(os.path.abspath(output))}.importing-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        os.makedirs(staging)
        write(staging)
        if os.path.isdir(output):
            shutil.rmtree(output)
        os.replace(staging, output)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
