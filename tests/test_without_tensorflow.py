"""The layers, models, training objects and decoding run where TensorFlow is absent,
and so do `keras-transformer train`, `translate` and `evaluate`."""

import json
import os
import subprocess
import sys

import keras
import pytest

from conftest import FIXTURE_CORPUS

pytestmark = pytest.mark.end_to_end

BLOCK_TENSORFLOW_THEN_DECODE = """
import sys
sys.modules["tensorflow"] = None  # any `import tensorflow` now raises ImportError
import numpy as np
import keras
import keras_transformer as kt
keras.utils.set_random_seed(0)
from keras_transformer.decoding import CachedDecoder, greedy_search
model = kt.models.transformer(20, 20, num_layers=1, d_model=8, num_heads=2, ff_dim=16, max_length=8)
model.compile(optimizer="adam", loss=kt.training.MaskedSparseCrossentropy())
model.fit({"encoder_tokens": np.array([[4, 5, 0]]), "decoder_tokens": np.array([[2, 6, 0]])},
          np.array([[6, 3, 0]]), epochs=1, verbose=0)
print(greedy_search(CachedDecoder(model), np.array([[4, 5, 0]]), max_new_tokens=3, stop_at_end=False).shape)
"""


@pytest.mark.skipif(keras.backend.backend() == "tensorflow", reason="needs a backend other than TensorFlow")
def test_package_trains_and_decodes_with_tensorflow_blocked():
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_TENSORFLOW_THEN_DECODE],
        env=dict(os.environ), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("(1, 3)")


# The command line in one process with TensorFlow blocked: train (a tiny
# model, 2 steps; one padded length, so one compiled train step), then
# translate and evaluate the run, then export, which must refuse in one line.
BLOCK_TENSORFLOW_THEN_TRAIN_TRANSLATE_EVALUATE = """
import sys
sys.modules["tensorflow"] = None  # any `import tensorflow` now raises ImportError
import os
import keras_transformer_cli as cli
output, corpus = sys.argv[1], sys.argv[2]
cli.main(["train", "--output", output, "--corpus", corpus, "--preset", "tiny", "--num-layers", "1",
          "--d-model", "16", "--num-heads", "2", "--ff-dim", "32", "--max-length", "16", "--bucket-width", "16",
          "--vocabulary-size", "400", "--batch-tokens", "160", "--epochs", "1", "--steps-per-epoch", "2",
          "--warmup-steps", "2"])
print("TRANSLATIONS")
cli.main(["translate", "--model", output, "Y dijo Dios: Sea la luz.", "En el principio creó Dios los cielos."])
print("EVALUATION")
cli.main(["evaluate", "--model", output, "--split", "heldout", "--limit", "3", "--corpus", corpus])
try:
    cli.main(["export", "--model", output, "--out", os.path.join(output, "exported")])
except SystemExit as exit:
    print("EXPORT EXIT", exit.code)
print("IMPORTED", sorted(name for name in ("tensorflow", "keras_hub", "tensorflow_text")
                         if sys.modules.get(name) is not None))
"""


@pytest.mark.skipif(keras.backend.backend() == "tensorflow", reason="needs a backend other than TensorFlow")
def test_cli_trains_translates_and_evaluates_with_tensorflow_blocked(tmp_path):
    output = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_TENSORFLOW_THEN_TRAIN_TRANSLATE_EVALUATE, str(output), FIXTURE_CORPUS],
        env=dict(os.environ), capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    stdout = result.stdout
    log = result.stderr  # stdout is a pipe: the log lines go to stderr, the results stay on stdout
    assert "input pipeline: python (keras.utils.PyDataset" in log and "TensorFlow does not import here" in log
    assert "TensorBoard logs need TensorFlow" in log
    for name in ("model.keras", "vocabulary.spm", "config.json", "summary.json", "log.csv", "backup"):
        assert (output / name).exists(), name
    assert not (output / "logs").exists()  # no TensorBoard without TensorFlow
    config = json.loads((output / "config.json").read_text())
    assert config["bucket_width"] == 16 and config["input_pipeline"] == "auto"
    summary = json.loads((output / "summary.json").read_text())
    assert summary["completed_steps"] == 2 and summary["input_pipeline"] == "python"
    assert summary["dev_loss"] == summary["dev_loss"] and summary["dev_sample_sentences"] > 0  # not NaN
    translations = stdout.split("TRANSLATIONS\n", 1)[1].split("EVALUATION\n", 1)[0].splitlines()
    assert len(translations) == 2  # one line each, even if empty
    assert "BLEU" in stdout.split("EVALUATION\n", 1)[1]
    report = json.loads((output / "evaluation-heldout-beam4-norepeat3.json").read_text())
    assert report["sentences"] == 3 and len(report["translations"]) == 3
    # Export needs TensorFlow: one line saying so, no traceback.
    assert "EXPORT EXIT 2" in stdout and not (output / "exported").exists()
    error_lines = [line for line in result.stderr.splitlines() if "keras-transformer: error:" in line]
    assert len(error_lines) == 1 and "pip install tensorflow tensorflow-text" in error_lines[0]
    assert "Traceback" not in result.stderr
    assert stdout.strip().splitlines()[-1] == "IMPORTED []"
