"""A Hugging Face Marian checkpoint's tensors, read without torch and named as this package's variables."""

import os

import numpy as np

from keras_transformer.checkpoints.marian.config import PYTORCH_FILE
from keras_transformer.checkpoints.marian.config import SAFETENSORS_FILE
from keras_transformer_runtime.errors import UserInputError

# (name in transformers, name here) of each projection of an attention.
_ATTENTION_PROJECTIONS = (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value"), ("out_proj", "attention_output"))



def read_weights(directory):
    """`(tensors, path)`: a Marian folder's weights file's tensors by name (float32 NumPy arrays), and the file.

    `model.safetensors` is read with `safetensors.numpy` (no torch);
    a `pytorch_model.bin` alone needs torch.

    Raises:
        UserInputError: no weights file, or one that cannot be read
            (truncated, not a checkpoint).
    """
    safetensors_path = os.path.join(directory, SAFETENSORS_FILE)
    pytorch_path = os.path.join(directory, PYTORCH_FILE)
    if os.path.isfile(safetensors_path):
        path = safetensors_path
        from safetensors.numpy import load_file

        try:
            tensors = load_file(safetensors_path)
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
        tensors = {name: value.float().numpy() for name, value in state.items()}
    else:
        raise UserInputError(f"{directory}: holds neither {SAFETENSORS_FILE} nor {PYTORCH_FILE}.")
    return {_short_name(name): np.asarray(value, np.float32) for name, value in tensors.items()}, path


def _short_name(name):
    # MarianMTModel saves its MarianModel under "model."; a bare MarianModel does not.
    return name[len("model."):] if name.startswith("model.") else name


def _take(tensors, name, shape, weights_path):
    if name not in tensors:
        raise UserInputError(f"{weights_path}: lacks the tensor {name!r} that config.json's model needs.")
    value = tensors[name]
    if tuple(value.shape) != tuple(shape):
        raise UserInputError(f"{weights_path}: {name!r} has shape {tuple(value.shape)}, config.json's model "
                             f"needs {tuple(shape)}.")
    return value


def marian_weights(architecture, tensors, marian_ids, weights_path="the weights", target_marian_ids=None):
    """The model's weights by variable path, from a Marian checkpoint's tensors.

    Args:
        architecture: a `MarianArchitecture`.
        tensors: the dict of `read_weights`.
        marian_ids: for each id of this package, the Marian id
            (`marian_id_order`): the rows of the embedding and the bias follow it.
        weights_path: the file the tensors came from, for messages.
        target_marian_ids: the decoder's own permutation, for a target
            with a table of its own (default: `marian_ids`).

    Returns:
        A dict from a variable's `path` in a `transformer()` model built
        with `architecture.builder_arguments()` to its NumPy value.

    Raises:
        UserInputError: a tensor is missing or of the wrong shape.
    """
    a = architecture
    target_ids = marian_ids if target_marian_ids is None else target_marian_ids
    target_size = len(target_ids)
    bias = tensors.get("final_logits_bias", np.zeros((1, target_size), np.float32))
    bias = _take({"final_logits_bias": bias}, "final_logits_bias", (1, target_size), weights_path)
    if a.share_embeddings:
        names = {"shared": ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                            "lm_head.weight")}
    else:  # lm_head is tied to the decoder's matrix
        names = {"encoder": ("encoder.embed_tokens.weight",),
                 "decoder": ("decoder.embed_tokens.weight", "lm_head.weight")}
    weights = {}
    for stack, candidates in names.items():
        name = next((name for name in candidates if name in tensors), candidates[0])
        ids = marian_ids if stack == "encoder" else target_ids
        embeddings = _take(tensors, name, (len(ids), a.d_model), weights_path)
        weights[f"{stack}_embedding/token_embedding/embeddings"] = embeddings[ids]
    weights[f"{'shared' if a.share_embeddings else 'decoder'}_embedding/logits_bias"] = bias[0, target_ids]

    def dense(ours, theirs, inputs, outputs):
        weights[f"{ours}/kernel"] = _take(tensors, f"{theirs}.weight", (outputs, inputs), weights_path).T
        weights[f"{ours}/bias"] = _take(tensors, f"{theirs}.bias", (outputs,), weights_path)

    def norm(ours, theirs):
        weights[f"{ours}/gamma"] = _take(tensors, f"{theirs}.weight", (a.d_model,), weights_path)
        weights[f"{ours}/beta"] = _take(tensors, f"{theirs}.bias", (a.d_model,), weights_path)

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
    return weights
