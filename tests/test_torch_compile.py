"""`--jit-compile` on torch: refused with what to do instead; "auto" trains eagerly there.

Keras compiles the torch train step with `torch.compile`, which breaks the
graph in every layer call; torch._dynamo then crashes on our models
(`KeyError: 'mask'`, issue 13) and, with the crash patched out, trained no
faster than eager (benchmarks/findings/training-speed.md, "torch.compile").
So a run refuses the flag on torch before it reads the corpus or writes
anything.
"""

import os
import subprocess
import sys

import keras
import pytest

from keras_transformer.errors import UserInputError
from keras_transformer.training.train_config import TrainConfig
from keras_transformer.training.trainer import build_translator
from conftest import FIXTURE_CORPUS

TINY = dict(
    corpus=FIXTURE_CORPUS, preset="tiny", num_layers=1, d_model=16, num_heads=2, ff_dim=32,
    max_length=48, vocabulary_size=200, batch_tokens=480, warmup_steps=5,
)
torch_only = pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch.compile is the torch backend's")


@torch_only
def test_jit_compile_on_torch_is_refused_with_what_to_do_instead(tmp_path):
    with pytest.raises(UserInputError, match="--jit-compile does not work on the torch backend.*--no-jit-compile"):
        TrainConfig(output=str(tmp_path / "run"), jit_compile=True, **TINY).resolved()
    for jit_compile in ("auto", False):
        assert TrainConfig(output=str(tmp_path / "run"), jit_compile=jit_compile, **TINY).resolved()
    # The Python API the ablations use refuses it too, before building anything.
    with pytest.raises(UserInputError, match="--jit-compile does not work on the torch backend"):
        build_translator(**TrainConfig(output=str(tmp_path / "run"), **TINY).resolved().model_arguments()
                         | {"jit_compile": True})


@pytest.mark.skipif(keras.backend.backend() == "torch", reason="the other backends compile with XLA")
def test_jit_compile_stays_allowed_on_jax_and_tensorflow(tmp_path):
    assert TrainConfig(output=str(tmp_path / "run"), jit_compile=True, **TINY).resolved().jit_compile is True


@torch_only
def test_auto_jit_compile_trains_eagerly_on_torch():
    config = TrainConfig(output="unused", **TINY).resolved()
    assert config.jit_compile == "auto"
    model = build_translator(**config.model_arguments())
    assert model.jit_compile is False


@pytest.mark.backend_independent
def test_cli_refuses_jit_compile_on_torch_in_one_line_before_writing_anything(tmp_path):
    output = tmp_path / "run"
    flags = ["--corpus", FIXTURE_CORPUS, "--preset", "tiny", "--num-layers", "1", "--d-model", "16",
             "--num-heads", "2", "--ff-dim", "32", "--max-length", "48", "--vocabulary-size", "200",
             "--batch-tokens", "480", "--epochs", "1", "--steps-per-epoch", "1", "--dev-bleu-sentences", "0",
             "--output", str(output), "--jit-compile"]
    result = subprocess.run(
        [sys.executable, "-m", "keras_transformer_cli", "train", *flags],
        capture_output=True, text=True, timeout=300, env={**os.environ, "KERAS_BACKEND": "torch"},
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "--jit-compile does not work on the torch backend" in result.stderr
    assert "Traceback" not in result.stderr
    assert not output.exists()
