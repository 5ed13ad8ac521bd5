"""Deterministic runs: the same seed gives the same loss curve on the same backend.

Curves are compared step by step and exactly: on one backend and one
machine, nothing in a CPU fit (initializers, dropout, shuffling, the
schedule, the masked loss) may depend on anything but the seed.
"""

import keras
import numpy as np
import pytest

import keras_transformer as kt

VOCABULARY = 40


class _LossCurve(keras.callbacks.Callback):
    """Records the loss Keras reports after every training step."""

    def __init__(self):
        super().__init__()
        self.losses = []

    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(float(logs["loss"]))


def _batches(seed):
    """A copy task with padding, fixed shapes (one compile per backend)."""
    rng = np.random.default_rng(seed)
    source = rng.integers(4, VOCABULARY, size=(32, 10)).astype("int32")
    lengths = rng.integers(3, 11, size=32)
    source[np.arange(10)[None, :] >= lengths[:, None]] = 0  # padding
    decoder_tokens = np.concatenate([np.full((32, 1), 2, "int32"), source[:, :-1]], axis=1)
    return {"encoder_tokens": source, "decoder_tokens": decoder_tokens}, source


def _model(seed):
    keras.utils.set_random_seed(seed)
    return kt.models.transformer(
        VOCABULARY, VOCABULARY, num_layers=1, d_model=16, num_heads=2, ff_dim=32, max_length=12,
        dropout=0.1, attention_dropout=0.1, tie_embeddings=True,
    )


def _loss_curve(seed):
    """Per-step losses of a short fit, everything seeded by `seed` alone."""
    model = _model(seed)
    model.compile(
        optimizer=keras.optimizers.Adam(
            kt.training.TransformerSchedule(16, warmup_steps=4), beta_1=0.9, beta_2=0.98, epsilon=1e-9
        ),
        loss=kt.training.MaskedSparseCrossentropy(label_smoothing=0.1),
        metrics=[kt.training.MaskedAccuracy()],
    )
    inputs, labels = _batches(0)  # the same data every time: only the seed varies
    curve = _LossCurve()
    # Dropout on (residual and attention), shuffling on: both must follow the seed.
    model.fit(inputs, labels, batch_size=8, epochs=2, shuffle=True, callbacks=[curve], verbose=0)
    return curve.losses


def test_the_same_seed_gives_the_same_loss_curve():
    first, second = _loss_curve(seed=7), _loss_curve(seed=7)
    assert len(first) == 8 and all(np.isfinite(first))
    assert first == second  # exactly, step by step


def test_the_seed_is_what_decides_the_initial_weights():
    """Guards the test above from passing because nothing was random at all."""
    to_numpy = keras.ops.convert_to_numpy
    same = [to_numpy(w) for w in _model(7).weights], [to_numpy(w) for w in _model(7).weights]
    other = [to_numpy(w) for w in _model(8).weights]
    assert all(np.array_equal(a, b) for a, b in zip(*same))
    assert not all(np.array_equal(a, b) for a, b in zip(same[0], other))


@pytest.mark.slow
def test_train_translator_is_reproducible_from_its_seed(tmp_path):
    """The whole job, twice from scratch: identical per-step losses (~1 min a run on CPU)."""
    from conftest import FIXTURE_CORPUS
    from keras_transformer.training.train_config import TrainConfig
    from keras_transformer.training.trainer import train_translator

    curves = []
    for run in ("a", "b"):
        curve = _LossCurve()
        config = TrainConfig(
            output=str(tmp_path / run), corpus=FIXTURE_CORPUS, preset="tiny", num_layers=1, d_model=16,
            num_heads=2, ff_dim=32, max_length=24, vocabulary_size=400, batch_tokens=240, epochs=1,
            steps_per_epoch=3, warmup_steps=2,
        )
        train_translator(config, verbose=0, log=lambda message: None, callbacks=[curve])
        curves.append(curve.losses)
    assert len(curves[0]) == 3 and curves[0] == curves[1]
