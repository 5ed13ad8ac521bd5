"""A Hugging Face Marian checkpoint's tensors, read without torch and named as this package's variables."""

import functools

import numpy as np

from keras_transformer.checkpoints.layer_weights import layer_weights
from keras_transformer.checkpoints.layer_weights import take


def marian_weights(architecture, tensors, marian_ids, weights_path="the weights", target_marian_ids=None):
    """The model's weights by variable path, from a Marian checkpoint's tensors.

    Args:
        architecture: a `MarianArchitecture`.
        tensors: the `CheckpointTensors` of `read_weights`.
        marian_ids: for each id of this package, the Marian id
            (`marian_id_order`): the rows of the embedding and the bias follow it.
        weights_path: the file the tensors came from, for messages.
        target_marian_ids: the decoder's own permutation, for a target
            with a table of its own (default: `marian_ids`).

    Returns:
        A dict from a variable's `path` in a `transformer()` model built
        with `architecture.builder_arguments()` to a function reading its
        NumPy value (`layer_weights.take`).

    Raises:
        UserInputError: a tensor is missing or of the wrong shape.
    """
    a = architecture
    target_ids = marian_ids if target_marian_ids is None else target_marian_ids
    target_size = len(target_ids)
    if "final_logits_bias" in tensors:
        bias = take(tensors, "final_logits_bias", (1, target_size), weights_path, lambda bias: bias[0, target_ids])
    else:
        bias = functools.partial(np.zeros, target_size, np.float32)
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
        weights[f"{stack}_embedding/token_embedding/embeddings"] = take(
            tensors, name, (len(ids), a.d_model), weights_path, functools.partial(_rows, ids))
    weights[f"{'shared' if a.share_embeddings else 'decoder'}_embedding/logits_bias"] = bias

    weights.update(layer_weights(a, tensors, weights_path))
    return weights


def _rows(ids, matrix):
    return matrix[ids]
