"""The statistics the tutorials measure, as functions and a Keras callback.

Three groups:

- **Attention logits and softmax**: the variance of `q . k` for random
  unit-variance vectors (it is `key_dim`), the entropy, largest weight and
  Jacobian norm of a softmax, and the logits of a built model's attention
  layers on a real batch.
- **Embeddings**: how large the scaled token vectors are next to the
  positional encodings, and how much of the learned token embeddings lies in
  the subspace the positions use.
- **Gradients**: the gradient norm of each layer of a model on one batch
  (backend-specific code lives here, at the edge, not in the layers).

`DiagnosticsLogger` logs them during `model.fit`; the tutorials call the
functions directly. Everything returns numpy floats or arrays.
"""

import math

import keras
import numpy as np

from keras_transformer.layers.decoder import DecoderLayer
from keras_transformer.layers.encoder import EncoderLayer
from keras_transformer.layers.positional_embedding import PositionalEmbedding


def _numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x), dtype="float64")


def dot_product_variance(key_dim, num_samples=100_000, scale=1.0, seed=0):
    """Variance of `scale * q . k` for q, k with i.i.d. N(0, 1) entries.

    Each product `q_i k_i` has mean 0 and variance 1, so the sum of `key_dim`
    of them has variance `key_dim` (section 3.2.1 of the paper, footnote 4);
    `scale = 1 / sqrt(key_dim)` brings it back to 1.

    Args:
        key_dim: int, length of q and k.
        num_samples: int, independent (q, k) pairs drawn.
        scale: float multiplying the dot products.
        seed: int, numpy seed.

    Returns:
        The sample variance, a float.

    Example:

    >>> round(dot_product_variance(64) / 64, 1)
    1.0
    >>> round(dot_product_variance(64, scale=64 ** -0.5), 1)
    1.0
    """
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((num_samples, key_dim))
    k = rng.standard_normal((num_samples, key_dim))
    return float(np.var(scale * np.einsum("nd,nd->n", q, k)))


def logit_variance_estimates(key_dim, num_queries, num_keys, trials=100, seed=0):
    """Variance of the entries of one random `Q K^T`, estimated `trials` times.

    What people compute to "check" Var(q . k) = key_dim: the variance over
    the entries of a single `(num_queries, num_keys)` logit matrix. The
    entries share rows and columns, so they are correlated, and a small
    matrix gives estimates that scatter far more than its entry count
    suggests.

    Args:
        key_dim: int, width of the rows of Q and K.
        num_queries, num_keys: ints, rows of Q and of K.
        trials: int, independent matrices.
        seed: int, numpy seed.

    Returns:
        Array `(trials,)` of estimated variances, each to compare with
        `key_dim`.

    Example:

    >>> estimates = logit_variance_estimates(64, 256, 256, trials=5)
    >>> bool(np.all(np.abs(estimates / 64 - 1) < 0.25))
    True
    """
    rng = np.random.default_rng(seed)
    estimates = np.empty(trials)
    for t in range(trials):
        q = rng.standard_normal((num_queries, key_dim))
        k = rng.standard_normal((num_keys, key_dim))
        estimates[t] = np.var(q @ k.T)
    return estimates


def _softmax(logits):
    logits = _numpy(logits)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    weights = np.exp(shifted)
    return weights / weights.sum(axis=-1, keepdims=True)


def softmax_entropy(logits):
    """Entropy (nats) of `softmax(logits)` along the last axis.

    `log(n)` for a uniform row of n logits, 0 for a saturated (one-hot) one.

    Example:

    >>> round(float(softmax_entropy(np.zeros(8))), 4) == round(math.log(8), 4)
    True
    """
    weights = _softmax(logits)
    return -(weights * np.log(np.maximum(weights, 1e-30))).sum(axis=-1)


def softmax_max_weight(logits):
    """Largest weight of `softmax(logits)` along the last axis.

    Example:

    >>> float(softmax_max_weight(np.array([0.0, 0.0, 0.0, 0.0])))
    0.25
    """
    return _softmax(logits).max(axis=-1)


def softmax_jacobian_norm(logits):
    """Frobenius norm of the softmax Jacobian `diag(p) - p p^T`, per row.

    It bounds how much gradient flows back through the softmax to its
    logits: `sqrt(n - 1) / n` for a uniform row of n, and towards 0 as
    the softmax saturates on one entry.

    Example:

    >>> round(float(softmax_jacobian_norm(np.zeros(4))), 4)
    0.433
    >>> float(softmax_jacobian_norm(np.array([100.0, 0.0, 0.0]))) < 1e-20
    True
    """
    p = _softmax(logits)
    # ||diag(p) - p p^T||_F^2 = sum p_i^2 - 2 sum p_i^3 + (sum p_i^2)^2
    p2 = (p**2).sum(axis=-1)
    p3 = (p**3).sum(axis=-1)
    return np.sqrt(np.maximum(p2 - 2 * p3 + p2**2, 0.0))


def _attention_logits(attention, x, scale=None):
    """`(batch, heads, length, length)` logits of a self-attention layer on x."""
    (q_kernel, q_bias), (k_kernel, k_bias), _ = attention._qkv_parts()
    q = attention._project(x, q_kernel, q_bias, attention.key_dim)
    k = attention._project(x, k_kernel, k_bias, attention.key_dim)
    logits = keras.ops.einsum("btnh,bsnh->bnts", q, k)
    return _numpy(logits) * (attention.scale if scale is None else scale)


def _residual_layers(model):
    return [
        layer for layer in model.layers if isinstance(layer, (EncoderLayer, DecoderLayer))
    ]


def attention_logits(model, inputs):
    """Self-attention logits of every encoder and decoder layer of a model.

    The logits are what the softmax sees: `scale * q . k` with the layer's
    own projections and `logit_scale`, computed on the inputs each layer
    receives inside the model (after its pre-LN norm when `norm_first`).
    Positions a padding or causal mask hides are set to NaN, so statistics
    over `np.nanstd` and friends count only logits the model uses.
    Cross-attention is not included.

    Args:
        model: a model from `kt.models` whose layers are `EncoderLayer` or
            `DecoderLayer` instances.
        inputs: a batch the model accepts (dict of token arrays).

    Returns:
        A dict `{layer name: float array (batch, heads, length, length)}`.

    Example:

    >>> import keras_transformer as kt
    >>> model = kt.models.transformer(50, 50, num_layers=1, d_model=16,
    ...                               num_heads=2, ff_dim=32, max_length=8)
    >>> batch = {"encoder_tokens": np.array([[5, 6, 7, 0]]),
    ...          "decoder_tokens": np.array([[2, 9, 0]])}
    >>> logits = attention_logits(model, batch)
    >>> sorted(logits), logits["decoder_layer_0"].shape
    (['decoder_layer_0', 'encoder_layer_0'], (1, 2, 3, 3))
    """
    layers = _residual_layers(model)
    if not layers:
        raise ValueError(f"Model {model.name!r} has no EncoderLayer or DecoderLayer.")
    # Each layer's first call in the functional graph: its input and mask.
    arguments = [layer._inbound_nodes[0].arguments for layer in layers]
    tensors = [(a.args[0], a.kwargs.get("mask")) for a in arguments]
    probe = keras.Model(
        model.inputs, [t for pair in tensors for t in pair if t is not None]
    )
    received = iter(probe(inputs, training=False))
    result = {}
    for layer, (_, mask_tensor) in zip(layers, tensors):
        x = next(received)
        mask = None if mask_tensor is None else next(received)
        if layer.norm_first:
            x = layer.self_attention_norm(x)
        logits = _attention_logits(layer.self_attention, x)
        visible = np.ones(logits.shape, bool)
        if mask is not None:
            keep = keras.ops.convert_to_numpy(mask).astype(bool)
            visible &= keep[:, None, :, None] & keep[:, None, None, :]
        if isinstance(layer, DecoderLayer):
            length = logits.shape[-1]
            visible &= np.tril(np.ones((length, length), bool))
        result[layer.name] = np.where(visible, logits, np.nan)
    return result


def attention_statistics(model, inputs):
    """Logit std, softmax entropy and largest weight for each attention layer.

    Args:
        model: as for `attention_logits`.
        inputs: a batch the model accepts.

    Returns:
        A dict `{layer name: {"logit_std", "entropy", "max_weight"}}`, the
        last two averaged over the query positions that are not padding.

    Example:

    >>> import keras_transformer as kt
    >>> model = kt.models.transformer(50, 50, num_layers=1, d_model=16,
    ...                               num_heads=2, ff_dim=32, max_length=8)
    >>> batch = {"encoder_tokens": np.array([[5, 6, 7, 0]]),
    ...          "decoder_tokens": np.array([[2, 9, 0]])}
    >>> stats = attention_statistics(model, batch)["encoder_layer_0"]
    >>> sorted(stats)
    ['entropy', 'logit_std', 'max_weight']
    """
    result = {}
    for name, logits in attention_logits(model, inputs).items():
        rows = logits.reshape(-1, logits.shape[-1])
        rows = rows[~np.all(np.isnan(rows), axis=-1)]
        masked = np.where(np.isnan(rows), -np.inf, rows)
        result[name] = {
            "logit_std": float(np.nanstd(rows)),
            "entropy": float(softmax_entropy(masked).mean()),
            "max_weight": float(softmax_max_weight(masked).mean()),
        }
    return result


def _position_table(layer):
    if layer.positions == "learned":
        return _numpy(layer.position_embeddings)
    return np.asarray(layer._sinusoids, dtype="float64")


def embedding_position_ratio(layer):
    """Mean norm of the scaled token vectors over that of the position vectors.

    With the default init (token std `d_model ** -0.5`) a token vector has
    norm about 1 and a sinusoidal position vector `sqrt(d_model / 2)`:
    without the `sqrt(d_model)` factor positions drown the tokens (ratio
    `sqrt(2 / d_model)`), with it the two are comparable (about `sqrt(2)`).

    Args:
        layer: a built `kt.layers.PositionalEmbedding`.

    Returns:
        A float.

    Example:

    >>> import keras_transformer as kt
    >>> layer = kt.layers.PositionalEmbedding(1000, 512, max_length=64)
    >>> layer.build()
    >>> round(embedding_position_ratio(layer), 1)
    1.4
    """
    tokens = _numpy(layer.embeddings) * layer.scale_factor
    positions = _position_table(layer)
    token_norm = np.linalg.norm(tokens, axis=-1).mean()
    return float(token_norm / np.linalg.norm(positions, axis=-1).mean())


def _orthonormal_basis(matrix, rank):
    """The top-`rank` right singular vectors of `matrix`, `(width, rank)`."""
    _, _, vt = np.linalg.svd(matrix, full_matrices=False)
    return vt[:rank].T


def principal_angles(a, b):
    """Principal angles (radians, ascending) between the column spans of a and b.

    Example:

    >>> a = np.eye(4)[:, :2]
    >>> np.round(principal_angles(a, np.eye(4)[:, 1:3]), 4).tolist()
    [0.0, 1.5708]
    """
    qa, _ = np.linalg.qr(_numpy(a))
    qb, _ = np.linalg.qr(_numpy(b))
    cosines = np.linalg.svd(qa.T @ qb, compute_uv=False)
    return np.arccos(np.clip(cosines, -1.0, 1.0))


def positional_subspace_energy(layer, rank=None):
    """Share of the token embeddings' energy inside the positions' subspace.

    The position table (`max_length` rows) spans a subspace of the
    `d_model`-wide space; with `merge="add"` the tokens share that space.
    This is the fraction of the (mean-centred) scaled token vectors' squared
    norm that lies in the top-`rank` principal subspace of the position
    vectors. A random subspace of that rank would hold `rank / d_model`.

    Args:
        layer: a built `kt.layers.PositionalEmbedding` with `merge="add"`.
        rank: dimension of the position subspace; defaults to the number of
            singular values that carry 99% of the positions' energy.

    Returns:
        A dict with `energy`, `chance` (`rank / d_model`) and `rank`.

    Example:

    >>> import keras_transformer as kt
    >>> layer = kt.layers.PositionalEmbedding(500, 64, max_length=32)
    >>> layer.build()
    >>> result = positional_subspace_energy(layer, rank=16)
    >>> result["chance"], abs(result["energy"] - 0.25) < 0.1
    (0.25, True)
    """
    if layer.merge != "add":
        raise ValueError(
            "positional_subspace_energy needs merge='add': with 'concat' "
            "tokens and positions occupy separate features by construction."
        )
    positions = _position_table(layer)
    if rank is None:
        singular = np.linalg.svd(positions, compute_uv=False) ** 2
        rank = int(np.searchsorted(np.cumsum(singular) / singular.sum(), 0.99) + 1)
    basis = _orthonormal_basis(positions, rank)
    tokens = _numpy(layer.embeddings) * layer.scale_factor
    tokens = tokens - tokens.mean(axis=0)
    inside = np.linalg.norm(tokens @ basis) ** 2
    return {
        "energy": float(inside / np.linalg.norm(tokens) ** 2),
        "chance": rank / layer.d_model,
        "rank": rank,
    }


def _owners(model):
    """Maps each trainable variable's id to the top-level layer holding it."""
    owners = {}
    for layer in model.layers:
        for variable in layer.trainable_weights:
            owners.setdefault(id(variable), layer.name)
    return owners


def gradient_norms(model, inputs, targets, loss=None):
    """The gradient norm of each layer's weights on one batch.

    Uses the backend's own autodiff (`tf.GradientTape`, `jax.grad`, torch's
    `backward`); the weights are not changed.

    Args:
        model: a built Keras model.
        inputs: a batch the model accepts.
        targets: the labels for `loss`.
        loss: a Keras loss; defaults to the model's compiled loss.

    Returns:
        A dict `{layer name: global L2 norm of its weights' gradients}` for
        the layers with trainable weights.

    Example:

    >>> import keras_transformer as kt
    >>> model = kt.models.transformer(50, 50, num_layers=1, d_model=16,
    ...                               num_heads=2, ff_dim=32, max_length=8)
    >>> batch = {"encoder_tokens": np.array([[5, 6, 7, 0]]),
    ...          "decoder_tokens": np.array([[2, 9, 4]])}
    >>> norms = gradient_norms(model, batch, np.array([[9, 4, 3]]),
    ...                        kt.training.MaskedSparseCrossentropy())
    >>> all(value > 0 for value in norms.values()), "decoder_layer_0" in norms
    (True, True)
    """
    loss = loss or model.loss
    if loss is None:
        raise ValueError("gradient_norms needs a loss: pass `loss` or compile the model.")
    loss = keras.losses.get(loss)
    variables = model.trainable_variables
    grads = _gradients(model, variables, inputs, targets, loss)
    owners = _owners(model)
    squares = {}
    for variable, grad in zip(variables, grads):
        name = owners.get(id(variable), "other")
        value = 0.0 if grad is None else float(np.sum(_numpy(grad) ** 2))
        squares[name] = squares.get(name, 0.0) + value
    return {name: math.sqrt(value) for name, value in squares.items()}


def _gradients(model, variables, inputs, targets, loss):
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            value = loss(targets, model(inputs, training=False))
        return tape.gradient(value, variables)
    if backend == "jax":
        import jax

        trainable = [v.value for v in model.trainable_variables]
        frozen = [v.value for v in model.non_trainable_variables]

        def compute(trainable_values):
            outputs, _ = model.stateless_call(trainable_values, frozen, inputs, training=False)
            return loss(targets, outputs)

        return jax.grad(compute)(trainable)
    if backend == "torch":
        model.zero_grad()
        value = loss(targets, model(inputs, training=False))
        value.backward()
        grads = [v.value.grad for v in variables]
        model.zero_grad()
        return grads
    raise NotImplementedError(f"gradient_norms does not support the {backend!r} backend.")


def embedding_layers(model):
    """The `PositionalEmbedding` layers of a model, by name.

    Example:

    >>> import keras_transformer as kt
    >>> model = kt.models.transformer(50, 50, num_layers=1, d_model=16,
    ...                               num_heads=2, ff_dim=32, max_length=8)
    >>> sorted(embedding_layers(model))
    ['decoder_embedding', 'encoder_embedding']
    """
    return {
        layer.name: layer for layer in model.layers if isinstance(layer, PositionalEmbedding)
    }


class DiagnosticsLogger(keras.callbacks.Callback):
    """Logs attention, embedding and gradient statistics during `fit`.

    On a fixed probe batch, every `every_n_batches` training batches and at
    the end of each epoch, it measures:

    - `attention_logit_std/<layer>`: std of the self-attention logits;
    - `embedding_position_ratio/<layer>`: scaled-token over position norm;
    - `gradient_norm/<layer>`: gradient norm of each layer's weights.

    Each batch measurement is appended to `history` (a list of dicts with a
    `step` key). The epoch measurement is added to the epoch's `logs`, so
    callbacks after this one in the list (`keras.callbacks.TensorBoard`,
    `CSVLogger`, `History`) record it: put this callback first.

    Args:
        inputs: a probe batch the model accepts.
        targets: the probe batch's labels.
        loss: a Keras loss for the gradients; defaults to the compiled one.
        every_n_batches: int or None; None measures at epoch ends only.
        gradients: bool, also measure gradient norms (one extra forward and
            backward pass per measurement).

    Example:

    >>> import keras_transformer as kt
    >>> model = kt.models.transformer(50, 50, num_layers=1, d_model=16,
    ...                               num_heads=2, ff_dim=32, max_length=8)
    >>> model.compile("adam", kt.training.MaskedSparseCrossentropy())
    >>> x = {"encoder_tokens": np.array([[5, 6, 7, 0]] * 4),
    ...      "decoder_tokens": np.array([[2, 9, 4]] * 4)}
    >>> y = np.array([[9, 4, 3]] * 4)
    >>> logger = DiagnosticsLogger(x, y, every_n_batches=1)
    >>> history = model.fit(x, y, batch_size=2, epochs=1, verbose=0,
    ...                     callbacks=[logger])
    >>> [entry["step"] for entry in logger.history]
    [1, 2]
    >>> "gradient_norm/decoder_layer_0" in history.history
    True
    """

    def __init__(self, inputs, targets, loss=None, every_n_batches=None, gradients=True):
        super().__init__()
        self.inputs = inputs
        self.targets = targets
        self.loss = loss
        self.every_n_batches = every_n_batches
        self.gradients = gradients
        self.history = []
        self._step = 0

    def measure(self):
        """The statistics on the probe batch, as a flat dict."""
        model = self.model
        stats = {}
        for name, values in attention_statistics(model, self.inputs).items():
            stats[f"attention_logit_std/{name}"] = values["logit_std"]
        for name, layer in embedding_layers(model).items():
            stats[f"embedding_position_ratio/{name}"] = embedding_position_ratio(layer)
        if self.gradients:
            norms = gradient_norms(model, self.inputs, self.targets, self.loss)
            for name, value in norms.items():
                stats[f"gradient_norm/{name}"] = value
        return stats

    def on_train_batch_end(self, batch, logs=None):
        self._step += 1
        if self.every_n_batches and self._step % self.every_n_batches == 0:
            self.history.append({"step": self._step, **self.measure()})

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs.update(self.measure())
