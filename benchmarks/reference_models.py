"""One encoder-decoder configuration, built three ways, for side-by-side timing.

- `"keras_transformer"`: this package, `keras_transformer.models.transformer`.
- `"keras_hub"`: KerasHub's `TransformerEncoder` / `TransformerDecoder` on a
  token embedding plus `SinePositionEncoding` (sinusoidal and parameter-free
  like ours; `TokenAndPositionEmbedding` would add learned positions).
- `"tutorial"`: the TensorFlow "Neural machine translation with a
  Transformer" tutorial's blocks on `keras.layers.MultiHeadAttention`
  (self-attention / cross-attention / feed-forward, each `Add` then
  `LayerNormalization`, masks from `Embedding(mask_zero=True)`), written
  with the functional API. The key padding mask is also passed explicitly
  (see `_tutorial_attention` for why).

All three take `{"encoder_tokens", "decoder_tokens"}` (int, padded with 0)
and return float32 logits `(batch, target_length, vocabulary_size)`, so one
loss, one optimizer and one data set drive them all. Layer names follow one
convention (`encoder_layer_{i}`, `decoder_layer_{i}`) so the encoder can be
cut out for inference timing.

Kept comparable on purpose: heads of `d_model // num_heads` (the tutorial
passes `key_dim=d_model`, which multiplies the attention parameters by
`num_heads`), no learned positions, an untied output projection. Not
equalized, because it is what each implementation does: `dropout` is
residual dropout in this package (attention weights are not dropped, so the
fused attention kernel stays usable), while KerasHub's single `dropout` and
the tutorial's `MultiHeadAttention(dropout=...)` also drop attention weights,
which moves them onto the explicit softmax path during training.
"""

import math

import keras
import numpy as np
from keras import ops

import keras_transformer as kt
from keras_transformer.decoding import compile_function

IMPLEMENTATIONS = ("keras_transformer", "keras_hub", "tutorial")

# The configurations; `quick` is for smoke tests only.
CONFIGS = {
    "quick": dict(num_layers=1, num_decoder_layers=1, d_model=32, num_heads=2, ff_dim=64, vocabulary_size=256),
    "small": dict(num_layers=4, num_decoder_layers=4, d_model=256, num_heads=4, ff_dim=1024, vocabulary_size=8000),
    "base": dict(num_layers=6, num_decoder_layers=6, d_model=512, num_heads=8, ff_dim=2048, vocabulary_size=8000),
    "big": dict(num_layers=6, num_decoder_layers=6, d_model=1024, num_heads=16, ff_dim=4096, vocabulary_size=8000),
}


def _inputs():
    return {
        "encoder_tokens": keras.Input(shape=(None,), dtype="int32", name="encoder_tokens"),
        "decoder_tokens": keras.Input(shape=(None,), dtype="int32", name="decoder_tokens"),
    }


def _float32_logits(x, vocabulary_size):
    logits = keras.layers.Dense(vocabulary_size, name="output_projection")(x)
    return keras.layers.Activation("linear", dtype="float32", name="logits")(logits)


def _keras_transformer_model(config, max_length, dropout, fused_qkv):
    return kt.models.transformer(
        config["vocabulary_size"],
        config["vocabulary_size"],
        num_layers=config["num_layers"],
        num_decoder_layers=config["num_decoder_layers"],
        d_model=config["d_model"],
        num_heads=config["num_heads"],
        ff_dim=config["ff_dim"],
        max_length=max_length,
        dropout=dropout,
        fused_qkv=fused_qkv,
        name="keras_transformer",
    )


def _keras_hub_model(config, max_length, dropout):
    import keras_hub

    inputs = _inputs()
    d_model, vocabulary_size = config["d_model"], config["vocabulary_size"]

    def embed(tokens, prefix):
        x = keras.layers.Embedding(vocabulary_size, d_model, name=f"{prefix}_token_embedding")(tokens)
        x = x + keras_hub.layers.SinePositionEncoding(name=f"{prefix}_position_encoding")(x)
        return keras.layers.Dropout(dropout, name=f"{prefix}_embedding_dropout")(x)

    encoder_mask = ops.not_equal(inputs["encoder_tokens"], 0)
    decoder_mask = ops.not_equal(inputs["decoder_tokens"], 0)
    x = embed(inputs["encoder_tokens"], "encoder")
    for i in range(config["num_layers"]):
        x = keras_hub.layers.TransformerEncoder(
            config["ff_dim"], config["num_heads"], dropout=dropout, name=f"encoder_layer_{i}"
        )(x, padding_mask=encoder_mask)
    y = embed(inputs["decoder_tokens"], "decoder")
    for i in range(config["num_decoder_layers"]):
        y = keras_hub.layers.TransformerDecoder(
            config["ff_dim"], config["num_heads"], dropout=dropout, name=f"decoder_layer_{i}"
        )(y, x, decoder_padding_mask=decoder_mask, encoder_padding_mask=encoder_mask)
    return keras.Model(inputs, _float32_logits(y, vocabulary_size), name="keras_hub")


def _sinusoidal_table(length, depth):
    # The tutorial's table: sines in the first half of the depth, cosines in the second.
    angles = np.arange(length)[:, None] * (1.0 / 10000 ** (np.arange(depth // 2)[None, :] / (depth // 2)))
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=-1).astype("float32")


class TutorialPositionalEmbedding(keras.layers.Layer):
    """The tutorial's `PositionalEmbedding`: `sqrt(d_model) * E[token] + P[position]`.

    Token id 0 is padding and produces a Keras mask, which the tutorial
    relies on for every attention mask.

    Args:
        vocabulary_size: int, number of token ids.
        d_model: int, embedding width (even).
        max_length: int, size of the position table.
        **kwargs: other `keras.layers.Layer` arguments.

    Example:

    >>> layer = TutorialPositionalEmbedding(10, 4, max_length=8)
    >>> tuple(layer(np.array([[3, 4, 0]])).shape)
    (1, 3, 4)
    """

    def __init__(self, vocabulary_size, d_model, max_length, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size, self.d_model, self.max_length = vocabulary_size, d_model, max_length
        self.embedding = keras.layers.Embedding(vocabulary_size, d_model, mask_zero=True, dtype=self.dtype_policy)
        self.table = _sinusoidal_table(max_length, d_model)

    def build(self, inputs_shape):
        self.embedding.build(inputs_shape)
        self.built = True

    def call(self, tokens):
        x = self.embedding(tokens) * math.sqrt(self.d_model)
        table = ops.convert_to_tensor(self.table, dtype=x.dtype)
        return x + table[None, : ops.shape(tokens)[1]]

    def compute_output_shape(self, tokens_shape):
        return tuple(tokens_shape) + (self.d_model,)

    def compute_mask(self, tokens, mask=None):
        return ops.not_equal(tokens, 0)

    def get_config(self):
        config = super().get_config()
        config.update(vocabulary_size=self.vocabulary_size, d_model=self.d_model, max_length=self.max_length)
        return config


def _tutorial_attention(x, context, context_mask, config, dropout, causal, name):
    # `value_mask` is passed explicitly, unlike in the tutorial: Keras 3's
    # MultiHeadAttention clears the Keras mask of its input tensors, so at
    # run time the residual `Add([x, attention])` loses it and every later
    # layer would attend to padding.
    attention = keras.layers.MultiHeadAttention(
        num_heads=config["num_heads"],
        key_dim=config["d_model"] // config["num_heads"],
        dropout=dropout,
        name=f"{name}_attention",
    )(query=x, value=context, key=context, value_mask=context_mask, use_causal_mask=causal)
    x = keras.layers.Add(name=f"{name}_add")([x, attention])
    return keras.layers.LayerNormalization(name=f"{name}_norm")(x)


def _tutorial_feed_forward(x, config, dropout, name):
    y = keras.layers.Dense(config["ff_dim"], activation="relu", name=f"{name}_hidden")(x)
    y = keras.layers.Dense(config["d_model"], name=f"{name}_output")(y)
    y = keras.layers.Dropout(dropout, name=f"{name}_dropout")(y)
    x = keras.layers.Add(name=f"{name}_add")([x, y])
    # The block's last layer carries its name, so the encoder can be cut out.
    return keras.layers.LayerNormalization(name=name)(x)


def _tutorial_model(config, max_length, dropout):
    inputs = _inputs()
    d_model, vocabulary_size = config["d_model"], config["vocabulary_size"]
    encoder_mask = ops.not_equal(inputs["encoder_tokens"], 0)
    decoder_mask = ops.not_equal(inputs["decoder_tokens"], 0)
    x = TutorialPositionalEmbedding(vocabulary_size, d_model, max_length, name="encoder_embedding")(
        inputs["encoder_tokens"]
    )
    x = keras.layers.Dropout(dropout, name="encoder_embedding_dropout")(x)
    for i in range(config["num_layers"]):
        x = _tutorial_attention(x, x, encoder_mask, config, dropout, False, f"encoder_{i}_self")
        x = _tutorial_feed_forward(x, config, dropout, f"encoder_layer_{i}")
    y = TutorialPositionalEmbedding(vocabulary_size, d_model, max_length, name="decoder_embedding")(
        inputs["decoder_tokens"]
    )
    y = keras.layers.Dropout(dropout, name="decoder_embedding_dropout")(y)
    for i in range(config["num_decoder_layers"]):
        y = _tutorial_attention(y, y, decoder_mask, config, dropout, True, f"decoder_{i}_self")
        y = _tutorial_attention(y, x, encoder_mask, config, dropout, False, f"decoder_{i}_cross")
        y = _tutorial_feed_forward(y, config, dropout, f"decoder_layer_{i}")
    return keras.Model(inputs, _float32_logits(y, vocabulary_size), name="tutorial")


def build_model(implementation, config, max_length, dropout=0.1, fused_qkv=True):
    """Builds the encoder-decoder `config` with one of `IMPLEMENTATIONS`.

    Args:
        implementation: `"keras_transformer"`, `"keras_hub"` or `"tutorial"`.
        config: dict with `num_layers`, `num_decoder_layers`, `d_model`,
            `num_heads`, `ff_dim`, `vocabulary_size` (see `CONFIGS`), or the
            name of one of `CONFIGS`.
        max_length: int, longest sequence (position tables are this long).
        dropout: float. Defaults to 0.1 (the paper's); see the module
            docstring for where each implementation applies it.
        fused_qkv: bool, one Q/K/V kernel in this package's attention
            (ignored by the others). Defaults to True.

    Returns:
        A functional `keras.Model` from `{"encoder_tokens",
        "decoder_tokens"}` to float32 logits.

    Example:

    >>> batch = {"encoder_tokens": np.array([[5, 6, 7, 0]]),
    ...          "decoder_tokens": np.array([[1, 9, 0]])}
    >>> [tuple(build_model(name, "quick", 16)(batch).shape) for name in IMPLEMENTATIONS]
    [(1, 3, 256), (1, 3, 256), (1, 3, 256)]
    """
    if isinstance(config, str):
        config = CONFIGS[config]
    if implementation == "keras_transformer":
        return _keras_transformer_model(config, max_length, dropout, fused_qkv)
    if implementation == "keras_hub":
        return _keras_hub_model(config, max_length, dropout)
    if implementation == "tutorial":
        return _tutorial_model(config, max_length, dropout)
    raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got implementation={implementation!r}.")


def numbered_layers(model, prefix):
    """The layers named `{prefix}{i}`, in the order of `i`.

    Args:
        model: a `keras.Model`.
        prefix: str, e.g. `"decoder_layer_"`.

    Returns:
        list of layers.

    Example:

    >>> [layer.name for layer in numbered_layers(build_model("tutorial", "quick", 16), "encoder_layer_")]
    ['encoder_layer_0']
    """
    layers = [
        layer for layer in model.layers
        if layer.name.startswith(prefix) and layer.name[len(prefix):].isdigit()
    ]
    return sorted(layers, key=lambda layer: int(layer.name[len(prefix):]))


def encoder_model(model):
    """The encoder half of a `build_model` model, for inference timing.

    Args:
        model: a model from `build_model`.

    Returns:
        A `keras.Model` from int `encoder_tokens` to the encoder outputs
        `(batch, source_length, d_model)`.

    Example:

    >>> model = build_model("tutorial", "quick", 16)
    >>> tuple(encoder_model(model)(np.array([[5, 6, 0]])).shape)
    (1, 3, 32)
    """
    names = {layer.name for layer in model.layers}
    last = model.get_layer("encoder_final_norm") if "encoder_final_norm" in names else numbered_layers(
        model, "encoder_layer_"
    )[-1]
    return keras.Model(model.input["encoder_tokens"], last.output, name=f"{model.name}_encoder")


class KerasHubCachedDecoder:
    """KerasHub's own KV cache behind the interface of `keras_transformer.decoding.CachedDecoder`.

    `TransformerDecoder` takes a `self_attention_cache` with an update
    index, and a `cross_attention_cache` that it fills when given update
    index 0 and reuses when given None. So `greedy_search` runs unchanged on
    a KerasHub model built by `build_model("keras_hub", ...)`.

    Args:
        model: a `build_model("keras_hub", ...)` model.
        max_length: int, cache size (longest target).
        jit_compile: bool, compile the step (`jax.jit` on JAX,
            `tf.function(jit_compile=True)` on TensorFlow, eager on torch).

    Example:

    >>> from keras_transformer.decoding import greedy_search
    >>> model = build_model("keras_hub", "quick", 16)
    >>> greedy_search(KerasHubCachedDecoder(model, 8), np.array([[5, 6, 0]]),
    ...               max_new_tokens=4, stop_at_end=False).shape
    (1, 4)
    """

    def __init__(self, model, max_length, jit_compile=False):
        self.model = model
        self.max_length = max_length
        self.encoder = encoder_model(model)
        self.token_embedding = model.get_layer("decoder_token_embedding")
        self.position_encoding = model.get_layer("decoder_position_encoding")
        self.layers = numbered_layers(model, "decoder_layer_")
        self.output_projection = model.get_layer("output_projection")
        self.jit_compile = jit_compile
        self._step = compile_function(self._step_tensors) if jit_compile else self._step_tensors

    def _cache_shape(self, batch, length):
        layer = self.layers[0]
        return (batch, 2, length, layer.num_heads, self.token_embedding.output_dim // layer.num_heads)

    def start(self, encoder_tokens):
        """Encodes the source and fills the cross-attention caches once."""
        from keras_transformer.decoding import DecoderState

        tokens = ops.convert_to_tensor(encoder_tokens, "int32")
        outputs = self.encoder(tokens)
        mask = ops.not_equal(tokens, 0)
        batch, source_length = ops.shape(tokens)
        dtype = outputs.dtype
        x = ops.zeros((batch, 1, self.token_embedding.output_dim), dtype)
        cross_caches = []
        for layer in self.layers:
            _, _, cross_cache = layer(
                x,
                outputs,
                encoder_padding_mask=mask,
                # Length 2, not 1: a softmax over one key makes Keras warn.
                self_attention_cache=ops.zeros(self._cache_shape(batch, 2), dtype),
                self_attention_cache_update_index=0,
                cross_attention_cache=ops.zeros(self._cache_shape(batch, source_length), dtype),
                cross_attention_cache_update_index=0,
            )
            cross_caches.append(cross_cache)
        caches = [ops.zeros(self._cache_shape(batch, self.max_length), dtype) for _ in self.layers]
        return DecoderState(caches=caches, cross_caches=cross_caches, encoder_mask=mask)

    def next_logits(self, tokens, index, state):
        """Logits after `tokens` at position `index`; as `CachedDecoder.next_logits`."""
        tokens = ops.convert_to_tensor(tokens, "int32")
        index = ops.convert_to_tensor(index, "int32")
        logits, caches = self._step(tokens, index, state.caches, state.cross_caches, state.encoder_mask)
        return logits, state._replace(caches=list(caches))

    def _step_tensors(self, tokens, index, caches, cross_caches, encoder_mask):
        x = self.token_embedding(tokens)
        x = x + self.position_encoding(x, start_index=index)
        updated = []
        for layer, cache, cross_cache in zip(self.layers, caches, cross_caches):
            x, cache, _ = layer(
                x,
                # Only the shape of the encoder sequence is read when the
                # cross-attention cache is reused.
                cross_cache[:, 0, :, 0, :1],
                encoder_padding_mask=encoder_mask,
                self_attention_cache=cache,
                self_attention_cache_update_index=index,
                cross_attention_cache=cross_cache,
                cross_attention_cache_update_index=None,
            )
            updated.append(cache)
        return ops.cast(self.output_projection(x)[:, -1], "float32"), updated


def parameter_counts(config, max_length=512, dropout=0.1):
    """Trainable parameters of `config` built each way.

    Args:
        config: a dict or the name of one of `CONFIGS`.
        max_length: int, as in `build_model`.
        dropout: float, as in `build_model`.

    Returns:
        dict `{implementation: parameter count}`.

    Example:

    >>> counts = parameter_counts("quick")
    >>> sorted(counts) == sorted(IMPLEMENTATIONS)
    True
    """
    counts = {}
    for implementation in IMPLEMENTATIONS:
        model = build_model(implementation, config, max_length, dropout)
        counts[implementation] = int(sum(np.prod(w.shape) for w in model.trainable_weights))
    return counts


if __name__ == "__main__":
    for name in ("small", "base", "big"):
        print(name, parameter_counts(name))
