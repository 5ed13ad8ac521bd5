"""The masked loss and accuracy of the paper's recipe: padding labels never count.

Backend-agnostic (`keras.ops` only) and serializable, so a model
compiled with them saves and reloads as `.keras`.
"""

import keras
from keras import ops

_PACKAGE = "keras_transformer"


def _token_mask(y_true, padding_id):
    return ops.cast(ops.not_equal(y_true, padding_id), "float32")


def _global_token_count(count):
    """The real-token count of the whole global batch.

    Under `tf.distribute` each replica sees a slice of the global batch,
    Keras sums the replicas' gradients and reports the mean of their losses
    times the number of replicas. A replica's token sum divided by the
    global count, not its own, is then exactly its share: the gradients are
    those of one device however the real tokens split, and so is the
    reported loss when the replicas get as many rows each (the trainer's
    batches ensure it). Elsewhere (one device, JAX's global arrays, torch) `count` is
    already the global count and comes back as is.
    """
    if keras.backend.backend() != "tensorflow":
        return count
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return count
    # stop_gradient: the all-reduce must not get a gradient all-reduce of its
    # own, which the replicas could issue in different orders.
    return context.all_reduce("sum", tf.stop_gradient(count))


@keras.saving.register_keras_serializable(package=_PACKAGE)
class MaskedSparseCrossentropy(keras.losses.Loss):
    """Token-level cross-entropy from logits that ignores padding labels.

    The mean is over real (non-padding) target tokens of the batch, so a
    batch's loss does not depend on how much padding it carries; under
    `tf.distribute` it is over the real tokens of the global batch, as on
    one device. Every real token weighs the same: `sample_weight` is
    refused, not silently mixed in. Label smoothing mixes the one-hot target with the uniform distribution over
    the vocabulary (section 5.4 of the paper uses 0.1), computed without
    materializing one-hot labels.

    Args:
        label_smoothing: float in [0, 1). Defaults to 0.
        padding_id: int, label id to ignore. Defaults to 0.
        name: str. Defaults to "masked_sparse_crossentropy".

    Example:

    >>> import numpy as np
    >>> loss = MaskedSparseCrossentropy()
    >>> labels = np.array([[1, 2, 0]])
    >>> logits = np.zeros((1, 3, 4), "float32")
    >>> round(float(loss(labels, logits)), 4)  # log(4), padding ignored
    1.3863
    """

    def __init__(self, label_smoothing=0.0, padding_id=0, name="masked_sparse_crossentropy", **kwargs):
        super().__init__(name=name, **kwargs)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got label_smoothing={label_smoothing!r}.")
        self.label_smoothing = float(label_smoothing)
        self.padding_id = int(padding_id)

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        log_probs = ops.log_softmax(ops.cast(y_pred, "float32"), axis=-1)
        target = -ops.squeeze(ops.take_along_axis(log_probs, y_true[..., None], axis=-1), axis=-1)
        if self.label_smoothing:
            uniform = -ops.mean(log_probs, axis=-1)
            target = (1.0 - self.label_smoothing) * target + self.label_smoothing * uniform
        mask = _token_mask(y_true, self.padding_id)
        # Selected, not multiplied: padded positions carry no meaning, and a
        # non-finite value there must not reach the loss (NaN * 0 is NaN).
        target = ops.where(mask > 0, target, ops.zeros_like(target))
        return ops.sum(target) / ops.maximum(_global_token_count(ops.sum(mask)), 1.0)

    def __call__(self, y_true, y_pred, sample_weight=None):
        # `call` already returns the mean over real tokens. Keras' reduction
        # would only rescale it: by the Keras mask of `y_pred` when there is
        # one, and under tf.distribute by 1 / replicas on that path but not
        # on the other, which would change the loss with the model's options.
        if sample_weight is not None:
            raise ValueError(
                "MaskedSparseCrossentropy weighs every real token equally and does not take "
                "sample_weight; padding labels (padding_id) are what it leaves out."
            )
        with keras.name_scope(self.name):
            return self.call(y_true, y_pred)

    def get_config(self):
        config = super().get_config()
        config.update({"label_smoothing": self.label_smoothing, "padding_id": self.padding_id})
        return config


@keras.saving.register_keras_serializable(package=_PACKAGE)
class MaskedAccuracy(keras.metrics.Metric):
    """Fraction of real (non-padding) target tokens whose argmax is correct.

    Args:
        padding_id: int, label id to ignore. Defaults to 0.
        name: str. Defaults to "masked_accuracy".

    Example:

    >>> import numpy as np
    >>> metric = MaskedAccuracy()
    >>> logits = np.eye(3, dtype="float32")[None]  # predicts 0, 1, 2
    >>> metric.update_state(np.array([[1, 1, 0]]), logits)
    >>> float(metric.result())  # 2 real tokens, position 1 right
    0.5
    """

    def __init__(self, padding_id=0, name="masked_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.padding_id = int(padding_id)
        self.correct = self.add_variable(shape=(), initializer="zeros", name="correct")
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        mask = _token_mask(y_true, self.padding_id)
        hits = ops.cast(ops.equal(ops.argmax(y_pred, axis=-1), y_true), "float32") * mask
        self.correct.assign_add(ops.sum(hits))
        self.total.assign_add(ops.sum(mask))

    def result(self):
        return self.correct / ops.maximum(self.total, 1.0)

    def reset_state(self):
        self.correct.assign(0.0)
        self.total.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "padding_id": self.padding_id}
