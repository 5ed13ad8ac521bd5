"""Attention logits and softmax: the measurements of the logit-scale tutorial.

The variance of `q . k` for random unit-variance vectors (it is `key_dim`),
the entropy, largest weight and Jacobian norm of a softmax, and the logits
of a built model's attention layers on a real batch.
"""

import keras
import numpy as np

from keras_transformer.diagnostics.arrays import to_float64
from keras_transformer.layers.decoder import DecoderLayer
from keras_transformer.layers.encoder import EncoderLayer
from keras_transformer.model_parts import embedding_dropout_name
from keras_transformer.model_parts import layer_name
from keras_transformer.model_parts import padding_mask_name


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
    logits = to_float64(logits)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    weights = np.exp(shifted)
    return weights / weights.sum(axis=-1, keepdims=True)


def softmax_entropy(logits):
    """Entropy (nats) of `softmax(logits)` along the last axis.

    `log(n)` for a uniform row of n logits, 0 for a saturated (one-hot) one.

    Example:

    >>> import math
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


def _layer_inputs(model):
    """`(layer, input, mask)` for every Encoder/DecoderLayer, found by the builders' names.

    The input is the output of the layer before it (or of the stack's
    embedding dropout); the mask is the stack's padding mask, or None.
    """
    names = {layer.name for layer in model.layers}
    found = []
    for stack in ("encoder", "decoder"):
        mask_name = padding_mask_name(stack) if padding_mask_name(stack) in names else padding_mask_name(None)
        mask = model.get_layer(mask_name).output if mask_name in names else None
        previous = embedding_dropout_name(stack)
        index = 0
        while layer_name(stack, index) in names and previous in names:
            layer = model.get_layer(layer_name(stack, index))
            if isinstance(layer, (EncoderLayer, DecoderLayer)):
                found.append((layer, model.get_layer(previous).output, mask))
            previous, index = layer.name, index + 1
    return found


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
    found = _layer_inputs(model)
    if not found:
        raise ValueError(
            f"Model {model.name!r} has no EncoderLayer or DecoderLayer named as the "
            "keras_transformer.models builders name them."
        )
    probe = keras.Model(model.inputs, [t for _, x, mask in found for t in (x, mask) if t is not None])
    received = iter(probe(inputs, training=False))
    result = {}
    for layer, _, mask_tensor in found:
        x = next(received)
        mask = None if mask_tensor is None else next(received)
        if layer.norm_first:
            x = layer.self_attention_norm(x)
        logits = to_float64(layer.self_attention.attention_logits(x))
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
