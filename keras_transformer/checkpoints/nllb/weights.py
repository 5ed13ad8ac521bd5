"""An NLLB-200 / M2M-100 checkpoint's tensors, named as this package's variables."""

from keras_transformer.checkpoints.layer_weights import layer_weights
from keras_transformer.checkpoints.layer_weights import norm_weights
from keras_transformer.checkpoints.layer_weights import take

# Where transformers keeps the one token matrix (the others are tied to it and may be left out of the file).
_EMBEDDING_NAMES = ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight")


def nllb_weights(architecture, tensors, model_ids, weights_path="the weights"):
    """The model's weights by variable path, from an M2M-100 checkpoint's tensors.

    Args:
        architecture: an `NllbArchitecture`.
        tensors: the `CheckpointTensors` of `hugging_face_files.read_weights`.
        model_ids: for each id of this package, the model's id
            (`NllbTokenizer.model_ids`): the embedding's rows follow it.
        weights_path: the file the tensors came from, for messages.

    Returns:
        A dict from a variable's `path` in a `transformer()` model built
        with `architecture.builder_arguments(...)` to a function reading
        its NumPy value (`layer_weights.take`).

    Raises:
        UserInputError: a tensor is missing or of the wrong shape.
    """
    a = architecture
    name = next((name for name in _EMBEDDING_NAMES if name in tensors), _EMBEDDING_NAMES[0])
    weights = {"shared_embedding/token_embedding/embeddings": take(
        tensors, name, (a.vocabulary_size, a.d_model), weights_path, lambda embeddings: embeddings[model_ids])}
    weights.update(layer_weights(a, tensors, weights_path))
    for stack in ("encoder", "decoder"):
        weights.update(norm_weights(f"{stack}_final_norm", f"{stack}.layer_norm", a.d_model, tensors, weights_path))
    return weights
