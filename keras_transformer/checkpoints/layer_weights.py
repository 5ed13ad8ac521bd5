"""The layers' tensors of a Hugging Face BART-family checkpoint (Marian, M2M-100, NLLB-200), named as this package's variables.

Those models name their layers alike (`encoder.layers.0.self_attn.q_proj`,
`fc1`, `final_layer_norm`, ...) and store a `Linear`'s matrix as
`(outputs, inputs)`, the transpose of a Keras kernel; each family's own
module maps its embeddings and extra norms and calls `layer_weights` for the rest.

Each weight is a function that reads its value when the model's variable
is assigned (`imported_model.built_model`): the shapes are checked from the
file's header first, and an import never holds the whole file beside the model.
"""

import functools

from keras_transformer_runtime.errors import UserInputError

# (name in transformers, name here) of each projection of an attention.
_ATTENTION_PROJECTIONS = (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value"), ("out_proj", "attention_output"))


def take(tensors, name, shape, weights_path, transform=None):
    """A function reading `tensors[name]` (then `transform` of it), once the tensor is checked to have `shape`.

    Args:
        tensors: `hugging_face_files.CheckpointTensors`.
        name: the tensor's name.
        shape: the shape the model needs.
        weights_path: the file, for messages.
        transform: None, or a function applied to the value when it is read
            (a transpose, a reordering of rows).

    Returns:
        A function of no arguments returning the NumPy value.

    Raises:
        UserInputError: the tensor is missing or of another shape (the file named).

    Example:

    >>> import numpy as np
    >>> from keras_transformer.checkpoints.hugging_face_files import CheckpointTensors
    >>> take(CheckpointTensors({"w": np.zeros((2, 3))}, {"w": "w"}), "w", (3, 2), "model.safetensors")
    Traceback (most recent call last):
    ...
    keras_transformer_runtime.errors.UserInputError: model.safetensors: 'w' has shape (2, 3), config.json's model needs (3, 2).
    """
    if name not in tensors:
        raise UserInputError(f"{weights_path}: lacks the tensor {name!r} that config.json's model needs.")
    if tensors.shape(name) != tuple(shape):
        raise UserInputError(f"{weights_path}: {name!r} has shape {tensors.shape(name)}, config.json's model "
                             f"needs {tuple(shape)}.")
    return functools.partial(_read, tensors, name, transform)


def _read(tensors, name, transform):
    value = tensors.tensor(name)
    return value if transform is None else transform(value)


def _transposed(value):
    return value.T


def layer_tensor_names(architecture):
    """For each variable path of the encoder and decoder layers, its tensor's name and shape in transformers' file.

    A kernel's tensor is its transpose (`Linear`'s `(outputs, inputs)`).

    Args:
        architecture: has `d_model`, `ff_dim`, `num_layers`, `num_decoder_layers`.

    Returns:
        A dict `{path: (name, shape)}`.

    Example:

    >>> import types
    >>> names = layer_tensor_names(types.SimpleNamespace(d_model=4, ff_dim=8, num_layers=1, num_decoder_layers=0))
    >>> names["encoder_layer_0/feed_forward/hidden/kernel"]
    ('encoder.layers.0.fc1.weight', (8, 4))
    """
    a = architecture
    names = {}

    def dense(ours, theirs, inputs, outputs):
        names[f"{ours}/kernel"] = (f"{theirs}.weight", (outputs, inputs))
        names[f"{ours}/bias"] = (f"{theirs}.bias", (outputs,))

    def norm(ours, theirs):
        names[f"{ours}/gamma"] = (f"{theirs}.weight", (a.d_model,))
        names[f"{ours}/beta"] = (f"{theirs}.bias", (a.d_model,))

    def attention(ours, theirs):
        for their_name, our_name in _ATTENTION_PROJECTIONS:
            dense(f"{ours}/{our_name}", f"{theirs}.{their_name}", a.d_model, a.d_model)

    def feed_forward(ours, theirs):
        dense(f"{ours}/feed_forward/hidden", f"{theirs}.fc1", a.d_model, a.ff_dim)
        dense(f"{ours}/feed_forward/output", f"{theirs}.fc2", a.ff_dim, a.d_model)
        norm(f"{ours}/feed_forward_norm", f"{theirs}.final_layer_norm")

    for i in range(a.num_layers):
        ours, theirs = f"encoder_layer_{i}", f"encoder.layers.{i}"
        attention(f"{ours}/self_attention", f"{theirs}.self_attn")
        norm(f"{ours}/self_attention_norm", f"{theirs}.self_attn_layer_norm")
        feed_forward(ours, theirs)
    for i in range(a.num_decoder_layers):
        ours, theirs = f"decoder_layer_{i}", f"decoder.layers.{i}"
        attention(f"{ours}/self_attention", f"{theirs}.self_attn")
        norm(f"{ours}/self_attention_norm", f"{theirs}.self_attn_layer_norm")
        attention(f"{ours}/cross_attention", f"{theirs}.encoder_attn")
        norm(f"{ours}/cross_attention_norm", f"{theirs}.encoder_attn_layer_norm")
        feed_forward(ours, theirs)
    return names


def layer_weights(architecture, tensors, weights_path):
    """The encoder and decoder layers' weights by variable path (`layer_tensor_names`, kernels transposed).

    Args:
        architecture: has `d_model`, `ff_dim`, `num_layers`, `num_decoder_layers`.
        tensors: the checkpoint's `CheckpointTensors` (`hugging_face_files.read_weights`).
        weights_path: the file the tensors came from, for messages.

    Returns:
        A dict from a variable's `path` in a `transformer()` model to a
        function reading its NumPy value (`take`).

    Raises:
        UserInputError: a tensor is missing or of the wrong shape.
    """
    return {path: take(tensors, name, shape, weights_path, _transposed if path.endswith("/kernel") else None)
            for path, (name, shape) in layer_tensor_names(architecture).items()}


def norm_weights(ours, theirs, width, tensors, weights_path):
    """One LayerNorm's `gamma` and `beta` by variable path (functions reading them, `take`), from transformers' `weight` and `bias`.

    Example:

    >>> import numpy as np
    >>> from keras_transformer.checkpoints.hugging_face_files import CheckpointTensors
    >>> names = {"encoder.layer_norm.weight": np.ones(2), "encoder.layer_norm.bias": np.zeros(2)}
    >>> sorted(norm_weights("encoder_final_norm", "encoder.layer_norm", 2,
    ...                     CheckpointTensors(names, {name: name for name in names}), "f"))
    ['encoder_final_norm/beta', 'encoder_final_norm/gamma']
    """
    return {f"{ours}/gamma": take(tensors, f"{theirs}.weight", (width,), weights_path),
            f"{ours}/beta": take(tensors, f"{theirs}.bias", (width,), weights_path)}
