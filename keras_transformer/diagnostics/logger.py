"""`DiagnosticsLogger`: the diagnostics logged during `model.fit`."""

import keras

from keras_transformer.diagnostics.attention import attention_statistics
from keras_transformer.diagnostics.embeddings import embedding_layers
from keras_transformer.diagnostics.embeddings import embedding_position_ratio
from keras_transformer.diagnostics.gradients import gradient_norms


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

    >>> import numpy as np
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
