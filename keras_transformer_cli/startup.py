"""Starting Keras for a verb: its backend, its devices, and the C++ logging they print.

Importing Keras imports its backend, and the backend's first device start
writes C++ log lines (CUDA, XLA, oneDNN) straight to file descriptor 2;
`start_keras` does both at once with the descriptor silenced, unless
`--verbose`, so the terminal shows only what the verb says.
"""

import contextlib
import os
import sys
import tempfile

from keras_transformer_cli.commands import importable


@contextlib.contextmanager
def quiet_native_logging(verbose):
    """Keeps C++ start-up logging (TensorFlow, XLA, absl) out of the terminal.

    TensorFlow and XLA write lines such as "failed call to cuInit" from C++
    straight to file descriptor 2 while Keras imports its backend and the
    first device starts, before any Python logging setting applies; only
    silencing the descriptor for that moment hides them. What was written
    is shown after all if the start fails.
    """
    if verbose:
        yield
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # later TensorFlow logging: warnings and errors only
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            captured.seek(0)
            sys.stderr.write(captured.read().decode("utf-8", errors="replace"))
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def _uses_tensorflow(args):
    """Whether the verb will import TensorFlow whatever the backend (tf.data, TensorBoard, export)."""
    return (
        (args.command in ("train", "ablate") or (args.command == "export" and args.format == "savedmodel"))
        and getattr(args, "input_pipeline", "auto") != "python"
        and importable("tensorflow")
    )


def start_keras(args, verbose):
    """Imports Keras, the package and TensorFlow where the verb uses it, and
    starts their devices, quietly unless verbose. `train` first joins the
    job of several processes that `KERAS_DISTRIBUTION_*` may describe:
    JAX refuses once a device has started."""
    from keras_transformer_runtime.timings import phase

    with quiet_native_logging(verbose), phase("import"):
        import keras

        import keras_transformer  # noqa: F401

        if args.command == "train":
            from keras_transformer.training import distribute

            distribute.join_processes()
        keras.ops.convert_to_numpy(keras.ops.zeros(()))  # the backend's first device starts here (cuInit, ...)
        if _uses_tensorflow(args) or sys.modules.get("tensorflow") is not None:
            import tensorflow as tf

            tf.config.list_physical_devices()  # TensorFlow's CUDA start, whatever the backend
            if not verbose and (_uses_tensorflow(args) or keras.backend.backend() == "tensorflow"):
                _spend_onednn_dtype_message(tf)


def _spend_onednn_dtype_message(tf):
    """Makes oneDNN log its data type message now, while fd 2 is silenced.

    TensorFlow's oneDNN Transpose logs "oneDNN supports DT_INT64 only on
    platforms with AVX-512. Falling back to the default Eigen-based
    implementation if present." at ERROR level, whatever the CPU, the first
    time a process transposes a tensor that is not float (`tf.data`'s ragged
    concat does, in the middle of `train`'s log), and never again.
    """
    with tf.device("/CPU:0"):
        tf.transpose(tf.zeros((2, 2), tf.int64))


def check_translate_arguments(args, parser):
    """Refuses `translate` flags that contradict each other (`parser.error`); sets `args.alignments`.

    Runs once the search flags hold the run's defaults (`search_flags.apply_search_defaults`).
    """
    if args.n_best and args.n_best > args.beam:
        parser.error(f"--n-best {args.n_best} is more than the --beam {args.beam} hypotheses kept.")
    if args.token_scores and not (args.n_best or args.format == "jsonl"):
        parser.error("--token-scores adds to the scores of --n-best or --format jsonl: give one of them.")
    if args.attention_weights and args.format != "jsonl":
        parser.error("--attention-weights are written in --format jsonl only.")
    args.alignments = args.alignments or args.attention_weights
    if args.attention_map and len(args.text) != 1:
        parser.error(f"--attention-map draws one translation: give one sentence as an argument "
                     f"(got {len(args.text) or 'stdin'}).")


def choose_import_backend(args):
    """`import` builds and writes its model with Keras on JAX, where JAX is installed and Keras is not yet imported.

    The run folder is the same whatever the backend, and JAX writes it
    fastest: TensorFlow traces the model into a graph first, torch takes
    longer to import (docs/pretrained.md, "What an import costs"). Like
    `translate`'s compiled engine, this is whatever KERAS_BACKEND says.
    """
    if args.command == "import" and "keras" not in sys.modules and importable("jax"):
        os.environ["KERAS_BACKEND"] = "jax"


def translation_engine(args, parser):
    """What runs the model for `translate` and `evaluate`: `"compiled"` or `"keras"` (see `--engine`).

    The compiled engine writes its program with Keras on JAX: when it is
    chosen and Keras is not yet imported, this process's Keras backend
    becomes JAX, whatever KERAS_BACKEND says (the program, not the
    backend, then runs the model).
    """
    from keras_transformer_runtime.program_cache import cache_enabled

    keras_module = sys.modules.get("keras")
    other_backend = keras_module is not None and keras_module.backend.backend() != "jax"
    if args.engine == "auto":
        compiled = importable("jax") and cache_enabled() and not other_backend
        engine = "compiled" if compiled else "keras"
    elif args.engine == "compiled":
        problem = (
            "needs JAX (pip install jax)" if not importable("jax")
            else "keeps its program in the cache, which KERAS_TRANSFORMER_CACHE=0 turns off" if not cache_enabled()
            else "writes its program with Keras on JAX, and this process already runs Keras on "
                 f"{keras_module.backend.backend()}" if other_backend
            else None
        )
        if problem:
            parser.error(f"--engine compiled {problem}.")
        engine = "compiled"
    else:
        engine = "keras"
    if engine == "compiled" and keras_module is None:
        os.environ["KERAS_BACKEND"] = "jax"
    return engine
