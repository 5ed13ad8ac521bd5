"""Shared fixtures and helpers; every test runs under the backend in KERAS_BACKEND.

Tests marked `backend_independent` check code whose behaviour does not
depend on the Keras backend (the corpus readers, the batches of the data
pipeline, the command line's parsing and output, the run folder's
refusals, the tutorial scripts). CI runs the suite under all three
backends, where these would only repeat themselves, so they run under one:
torch, the fastest on a CPU, or the backend named by
KERAS_TRANSFORMER_TEST_BACKEND (the lower-bound CI job names tensorflow).
"""

import atexit
import os
import pathlib
import shutil
import tempfile

# The suite compiles hundreds of small XLA programs (JAX, and TensorFlow's
# jit_compile) once each; on a CPU the LLVM optimization passes cost more
# than they save there. The flags change how fast code is compiled, not what
# it computes, and subprocesses the tests start inherit them.
_FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FAST_COMPILE}".strip()

# A share of the cores for each pytest-xdist worker's OpenMP threads (torch's
# eager operations, NumPy's BLAS): with a thread per core in each of 2 workers
# on 2 cores, the torch suite took 320 s; 213 s with one thread a worker (and
# tests/test_refill.py trimmed), its eager searches no longer the slowest items
# (CONTRIBUTING.md). The commands the tests start inherit it.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1 and "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // _WORKERS))

# XLA's compiled code for the suite's programs, kept between runs (and shared
# by the workers of one) under .pytest_cache: JAX compiles each operation a
# test runs eagerly, so a second run takes about half the first's
# (CONTRIBUTING.md has the figures). JAX's is this process's only
# (`pytest_configure`): the commands the tests start keep their own caches,
# as a user's do. TensorFlow's (`jit_compile`) takes an environment variable,
# which those commands inherit. No size limit: JAX's limit keeps access times
# that two workers race on. `KERAS_TRANSFORMER_TEST_XLA_CACHE=off` turns both
# off; delete the folder to empty it (after a run of each lane: JAX 41 MB,
# TensorFlow 93 MB).
XLA_CACHE = os.environ.get("KERAS_TRANSFORMER_TEST_XLA_CACHE",
                           str(pathlib.Path(__file__).resolve().parents[1] / ".pytest_cache" / "xla"))
if XLA_CACHE != "off" and "tf_xla_persistent_cache_directory" not in os.environ.get("TF_XLA_FLAGS", ""):
    os.environ["TF_XLA_FLAGS"] = (f"{os.environ.get('TF_XLA_FLAGS', '')} "
                                  f"--tf_xla_persistent_cache_directory={XLA_CACHE}/tensorflow").strip()

# The translation program cache (keras_transformer_runtime.program_cache) of
# this test session, not the user's: subprocesses inherit it too. Each
# pytest process makes its own and removes it when it exits (about 8 MB).
os.environ["KERAS_TRANSFORMER_CACHE_DIR"] = tempfile.mkdtemp(prefix="keras-transformer-test-cache-")
atexit.register(shutil.rmtree, os.environ["KERAS_TRANSFORMER_CACHE_DIR"], ignore_errors=True)

import keras  # noqa: E402 (after the XLA flags)
import numpy as np
import pytest

FIXTURE_CORPUS = str(pathlib.Path(__file__).parent / "fixtures" / "bible_es_en_small.tsv.gz")


ONE_BACKEND = os.environ.get("KERAS_TRANSFORMER_TEST_BACKEND", "torch")


def pytest_configure(config):
    """Points this process's JAX at the kept XLA code (`XLA_CACHE`), every program kept."""
    if XLA_CACHE == "off":
        return
    try:
        import jax
    except ImportError:
        return
    try:  # a JAX without these settings (0.4.30, the lower bound, has them) runs the tests without the cache
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    except AttributeError:
        return
    jax.config.update("jax_compilation_cache_dir", f"{XLA_CACHE}/jax")


def pytest_collection_modifyitems(config, items):
    if keras.backend.backend() == ONE_BACKEND:
        return
    skip = pytest.mark.skip(
        reason=f"backend-independent: runs under KERAS_BACKEND={ONE_BACKEND} "
        "(or the backend in KERAS_TRANSFORMER_TEST_BACKEND)"
    )
    for item in items:
        if item.get_closest_marker("backend_independent"):
            item.add_marker(skip)


def to_numpy(x):
    """Any backend tensor (or KerasVariable) as a NumPy array."""
    return keras.ops.convert_to_numpy(x)


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Seeds every test and restores the float32 policy after it."""
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")
    # free_memory=False skips a gc.collect() that costs ~0.5 s per test.
    keras.backend.clear_session(free_memory=False)


@pytest.fixture
def as_generate(monkeypatch):
    """Translators hand each input to the model whole (`TextTranslator.split_sentences` False) and let it run to
    the length limit (no cap on run-away output: `DEFAULT_MAX_OUTPUT_RATIO` 0), as transformers' `generate` and
    CTranslate2 do: for the tests that hold a translation to theirs for the same input."""
    from keras_transformer_runtime import decoding_settings
    from keras_transformer_runtime.text_translator import TextTranslator

    monkeypatch.setattr(TextTranslator, "split_sentences", False)
    monkeypatch.setattr(decoding_settings, "DEFAULT_MAX_OUTPUT_RATIO", 0)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def _trained_run_once(tmp_path_factory):
    """The output folder of a 2-step `train_translator` run on the fixture corpus, trained once per worker."""
    from keras_transformer.training.train_config import TrainConfig
    from keras_transformer.training.trainer import train_translator

    output = tmp_path_factory.mktemp("run")
    config = TrainConfig(
        output=str(output), corpus=FIXTURE_CORPUS, preset="tiny", num_layers=1, d_model=16, num_heads=2,
        ff_dim=32, max_length=24, vocabulary_size=400, batch_tokens=240, epochs=1, steps_per_epoch=2,
        warmup_steps=2,
    )
    train_translator(config, verbose=0, log=lambda message: None)
    return output


@pytest.fixture(scope="module")
def trained_run(_trained_run_once, tmp_path_factory):
    """A copy of that run for one test file, which may write into it (5-7 s of training saved per file)."""
    output = tmp_path_factory.mktemp("run") / "run"
    shutil.copytree(_trained_run_once, output)
    return output
