"""Which weights a training run keeps: scored by dev BLEU, the best checkpoint or an average.

The dev loss keeps falling after the translations stop improving, so a run
scores what its users get: greedy translations of a fixed dev subset (the
first sentences of the dev split), with sacrebleu, after every virtual
epoch. `DevBleu` puts the score in the epoch's logs (`dev_bleu` in
`log.csv` and TensorBoard) and saves the model whenever it beats every
earlier score, so `model.keras` is the best checkpoint, not the last one.

`LastCheckpoints` keeps the trainable weights of the last few virtual
epochs; `keep_best` averages them after training, as the paper averaged
its last checkpoints, and keeps the average only if its dev BLEU beats the
best single checkpoint. What was kept, and every score, is recorded in
`model_selection.json` (`run_folder.SELECTION_FILE`), which also lets a
resumed run remember the best score so far.
"""

import glob
import os

import keras
import numpy as np

from keras_transformer.model_file import save_model
from keras_transformer.training import run_folder

_CHECKPOINT_PATTERN = "epoch-{:05d}.weights.npz"


def read_record(output):
    """The run's `model_selection.json`: `scores` per virtual epoch and the `best` kept.

    Example:

    >>> read_record("/nonexistent")
    {'scores': {}, 'best': None}
    """
    path = os.path.join(output, run_folder.SELECTION_FILE)
    try:
        record = run_folder.read_json(path) if os.path.exists(path) else {}
    except (OSError, ValueError):
        record = {}
    return {"scores": dict(record.get("scores") or {}), "best": record.get("best")}


class DevBleu(keras.callbacks.Callback):
    """Scores greedy translations of dev pairs after each virtual epoch; saves the best model.

    Adds `dev_bleu` to the epoch's logs, so callbacks after it
    (`CSVLogger`, `TensorBoard`) record it. When the score beats every
    earlier one of the run (a resumed run reads them from
    `model_selection.json`), the model is saved to `model.keras`.

    Args:
        pairs: list of `TranslationPair`, the fixed dev subset.
        tokenizer: the run's tokenizer.
        output: the run folder.
        steps_per_epoch: int, to record the step of each score.
        jit_compile: as `Translator`'s: compile the decoding loop (on
            TensorFlow; on JAX it is compiled anyway, and this pads the
            sources to fewer shapes). One translator serves every epoch:
            its compiled programs read the weights as they are.
        log: callable for one-line messages.

    Example:

    >>> callback = DevBleu([], tokenizer=None, output="/tmp/run", steps_per_epoch=100)
    >>> callback.best_bleu
    -inf
    """

    def __init__(self, pairs, tokenizer, output, steps_per_epoch, jit_compile=False, log=print):
        super().__init__()
        self.pairs = list(pairs)
        self.tokenizer = tokenizer
        self.output = output
        self.steps_per_epoch = steps_per_epoch
        self.jit_compile = jit_compile
        self.log = log
        self.record = read_record(output)
        best = self.record["best"]
        self.best_bleu = best["dev_bleu"] if best else float("-inf")
        self.best_translations = None  # of the best weights scored in this process
        self._translator = None

    def _scorer(self):
        from keras_transformer.translation.translator import Translator

        if self._translator is None:
            self._translator = Translator(self.model, self.tokenizer, beam_width=1, jit_compile=self.jit_compile)
            # Weights are compared on the dev pairs as they were trained (whole verses), in the batch shapes
            # compiled ahead from them.
            self._translator.split_sentences = False
        return self._translator

    def score(self, verbose=0):
        """Dev BLEU of the model's weights now; a dict as `evaluate_pairs` returns."""
        from keras_transformer.translation.evaluation import evaluate_pairs

        return evaluate_pairs(self._scorer(), self.pairs, verbose=verbose)

    def on_train_begin(self, logs=None):
        # Compiles the decoding program of each batch shape the scoring will
        # meet before the first epoch: then the first epoch's time, which
        # `RunClock` projects onto the others, holds none of it. The shapes are
        # the scoring's own (its sorted batches, `batch_size` rows each): one
        # sentence a width compiled 8-row shapes that a GPU's 64-row scoring
        # compiled again (benchmarks/findings/gpu.md, "The user's wait").
        translator = self._scorer()
        if not self.jit_compile or not self.pairs:
            return
        sources = [pair.source for pair in self.pairs if pair.source.strip()]
        ids = translator._token_ids(sources)
        order = sorted(range(len(sources)), key=lambda i: len(ids[i]))
        size = translator.batch_size
        rows = size if len(order) > size else None
        batches = {}
        for start in range(0, len(order), size):
            batch = order[start : start + size]
            shape = translator._padded_batch([ids[i] for i in batch], rows).shape
            batches.setdefault(shape, [sources[i] for i in batch])
        for (batch_rows, _), batch in batches.items():
            translator(batch + batch[:1] * (batch_rows - len(batch)))  # as many rows as the scoring's

    def on_epoch_end(self, epoch, logs=None):
        result = self.score()
        if logs is not None:
            logs["dev_bleu"] = result["bleu"]
        self.record["scores"][str(epoch + 1)] = result["bleu"]
        better = result["bleu"] > self.best_bleu
        if better:
            self.keep(f"virtual epoch {epoch + 1}", result, (epoch + 1) * self.steps_per_epoch)
        self.write_record()
        self.log(f"dev BLEU {result['bleu']:.2f} after virtual epoch {epoch + 1}"
                 + (" (best so far: saved)" if better else f" (best {self.best_bleu:.2f})"))

    def keep(self, what, result, step):
        """Saves the model as `model.keras`, the best so far with the score `result`."""
        save_model(self.model, os.path.join(self.output, run_folder.MODEL_FILE))
        self.best_bleu = result["bleu"]
        self.best_translations = result.get("translations")
        self.record["best"] = {"weights": what, "dev_bleu": result["bleu"], "step": step}

    def write_record(self):
        run_folder.write_json(os.path.join(self.output, run_folder.SELECTION_FILE), self.record)


class LastCheckpoints(keras.callbacks.Callback):
    """Keeps the trainable weights of the last `count` virtual epochs, for `average_checkpoints`.

    They are written as `checkpoints/epoch-NNNNN.weights.npz` in the run
    folder; older ones are deleted.

    Args:
        output: the run folder.
        count: int, how many to keep.

    Example:

    >>> LastCheckpoints("/tmp/run", count=5).count
    5
    """

    def __init__(self, output, count):
        super().__init__()
        self.folder = os.path.join(output, run_folder.CHECKPOINT_FOLDER)
        self.count = count

    def on_epoch_end(self, epoch, logs=None):
        os.makedirs(self.folder, exist_ok=True)
        path = os.path.join(self.folder, _CHECKPOINT_PATTERN.format(epoch + 1))
        weights = {f"w{i}": keras.ops.convert_to_numpy(v) for i, v in enumerate(self.model.trainable_weights)}
        temporary = path + ".tmp.npz"
        np.savez(temporary, **weights)
        os.replace(temporary, path)
        for old in checkpoint_paths(os.path.dirname(self.folder))[: -self.count]:
            os.remove(old)


def checkpoint_paths(output):
    """The checkpoints `LastCheckpoints` kept in the run folder `output`, oldest first."""
    return sorted(glob.glob(os.path.join(output, run_folder.CHECKPOINT_FOLDER, "epoch-*.weights.npz")))


def average_checkpoints(model, paths):
    """Sets `model`'s trainable weights to the mean of the checkpoints at `paths`.

    Args:
        model: the model the checkpoints were taken from.
        paths: files written by `LastCheckpoints`.

    Example:

    >>> import tempfile
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> folder = tempfile.mkdtemp()
    >>> saver = LastCheckpoints(folder, count=2)
    >>> saver.set_model(model)
    >>> for epoch, value in enumerate((1.0, 3.0)):
    ...     _ = model.layers[0].kernel.assign(np.full((2, 1), value))
    ...     saver.on_epoch_end(epoch)
    >>> average_checkpoints(model, checkpoint_paths(folder))
    >>> keras.ops.convert_to_numpy(model.layers[0].kernel).ravel().tolist()
    [2.0, 2.0]
    """
    total = None
    for path in paths:
        with np.load(path) as checkpoint:
            arrays = [checkpoint[f"w{i}"].astype(np.float64) for i in range(len(checkpoint.files))]
        total = arrays if total is None else [a + b for a, b in zip(total, arrays)]
    for variable, value in zip(model.trainable_weights, total):
        variable.assign((value / len(paths)).astype(variable.dtype))


def keep_best(model, output, dev_bleu=None, average_last=1, log=print):
    """After training: puts the kept weights in `model` and in `model.keras`; says which they are.

    Without dev BLEU (`dev_bleu=None`) the kept weights are the average of
    the last `average_last` checkpoints (the last weights when
    `average_last` is 1). With it, they are whichever scored best: a
    checkpoint (`DevBleu` saved it during training) or the average.

    Args:
        model: the trained model, holding the last weights.
        output: the run folder.
        dev_bleu: the run's `DevBleu` callback, or None.
        average_last: int, checkpoints averaged.
        log: callable for one-line messages.

    Returns:
        A dict: `kept` (which weights), and `dev_bleu` and `dev_bleu_step`
        when scored.
    """
    model_path = os.path.join(output, run_folder.MODEL_FILE)
    paths = checkpoint_paths(output)[-average_last:] if average_last > 1 else []
    if len(paths) > 1:
        label = f"average of the last {len(paths)} virtual epochs' weights"
        average_checkpoints(model, paths)
        if dev_bleu is None:
            save_model(model, model_path)
            return {"kept": label}
        result = dev_bleu.score()
        bleu = result["bleu"]
        log(f"dev BLEU {bleu:.2f} for the {label} (best single checkpoint: {dev_bleu.best_bleu:.2f})")
        dev_bleu.record["scores"][f"average of {len(paths)}"] = bleu
        if bleu > dev_bleu.best_bleu:
            dev_bleu.keep(label, result, int(keras.ops.convert_to_numpy(model.optimizer.iterations)))
        dev_bleu.write_record()
    best = dev_bleu.record["best"] if dev_bleu is not None else None
    if best is None:  # no scoring, or none recorded (a run resumed after its last epoch)
        save_model(model, model_path)
        return {"kept": "last weights"}
    model.load_weights(model_path)
    log(f"kept in {model_path}: {best['weights']} (dev BLEU {best['dev_bleu']:.2f})")
    return {"kept": best["weights"], "dev_bleu": best["dev_bleu"], "dev_bleu_step": best["step"]}


class KeepBest(keras.callbacks.Callback):
    """Keeps the chosen weights when training ends: `keep_best` as a callback.

    Put it after the run's `DevBleu` and `LastCheckpoints`; it runs when
    `fit` finishes (not when it stops on an error), and `kept` then holds
    what `keep_best` returned.

    Args:
        output: the run folder.
        dev_bleu: the run's `DevBleu` callback, or None.
        average_last: int, checkpoints averaged.
        log: callable for one-line messages.

    Example:

    >>> import numpy as np, tempfile
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> keeper = KeepBest(tempfile.mkdtemp(), log=lambda message: None)
    >>> _ = model.fit(np.zeros((4, 2)), np.zeros((4, 1)), verbose=0, callbacks=[keeper])
    >>> keeper.kept
    {'kept': 'last weights'}
    """

    def __init__(self, output, dev_bleu=None, average_last=1, log=print):
        super().__init__()
        self.output = output
        self.dev_bleu = dev_bleu
        self.average_last = average_last
        self.log = log
        self.kept = None

    def on_train_end(self, logs=None):
        self.kept = keep_best(self.model, self.output, self.dev_bleu, self.average_last, self.log)
