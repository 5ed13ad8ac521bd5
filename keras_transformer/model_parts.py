"""The one place that names the layers of a built model, and finds them again.

`models.py` names every layer it builds with the functions here, and
decoding (`CachedDecoder`, the SavedModel export) finds them with
`transformer_parts`. A renamed layer therefore changes both sides at once,
and a `.keras` file saved by an earlier version still loads: the names are
the ones the builders have always used.
"""

import typing

import keras

from keras_transformer_runtime.special_tokens import START_ID

ENCODER_TOKENS = "encoder_tokens"
DECODER_TOKENS = "decoder_tokens"
OUTPUT_PROJECTION = "output_projection"
LOGITS = "logits"
# The one `PositionalEmbedding` of a model whose source and target share it (Marian's `shared`).
SHARED_EMBEDDING = "shared_embedding"


def embedding_name(stack):
    """The `PositionalEmbedding` of a stack.

    Args:
        stack: `"encoder"` or `"decoder"`.

    Returns:
        The layer name.

    Example:

    >>> embedding_name("decoder")
    'decoder_embedding'
    """
    return f"{stack}_embedding"


def embedding_dropout_name(stack):
    """The dropout after a stack's embedding (`stack` as in `embedding_name`).

    Example:

    >>> embedding_dropout_name("encoder")
    'encoder_embedding_dropout'
    """
    return f"{stack}_embedding_dropout"


def padding_mask_name(stack):
    """The `PaddingMask` computed from a stack's tokens.

    Args:
        stack: `"encoder"`, `"decoder"`, or None for a model with one input.

    Example:

    >>> padding_mask_name("encoder"), padding_mask_name(None)
    ('encoder_padding_mask', 'padding_mask')
    """
    return "padding_mask" if stack is None else f"{stack}_padding_mask"


def layer_name(stack, index):
    """The `index`-th `EncoderLayer` or `DecoderLayer` of a stack, from 0.

    Example:

    >>> layer_name("decoder", 2)
    'decoder_layer_2'
    """
    return f"{stack}_layer_{index}"


def final_norm_name(stack):
    """The layer norm after a pre-LN stack's last layer.

    Example:

    >>> final_norm_name("encoder")
    'encoder_final_norm'
    """
    return f"{stack}_final_norm"


class TransformerParts(typing.NamedTuple):
    """The layers of a `models.transformer()` model that decoding uses.

    Attributes:
        encoder_embedding: the source `PositionalEmbedding` (the same layer
            as `decoder_embedding` in a model built with `share_embeddings`).
        encoder_padding_mask: the source `PaddingMask`.
        encoder_layers: the `EncoderLayer`s, in order.
        encoder_final_norm: the last layer norm of a pre-LN encoder, or None.
        decoder_embedding: the target `PositionalEmbedding`.
        decoder_layers: the `DecoderLayer`s, in order.
        decoder_final_norm: as `encoder_final_norm`, for the decoder.
        output_projection: the `Dense` to logits, or None when the
            embedding is tied (`decoder_embedding.project_to_vocabulary`).
        decoder_padding_mask: the target `PaddingMask`, which knows the
            start token (`decoder_start_id`).
    """

    encoder_embedding: object
    encoder_padding_mask: object
    encoder_layers: list
    encoder_final_norm: object
    decoder_embedding: object
    decoder_layers: list
    decoder_final_norm: object
    output_projection: object
    decoder_padding_mask: object = None

    @property
    def decoder_start_id(self):
        """The token every target starts with: `START_ID`, or the one the decoder's mask names (Marian's padding)."""
        start_id = getattr(self.decoder_padding_mask, "start_id", None)
        return START_ID if start_id is None else start_id

    @property
    def encoder_output(self):
        """The layer whose output is the encoder's (the final norm, else the last layer)."""
        return self.encoder_final_norm or self.encoder_layers[-1]


def _numbered(layers, stack):
    found = []
    while layer_name(stack, len(found)) in layers:
        found.append(layers[layer_name(stack, len(found))])
    return found


def transformer_parts(model, what="`model`"):
    """The parts of an encoder-decoder built by `models.transformer()`.

    Args:
        model: the model.
        what: how messages refer to it, e.g. the file it came from.

    Returns:
        A `TransformerParts`.

    Raises:
        TypeError: `model` is not a `keras.Model`.
        ValueError: it lacks the inputs or layers of a `transformer()`
            (a `language_model`, a model of one's own, a foreign file), so
            decoding would otherwise fail deep inside.

    Example:

    >>> import keras_transformer as kt
    >>> parts = transformer_parts(kt.models.transformer(
    ...     20, 20, num_layers=2, d_model=8, num_heads=2, ff_dim=16, max_length=8))
    >>> [layer.name for layer in parts.decoder_layers], parts.output_projection.name
    (['decoder_layer_0', 'decoder_layer_1'], 'output_projection')
    >>> transformer_parts(kt.models.language_model(
    ...     20, num_layers=1, d_model=8, num_heads=2, ff_dim=16, max_length=8))
    Traceback (most recent call last):
    ...
    ValueError: `model` 'language_model' is not an encoder-decoder built by keras_transformer.models.transformer(): ...
    """
    if not isinstance(model, keras.Model):
        raise TypeError(
            f"{what} must be a keras.Model built by keras_transformer.models.transformer(), "
            f"got {type(model).__name__}."
        )
    try:
        inputs = model.input
    except (AttributeError, ValueError):  # a subclassed model that was never called
        inputs = None
    layers = {layer.name: layer for layer in model.layers}
    if SHARED_EMBEDDING in layers:
        for stack in ("encoder", "decoder"):
            layers.setdefault(embedding_name(stack), layers[SHARED_EMBEDDING])
    required = (embedding_name("encoder"), padding_mask_name("encoder"), layer_name("encoder", 0),
                embedding_name("decoder"), layer_name("decoder", 0))
    expected_inputs = {ENCODER_TOKENS, DECODER_TOKENS}
    missing = [name for name in required if name not in layers]
    if not (isinstance(inputs, dict) and set(inputs) == expected_inputs) or missing:
        if isinstance(inputs, dict):
            has_inputs = f"inputs {sorted(inputs)}"
        else:
            count = len(keras.tree.flatten(inputs)) if inputs is not None else "no"
            has_inputs = f"{count} unnamed input(s)"
        raise ValueError(
            f"{what} {model.name!r} is not an encoder-decoder built by "
            f"keras_transformer.models.transformer(): it has {has_inputs} and lacks "
            f"the layers {missing}. Decoding needs the inputs "
            f"{sorted(expected_inputs)} and the layers {list(required)}."
        )
    return TransformerParts(
        encoder_embedding=layers[embedding_name("encoder")],
        encoder_padding_mask=layers[padding_mask_name("encoder")],
        encoder_layers=_numbered(layers, "encoder"),
        encoder_final_norm=layers.get(final_norm_name("encoder")),
        decoder_embedding=layers[embedding_name("decoder")],
        decoder_layers=_numbered(layers, "decoder"),
        decoder_final_norm=layers.get(final_norm_name("decoder")),
        output_projection=layers.get(OUTPUT_PROJECTION),
        decoder_padding_mask=layers.get(padding_mask_name("decoder")),
    )
