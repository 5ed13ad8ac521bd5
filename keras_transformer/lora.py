"""Low-rank adaptation (LoRA) of a whole model built from this package's layers.

Keras gives its `Dense`, `EinsumDense` and `Embedding` layers
`enable_lora(rank)`; this package's attention and embedding layers hold
their weights in such layers, so LoRA reaches W_Q, W_K, W_V, W_O and the
token embeddings. `enable_lora` here does what KerasHub's
`Backbone.enable_lora` does for its models: freeze every weight, then add
adapters to the chosen projections of every attention layer.
"""

import keras

from keras_transformer.layers import MultiHeadAttention
from keras_transformer.layers import PositionalEmbedding

# What `enable_lora_on` adapts: attention projections, and the token embeddings.
TARGETS = ("query", "key", "value", "output", "embeddings")


def enable_lora(model, rank, targets=("query", "value"), embeddings=False, lora_alpha=None):
    """Freezes `model` and adds LoRA adapters to its attention projections.

    Every weight of the model stops training; each `MultiHeadAttention`
    gets adapters on `targets` (W_Q and W_V by default, as in the LoRA
    paper and KerasHub), and with `embeddings=True` each
    `PositionalEmbedding`'s token matrix too (with tied embeddings, the
    output projection with it). `fit` then trains the adapters only:
    compile the model after this call. A model saved with adapters stores
    the merged kernels (Keras' `Dense` merges them on save), so it reloads
    as a plain model that translates without knowing it was adapted.

    Args:
        model: a built Keras model containing this package's layers, e.g.
            from `keras_transformer.models.transformer`.
        rank: int, the adapters' rank.
        targets: projections of each attention layer, among "query",
            "key", "value", "output" (see `MultiHeadAttention.enable_lora`).
        embeddings: bool, adapt the token embeddings too.
        lora_alpha: float, the adapters' scale numerator. Defaults to `rank`.

    Returns:
        The layers given adapters.

    Raises:
        ValueError: `model` has none of this package's attention layers.

    Example:

    >>> import keras_transformer as kt
    >>> model = kt.models.transformer(50, 50, num_layers=1, d_model=16,
    ...                               num_heads=2, ff_dim=32, max_length=8)
    >>> adapted = enable_lora(model, rank=2)
    >>> len(adapted), sum(int(w.numpy().size) for w in model.trainable_weights)
    (6, 384)
    """
    layers = model._flatten_layers(include_self=False)  # Keras' own walk (Model.quantize uses it)
    attention_layers = [layer for layer in layers if isinstance(layer, MultiHeadAttention)]
    if not attention_layers:
        raise ValueError(
            f"enable_lora found no keras_transformer MultiHeadAttention in model {model.name!r}; "
            "for other layers call Keras' layer.enable_lora(rank) on each Dense or Embedding."
        )
    for variable in model.trainable_weights:
        variable.trainable = False
    adapted = []
    for attention in attention_layers:
        adapted += attention.enable_lora(rank, lora_alpha=lora_alpha, targets=targets)
    if embeddings:
        for layer in layers:
            if isinstance(layer, PositionalEmbedding):
                layer.enable_lora(rank, lora_alpha=lora_alpha)
                adapted.append(layer.token_embedding)
    return adapted


def enable_lora_on(model, rank, targets, lora_alpha=None):
    """`enable_lora` with the targets named in one list, as `train --lora-targets` gives them.

    Args:
        model: as `enable_lora`.
        rank: int, the adapters' rank.
        targets: names among `TARGETS`; "embeddings" adapts the token
            embeddings, the others each attention layer's projections.
        lora_alpha: float, the adapters' scale numerator. Defaults to `rank`.

    Returns:
        The layers given adapters.

    Example:

    >>> import keras_transformer as kt
    >>> model = kt.models.transformer(50, 50, num_layers=1, d_model=16,
    ...                               num_heads=2, ff_dim=32, max_length=8)
    >>> len(enable_lora_on(model, 2, ["query", "value", "embeddings"]))
    8
    """
    projections = tuple(target for target in targets if target != "embeddings")
    if not projections:
        raise ValueError(f"LoRA targets must name at least one attention projection, got {list(targets)!r}.")
    return enable_lora(model, rank, targets=projections, embeddings="embeddings" in targets, lora_alpha=lora_alpha)


def restart_adapters(model, seed=None):
    """Gives every LoRA adapter of `model` a fresh start: A random, B zero.

    Keras' `Dense` and `Embedding` save LoRA-adapted kernels merged, and
    loading weights into an adapted layer sets both factors to zero, where
    neither gets a gradient again. After such a load (a resumed
    fine-tuning run), this starts new adapters on top of the merged
    kernels; the model computes the same function until they train.

    Args:
        model: a Keras model, some of whose layers have LoRA enabled.
        seed: int, seeds the A factors.

    Returns:
        The number of layers whose adapters were restarted.

    Example:

    >>> import keras_transformer as kt
    >>> model = kt.models.transformer(50, 50, num_layers=1, d_model=16,
    ...                               num_heads=2, ff_dim=32, max_length=8)
    >>> _ = enable_lora(model, rank=2)
    >>> restart_adapters(model, seed=1)
    6
    """
    import keras

    restarted = 0
    for layer in model._flatten_layers(include_self=False):
        if not getattr(layer, "lora_enabled", False):
            continue
        for name, initializer in (("a", keras.initializers.HeUniform(seed=None if seed is None else seed + restarted)),
                                  ("b", keras.initializers.Zeros())):
            kind = "kernel" if hasattr(layer, f"lora_kernel_{name}") else "embeddings"
            variable = getattr(layer, f"lora_{kind}_{name}")
            variable.assign(initializer(variable.shape, variable.dtype))
        restarted += 1
    return restarted


class RestartAdapters(keras.callbacks.Callback):
    """Starts new LoRA adapters once a resumed run's backup is loaded.

    A backup holds merged kernels, and loading one (the trainer's
    `run_folder.EpochBackup` does, as training begins: this callback must
    come after it) zeroes both factors of each adapter (Keras' `Dense`),
    where neither gets a gradient again. New adapters (`restart_adapters`)
    continue from the merged weights.

    Args:
        seed: int, seeds the new A factors.

    Example:

    >>> RestartAdapters(seed=3).seed
    3
    """

    def __init__(self, seed):
        super().__init__()
        self.seed = seed

    def on_train_begin(self, logs=None):
        restart_adapters(self.model, seed=self.seed)
