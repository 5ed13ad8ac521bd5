"""Model FLOPs of an encoder-decoder Transformer training step, and MFU.

Counts the matrix multiplications only, 2 FLOPs per multiply-add, the
convention of the PaLM paper's appendix B ("6N + attention"):

- every kernel of shape `(a, b)` applied to `n` tokens costs `2 * a * b * n`:
  Q, K, V, O and the two feed-forward kernels of each layer, the decoder's
  cross-attention (Q and O on target tokens, K and V on source tokens), and
  the output projection on target tokens;
- attention costs `2 * query_length * key_length * d_model` for `Q K^T`
  and as much for the weighted sum of V, in every layer, counted in full
  (the causal half is not subtracted, as in PaLM);
- a training step costs three forward passes (the backward pass two).

Embedding lookups, biases, layer norms, softmax and the optimizer update
are left out: they are a fraction of a percent for these configurations.
Recomputation is never counted, so this is model FLOPs, not hardware FLOPs.

With equal source and target lengths `n`, every token goes through one
stack, so per (source + target) token this is `6 * N_stack + 12 * L * d * n`
(plus the cross-attention terms), i.e. the familiar `6N + 12 L d n` rule
applied to each stack.
"""

import keras

# Dense bf16 peaks (no sparsity), FLOP/s, from the vendors' data sheets.
# Matched against the device name in this order: the first key found wins.
PEAK_BF16_FLOPS = {
    "H100 PCIe": 756e12,
    "H100 NVL": 835e12,
    "H100": 989e12,  # SXM
    "H200": 989e12,
    "GH200": 989e12,
    "A100": 312e12,
    "L40S": 362e12,
    "L4": 121e12,
}


def matmul_parameters(num_layers, num_decoder_layers, d_model, ff_dim, vocabulary_size):
    """Parameters in matrix-multiply kernels (no embeddings, no biases, no norms).

    Args:
        num_layers: int, encoder layers.
        num_decoder_layers: int, decoder layers.
        d_model: int, model width.
        ff_dim: int, feed-forward hidden width.
        vocabulary_size: int, target vocabulary (the output projection).

    Returns:
        int.

    Example:

    >>> matmul_parameters(1, 1, d_model=4, ff_dim=8, vocabulary_size=10)
    360
    """
    encoder_layer = 4 * d_model * d_model + 2 * d_model * ff_dim
    decoder_layer = 8 * d_model * d_model + 2 * d_model * ff_dim
    return num_layers * encoder_layer + num_decoder_layers * decoder_layer + d_model * vocabulary_size


def forward_flops(num_layers, num_decoder_layers, d_model, ff_dim, vocabulary_size, source_length, target_length):
    """FLOPs of one forward pass of one example (see the module docstring).

    Args:
        num_layers, num_decoder_layers, d_model, ff_dim, vocabulary_size:
            as in `matmul_parameters`.
        source_length: int, encoder tokens per example.
        target_length: int, decoder tokens per example.

    Returns:
        int.

    Example:

    >>> forward_flops(1, 1, d_model=4, ff_dim=8, vocabulary_size=10,
    ...               source_length=3, target_length=2)
    2064
    """
    d, s, t = d_model, source_length, target_length
    encoder = 2 * (4 * d * d + 2 * d * ff_dim) * s + 4 * s * s * d
    decoder = (
        2 * 4 * d * d * t  # self-attention Q, K, V, O
        + 4 * t * t * d  # self-attention scores and weighted values
        + 2 * 2 * d * d * t  # cross-attention Q and O, on target tokens
        + 2 * 2 * d * d * s  # cross-attention K and V, on source tokens
        + 4 * t * s * d  # cross-attention scores and weighted values
        + 2 * 2 * d * ff_dim * t  # feed-forward
    )
    return num_layers * encoder + num_decoder_layers * decoder + 2 * d * vocabulary_size * t


def training_flops(
    num_layers, num_decoder_layers, d_model, ff_dim, vocabulary_size, source_length, target_length, batch_size=1
):
    """FLOPs of one training step: three forward passes of every example.

    Args:
        num_layers, num_decoder_layers, d_model, ff_dim, vocabulary_size,
            source_length, target_length: as in `forward_flops`.
        batch_size: int, examples per step. Defaults to 1.

    Returns:
        int.

    Example:

    >>> training_flops(1, 1, d_model=4, ff_dim=8, vocabulary_size=10,
    ...                source_length=3, target_length=2, batch_size=2)
    12384
    """
    return 3 * batch_size * forward_flops(
        num_layers, num_decoder_layers, d_model, ff_dim, vocabulary_size, source_length, target_length
    )


def mean_training_flops(batch_shapes, num_layers, num_decoder_layers, d_model, ff_dim, vocabulary_size):
    """FLOPs of a training step, averaged over batches of several shapes.

    Bucketed batches differ in rows and lengths, and attention grows with
    the square of the length, so the mean is taken over the batches'
    actual (padded) shapes, counted once per batch.

    Args:
        batch_shapes: dict `{(rows, source_length, target_length): batches}`,
            e.g. a `collections.Counter`.
        num_layers, num_decoder_layers, d_model, ff_dim, vocabulary_size:
            as in `matmul_parameters`.

    Returns:
        float, or None when `batch_shapes` is empty.

    Example:

    >>> mean_training_flops({(2, 3, 2): 1, (1, 3, 2): 1}, 1, 1, 4, 8, 10)  # 1.5 x 3 x 2064
    9288.0
    """
    total = sum(batch_shapes.values())
    if not total:
        return None
    return sum(
        count * training_flops(num_layers, num_decoder_layers, d_model, ff_dim, vocabulary_size, source, target, rows)
        for (rows, source, target), count in batch_shapes.items()
    ) / total


def accelerator_name():
    """The GPU's name as the backend reports it, or None on a CPU.

    Returns:
        str or None.

    Example:

    >>> accelerator_name() is None or isinstance(accelerator_name(), str)
    True
    """
    backend = keras.backend.backend()
    if backend == "torch":
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        return device.device_kind if device.platform == "gpu" else None
    if backend == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            return tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
    return None


def peak_flops(device_name):
    """The dense bf16 peak of a GPU from its name, or None if unknown (or a CPU).

    Args:
        device_name: str, e.g. `"NVIDIA H100 80GB HBM3"`.

    Returns:
        float FLOP/s, or None.

    Example:

    >>> peak_flops("NVIDIA H100 80GB HBM3")
    989000000000000.0
    >>> peak_flops("cpu") is None
    True
    """
    for key, value in PEAK_BF16_FLOPS.items():
        if key.lower() in (device_name or "").lower():
            return float(value)
    return None


def model_flops_utilization(flops_per_step, seconds_per_step, peak):
    """Achieved model FLOP/s over the device's peak (MFU), or None without a peak.

    Args:
        flops_per_step: FLOPs of one training step (`training_flops`).
        seconds_per_step: measured seconds per step.
        peak: the device's peak FLOP/s (`peak_flops`), or None.

    Returns:
        float in [0, 1] for a real measurement, or None.

    Example:

    >>> model_flops_utilization(4e14, 1.0, 1e15)
    0.4
    """
    if not peak:
        return None
    return flops_per_step / seconds_per_step / peak
