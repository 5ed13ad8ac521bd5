"""Functional model builders: encoder-decoder, encoder classifier, decoder LM.

All three are plain functional `keras.Model`s assembled from the package's
layers, so they train with `model.fit`, save to `.keras` and run on every
backend. Token inputs are int tensors padded with 0; padding masks are
computed once from the tokens and passed to every layer explicitly.

Options that are not arguments of the builder itself (`norm_first`,
`attention_dropout`, `activation`, `layer_norm_epsilon`, `use_bias`,
`fused_qkv`, `qkv_initializer`, `logit_scale` and the initializers) are
passed through `**layer_options` to every `EncoderLayer` / `DecoderLayer`.
"""

import keras

from keras_transformer.layers import DecoderLayer
from keras_transformer.layers import EncoderLayer
from keras_transformer.layers import PaddingMask
from keras_transformer.layers import PositionalEmbedding
from keras_transformer.model_parts import DECODER_TOKENS
from keras_transformer.model_parts import ENCODER_TOKENS
from keras_transformer.model_parts import LOGITS
from keras_transformer.model_parts import OUTPUT_PROJECTION
from keras_transformer.model_parts import SHARED_EMBEDDING
from keras_transformer.model_parts import embedding_dropout_name
from keras_transformer.model_parts import embedding_name
from keras_transformer.model_parts import final_norm_name
from keras_transformer.model_parts import layer_name
from keras_transformer.model_parts import padding_mask_name
from keras_transformer_runtime.special_tokens import PAD_ID
from keras_transformer_runtime.special_tokens import START_ID


def _token_input(name):
    return keras.Input(shape=(None,), dtype="int32", name=name)


def _embed(tokens, vocabulary_size, d_model, max_length, dropout, embedding, name, layer=None):
    layer = layer or PositionalEmbedding(
        vocabulary_size, d_model, max_length, name=embedding_name(name), **embedding
    )
    x = layer(tokens)
    return layer, keras.layers.Dropout(dropout, name=embedding_dropout_name(name))(x)


def _final_norm(x, layer_options, name):
    # Pre-LN leaves the residual stream unnormalized after the last layer.
    if not layer_options.get("norm_first", False):
        return x
    epsilon = layer_options.get("layer_norm_epsilon", 1e-5)
    return keras.layers.LayerNormalization(epsilon=epsilon, name=final_norm_name(name))(x)


def _layer_arguments(d_model, num_heads, ff_dim, dropout, layer_options):
    return dict(d_model=d_model, num_heads=num_heads, ff_dim=ff_dim, dropout=dropout, **layer_options)


def _encode(tokens, vocabulary_size, num_layers, arguments, max_length, embedding, name, embedding_layer=None):
    mask = PaddingMask(name=padding_mask_name(name))(tokens)
    _, x = _embed(
        tokens, vocabulary_size, arguments["d_model"], max_length, arguments["dropout"], embedding, name,
        layer=embedding_layer,
    )
    for i in range(num_layers):
        x = EncoderLayer(name=layer_name(name, i), **arguments)(x, mask=mask)
    return _final_norm(x, arguments, name), mask


def _logits(x, vocabulary_size, embedding_layer, tie_embeddings):
    if tie_embeddings:
        logits = embedding_layer.project_to_vocabulary(x)
    else:
        logits = keras.layers.Dense(vocabulary_size, name=OUTPUT_PROJECTION)(x)
    # Softmax and the loss want float32 logits under mixed precision.
    return keras.layers.Activation("linear", dtype="float32", name=LOGITS)(logits)


def _embedding_options(embedding_scale, positions, merge, position_dim, sinusoid_layout="interleaved"):
    return dict(scale=embedding_scale, positions=positions, merge=merge, position_dim=position_dim,
                sinusoid_layout=sinusoid_layout)


def transformer(
    source_vocabulary_size,
    target_vocabulary_size,
    *,
    num_layers=6,
    d_model=512,
    num_heads=8,
    ff_dim=2048,
    max_length=256,
    dropout=0.1,
    num_decoder_layers=None,
    tie_embeddings=False,
    share_embeddings=False,
    output_bias=False,
    decoder_start_id=START_ID,
    embedding_scale="sqrt",
    positions="sinusoidal",
    merge="add",
    position_dim=None,
    sinusoid_layout="interleaved",
    name="transformer",
    **layer_options,
):
    """The encoder-decoder Transformer of "Attention Is All You Need".

    Defaults are the paper's base model (6 + 6 layers, d_model 512, 8 heads,
    ff_dim 2048, dropout 0.1, post-LN, sinusoidal positions, embeddings
    scaled by sqrt(d_model)).

    Args:
        source_vocabulary_size: int, vocabulary of the encoder tokens.
        target_vocabulary_size: int, vocabulary of the decoder tokens.
        num_layers: int, encoder layers (and decoder layers unless
            `num_decoder_layers` is given). Defaults to 6.
        d_model: int, model width. Defaults to 512.
        num_heads: int, attention heads; must divide `d_model`.
        ff_dim: int, feed-forward hidden width. Defaults to 2048.
        max_length: int, longest source or target sequence. Defaults to 256.
        dropout: float, residual and embedding dropout. Defaults to 0.1.
        num_decoder_layers: int, decoder depth. Defaults to `num_layers`.
        tie_embeddings: bool, use the decoder's embedding matrix as the
            output projection (section 3.4). Defaults to False.
        share_embeddings: bool, one `PositionalEmbedding` (one token
            matrix, named `shared_embedding`) for the source and the target,
            as in Marian; needs equal vocabulary sizes. Defaults to False.
        output_bias: bool, a bias over the vocabulary added to the tied
            output projection (Marian's `final_logits_bias`); needs
            `tie_embeddings`. Defaults to False.
        decoder_start_id: int, the token every target starts with, in
            training and decoding. Defaults to `START_ID`; Marian's
            decoders start from the padding id `PAD_ID` (its embedding row
            is zero in OPUS-MT models), which the decoder's padding mask
            then keeps as a real position.
        embedding_scale, positions, merge, position_dim, sinusoid_layout:
            passed to both `PositionalEmbedding`s as `scale`, `positions`,
            `merge`, `position_dim` and `sinusoid_layout`.
        name: str, name of the model.
        **layer_options: passed to every `EncoderLayer` and `DecoderLayer`.

    Returns:
        A functional `keras.Model` with inputs `{"encoder_tokens",
        "decoder_tokens"}` (int, `(batch, length)`, padded with 0) and
        float32 logits `(batch, target_length, target_vocabulary_size)`.

    Example:

    >>> import numpy as np
    >>> model = transformer(100, 120, num_layers=1, d_model=16, num_heads=2,
    ...                     ff_dim=32, max_length=10)
    >>> batch = {"encoder_tokens": np.array([[5, 6, 7, 0]]),
    ...          "decoder_tokens": np.array([[1, 9, 0]])}
    >>> tuple(model(batch).shape)
    (1, 3, 120)
    """
    if output_bias and not tie_embeddings:
        raise ValueError("output_bias=True needs tie_embeddings=True: an untied output projection has its own bias.")
    embedding = _embedding_options(embedding_scale, positions, merge, position_dim, sinusoid_layout)
    shared = None
    if share_embeddings:
        if source_vocabulary_size != target_vocabulary_size:
            raise ValueError(
                "share_embeddings=True needs one vocabulary: source_vocabulary_size="
                f"{source_vocabulary_size} and target_vocabulary_size={target_vocabulary_size} differ."
            )
        shared = PositionalEmbedding(target_vocabulary_size, d_model, max_length, name=SHARED_EMBEDDING,
                                     output_bias=output_bias, **embedding)
    arguments = _layer_arguments(d_model, num_heads, ff_dim, dropout, layer_options)
    encoder_tokens = _token_input(ENCODER_TOKENS)
    decoder_tokens = _token_input(DECODER_TOKENS)
    encoder_outputs, encoder_mask = _encode(
        encoder_tokens, source_vocabulary_size, num_layers, arguments, max_length, embedding, "encoder",
        embedding_layer=shared,
    )
    start = {} if decoder_start_id == START_ID else {"start_id": int(decoder_start_id)}
    decoder_mask = PaddingMask(padding_id=PAD_ID, name=padding_mask_name("decoder"), **start)(decoder_tokens)
    decoder_options = dict(embedding, output_bias=True) if output_bias else embedding
    decoder_embedding, x = _embed(
        decoder_tokens, target_vocabulary_size, d_model, max_length, dropout, decoder_options, "decoder",
        layer=shared,
    )
    for i in range(num_layers if num_decoder_layers is None else num_decoder_layers):
        x = DecoderLayer(name=layer_name("decoder", i), **arguments)(
            x, encoder_outputs, mask=decoder_mask, encoder_mask=encoder_mask
        )
    x = _final_norm(x, arguments, "decoder")
    logits = _logits(x, target_vocabulary_size, decoder_embedding, tie_embeddings)
    inputs = {ENCODER_TOKENS: encoder_tokens, DECODER_TOKENS: decoder_tokens}
    return keras.Model(inputs, logits, name=name)


def encoder_classifier(
    vocabulary_size,
    num_classes,
    *,
    num_layers=6,
    d_model=512,
    num_heads=8,
    ff_dim=2048,
    max_length=256,
    dropout=0.1,
    embedding_scale="sqrt",
    positions="sinusoidal",
    merge="add",
    position_dim=None,
    name="encoder_classifier",
    **layer_options,
):
    """An encoder stack with masked mean pooling and a classification head.

    Args:
        vocabulary_size: int, vocabulary of the input tokens.
        num_classes: int, number of classes.
        num_layers, d_model, num_heads, ff_dim, max_length, dropout: as in `transformer`.
        embedding_scale, positions, merge, position_dim, **layer_options: as in `transformer`.
        name: str, name of the model.

    Returns:
        A functional `keras.Model` from int `tokens` `(batch, length)`
        (padded with 0) to float32 class logits `(batch, num_classes)`.

    Example:

    >>> import numpy as np
    >>> model = encoder_classifier(100, 3, num_layers=1, d_model=16,
    ...                            num_heads=2, ff_dim=32, max_length=10)
    >>> tuple(model(np.array([[5, 6, 0]])).shape)
    (1, 3)
    """
    embedding = _embedding_options(embedding_scale, positions, merge, position_dim)
    arguments = _layer_arguments(d_model, num_heads, ff_dim, dropout, layer_options)
    tokens = _token_input("tokens")
    x, mask = _encode(tokens, vocabulary_size, num_layers, arguments, max_length, embedding, "encoder")
    pooled = keras.layers.GlobalAveragePooling1D(name="masked_mean")(x, mask=mask)
    logits = keras.layers.Dense(num_classes, name="classifier")(pooled)
    logits = keras.layers.Activation("linear", dtype="float32", name=LOGITS)(logits)
    return keras.Model(tokens, logits, name=name)


def language_model(
    vocabulary_size,
    *,
    num_layers=6,
    d_model=512,
    num_heads=8,
    ff_dim=2048,
    max_length=256,
    dropout=0.1,
    tie_embeddings=True,
    embedding_scale="sqrt",
    positions="sinusoidal",
    merge="add",
    position_dim=None,
    name="language_model",
    **layer_options,
):
    """A decoder-only causal language model (decoder layers without cross-attention).

    Args:
        vocabulary_size: int, vocabulary of the tokens.
        tie_embeddings: bool, use the embedding matrix as the output
            projection. Defaults to True, as GPT models do.
        num_layers, d_model, num_heads, ff_dim, max_length, dropout: as in `transformer`.
        embedding_scale, positions, merge, position_dim, **layer_options: as in `transformer`.
        name: str, name of the model.

    Returns:
        A functional `keras.Model` from int `tokens` `(batch, length)`
        (padded with 0) to float32 next-token logits
        `(batch, length, vocabulary_size)`.

    Example:

    >>> import numpy as np
    >>> model = language_model(100, num_layers=1, d_model=16, num_heads=2,
    ...                        ff_dim=32, max_length=10)
    >>> tuple(model(np.array([[5, 6, 7]])).shape)
    (1, 3, 100)
    """
    embedding = _embedding_options(embedding_scale, positions, merge, position_dim)
    arguments = _layer_arguments(d_model, num_heads, ff_dim, dropout, layer_options)
    tokens = _token_input("tokens")
    mask = PaddingMask(name=padding_mask_name(None))(tokens)
    embedding_layer, x = _embed(tokens, vocabulary_size, d_model, max_length, dropout, embedding, "decoder")
    for i in range(num_layers):
        x = DecoderLayer(name=layer_name("decoder", i), **arguments)(x, mask=mask)
    x = _final_norm(x, arguments, "decoder")
    logits = _logits(x, vocabulary_size, embedding_layer, tie_embeddings)
    return keras.Model(tokens, logits, name=name)
