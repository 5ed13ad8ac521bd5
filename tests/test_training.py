import keras
import numpy as np
import pytest

from conftest import to_numpy
from keras_transformer.training import MaskedAccuracy
from keras_transformer.training import MaskedSparseCrossentropy
from keras_transformer.training import TransformerSchedule

LABELS = np.array([[5, 2, 7, 0, 0], [3, 1, 0, 0, 0]], "int32")
REAL = LABELS != 0


@pytest.fixture
def logits(rng):
    return rng.normal(size=(2, 5, 9)).astype("float32")


@pytest.mark.parametrize("step", [1, 10, 3999, 4000, 4001, 100000])
def test_schedule_matches_the_papers_formula(step):
    schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
    # The optimizer's iteration counter is step - 1.
    assert float(schedule(step - 1)) == pytest.approx(expected, rel=1e-5)


def test_schedule_peaks_at_the_end_of_warmup():
    schedule = TransformerSchedule(d_model=256, warmup_steps=100, scale=2.0)
    rates = [float(schedule(i)) for i in range(300)]
    assert int(np.argmax(rates)) == 99
    assert rates[99] == pytest.approx(2.0 * 256**-0.5 * 100**-0.5, rel=1e-5)


def test_changing_padded_logits_does_not_change_the_loss(logits, rng):
    loss = MaskedSparseCrossentropy(label_smoothing=0.1)
    changed = logits.copy()
    changed[~REAL] = rng.normal(size=changed[~REAL].shape) * 100
    assert float(loss(LABELS, logits)) == pytest.approx(float(loss(LABELS, changed)), rel=1e-6)
    changed[0, 0, 5] += 5.0  # the label's own logit, at a real position
    assert float(loss(LABELS, logits)) != pytest.approx(float(loss(LABELS, changed)), rel=1e-6)


def test_loss_is_the_mean_cross_entropy_over_real_tokens(logits):
    reference = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    per_token = to_numpy(reference(LABELS, logits))
    got = float(MaskedSparseCrossentropy()(LABELS, logits))
    assert got == pytest.approx(per_token[REAL].mean(), rel=1e-5)


def test_label_smoothing_matches_keras_categorical_crossentropy(logits):
    reference = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1, reduction=None)
    per_token = to_numpy(reference(np.eye(9, dtype="float32")[LABELS], logits))
    got = float(MaskedSparseCrossentropy(label_smoothing=0.1)(LABELS, logits))
    assert got == pytest.approx(per_token[REAL].mean(), rel=1e-5)


def test_loss_refuses_sample_weight_rather_than_mixing_it_in(logits):
    with pytest.raises(ValueError, match="sample_weight"):
        MaskedSparseCrossentropy()(LABELS, logits, sample_weight=np.ones(2, "float32"))


def test_accuracy_counts_only_real_tokens():
    predictions = np.array([[5, 2, 1, 0, 4], [3, 0, 0, 8, 8]])
    logits = np.eye(9, dtype="float32")[predictions]
    metric = MaskedAccuracy()
    metric.update_state(LABELS, logits)
    # Real tokens: 5 2 7 | 3 1 -> right: 5, 2, 3.
    assert float(metric.result()) == pytest.approx(3 / 5)
    metric.reset_state()
    assert float(metric.result()) == 0.0


def test_compiled_model_with_schedule_loss_and_metric_saves_and_reloads(tmp_path, logits):
    import keras_transformer as kt

    model = kt.models.language_model(9, num_layers=1, d_model=8, num_heads=2, ff_dim=16, max_length=8)
    model.compile(
        optimizer=keras.optimizers.Adam(TransformerSchedule(8, warmup_steps=10), beta_2=0.98, epsilon=1e-9),
        loss=MaskedSparseCrossentropy(label_smoothing=0.1),
        metrics=[MaskedAccuracy()],
    )
    model.fit(LABELS, LABELS, epochs=1, verbose=0)
    path = str(tmp_path / "model.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    schedule = keras.optimizers.schedules.deserialize(reloaded.optimizer.get_config()["learning_rate"])
    assert isinstance(schedule, TransformerSchedule) and schedule.warmup_steps == 10
    assert isinstance(reloaded.loss, MaskedSparseCrossentropy) and reloaded.loss.label_smoothing == 0.1
    np.testing.assert_allclose(
        reloaded.evaluate(LABELS, LABELS, verbose=0), model.evaluate(LABELS, LABELS, verbose=0), rtol=1e-5
    )


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="warmup_steps"):
        TransformerSchedule(512, warmup_steps=0)
    with pytest.raises(ValueError, match="label_smoothing"):
        MaskedSparseCrossentropy(label_smoothing=1.0)
