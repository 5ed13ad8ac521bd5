"""The package's main job: train a Spanish -> English translator end to end.

corpus -> SentencePiece vocabulary -> bucketed tf.data batches -> functional
Transformer -> `model.fit` with the paper's schedule and a masked,
label-smoothed loss -> an output folder holding the model, the vocabulary,
the config and the logs. `keras-transformer train` is a thin layer over
`train_translator`.

Training runs as `epochs` "virtual epochs" of `steps_per_epoch` steps over a
repeated dataset. A backup is written at the end of each one, so a killed
run, started again with the same command, resumes from the last virtual
epoch, skips the batches it already trained on, and ends after the same
number of steps as an uninterrupted run.
"""

import dataclasses
import json
import os
import time

import keras

PRESETS = {
    "tiny": dict(num_layers=2, d_model=128, num_heads=4, ff_dim=512),
    "small": dict(num_layers=3, d_model=256, num_heads=4, ff_dim=1024),
    "base": dict(num_layers=6, d_model=512, num_heads=8, ff_dim=2048),
    "big": dict(num_layers=6, d_model=1024, num_heads=16, ff_dim=4096),
}
# Fields that may differ when a run is resumed in the same folder.
_RESUMABLE_CHANGES = ("output", "epochs", "jit_compile")
CONFIG_FILE, SUMMARY_FILE, PROGRESS_FILE = "config.json", "summary.json", "progress.json"
MODEL_FILE, VOCABULARY_FILE = "model.keras", "vocabulary.spm"
SAMPLE_SENTENCES = 200  # dev sentences translated at the end of training


class TrainingError(Exception):
    """A problem with the user's input, reported as one line, not a traceback."""


def has_accelerator():
    """True when Keras sees a GPU or TPU.

    Example:

    >>> has_accelerator() in (True, False)
    True
    """
    if keras.backend.backend() == "torch":  # keras.distribution does not cover torch
        import torch

        return torch.cuda.is_available()
    return any(
        kind in device.lower()
        for device in keras.distribution.list_devices()
        for kind in ("gpu", "tpu", "cuda")
    )


@dataclasses.dataclass
class TrainConfig:
    """Everything that defines a training run; saved as `config.json`.

    Model sizes default to the preset's; `preset=None` picks "base" on an
    accelerator and "tiny" on a CPU.

    Args:
        output: folder for the model, vocabulary, config and logs.
        corpus: gzipped TSV of the corpus; None for the embedded one.
        preset: "tiny", "small", "base", "big" or None.
        num_layers, d_model, num_heads, ff_dim: model size; None takes the
            preset's.
        dropout: residual dropout. Defaults to 0.1.
        max_length: longest source or target, in tokens. Defaults to 128.
        vocabulary_size: joint SentencePiece vocabulary. Defaults to 8000.
        batch_tokens: tokens per batch (source or target side, padding
            included). Defaults to 4096.
        epochs: number of virtual epochs.
        steps_per_epoch: optimizer steps per virtual epoch.
        warmup_steps: warm-up of the learning-rate schedule.
        label_smoothing: defaults to 0.1, as in the paper.
        mixed_precision: None, "float16" or "bfloat16".
        jit_compile: True, False or "auto" (Keras decides).
        bucket: batch sequences of similar length together.
        tie_embeddings: share the decoder embedding with the output layer.
        seed: seeds weights, dropout and data order.

    Example:

    >>> config = TrainConfig(output="/tmp/run", preset="tiny").resolved()
    >>> config.d_model, config.num_layers
    (128, 2)
    """

    output: str = "runs/es-en"
    corpus: str = None
    preset: str = None
    num_layers: int = None
    d_model: int = None
    num_heads: int = None
    ff_dim: int = None
    dropout: float = 0.1
    max_length: int = 128
    vocabulary_size: int = 8000
    batch_tokens: int = 4096
    epochs: int = None
    steps_per_epoch: int = None
    warmup_steps: int = None
    label_smoothing: float = 0.1
    mixed_precision: str = None
    jit_compile: object = "auto"
    bucket: bool = True
    tie_embeddings: bool = True
    seed: int = 0

    def resolved(self):
        """A copy with the preset and the hardware defaults filled in."""
        preset = self.preset or ("base" if has_accelerator() else "tiny")
        if preset not in PRESETS:
            raise TrainingError(f"--preset must be one of {', '.join(PRESETS)}, got {preset!r}.")
        sizes = {key: getattr(self, key) or value for key, value in PRESETS[preset].items()}
        config = dataclasses.replace(self, preset=preset, **sizes)
        # The CPU default is sized to finish in about 15 minutes on 2 cores.
        defaults = dict(epochs=8, steps_per_epoch=100, warmup_steps=400)
        if preset in ("base", "big"):
            defaults = dict(epochs=20, steps_per_epoch=500, warmup_steps=4000)
        for key, value in defaults.items():
            if getattr(config, key) is None:
                config = dataclasses.replace(config, **{key: value})
        config._validate()
        return config

    def _validate(self):
        positive = ("num_layers", "d_model", "num_heads", "ff_dim", "max_length",
                    "vocabulary_size", "batch_tokens", "epochs", "steps_per_epoch", "warmup_steps")
        for key in positive:
            if getattr(self, key) < 1:
                raise TrainingError(f"--{key.replace('_', '-')} must be positive, got {getattr(self, key)}.")
        if self.d_model % self.num_heads:
            raise TrainingError(
                f"--d-model {self.d_model} is not divisible by --num-heads {self.num_heads}."
            )
        if self.batch_tokens < self.max_length:
            raise TrainingError(
                f"--batch-tokens {self.batch_tokens} is smaller than --max-length "
                f"{self.max_length}: a batch could not hold one sequence."
            )
        if not 0.0 <= self.dropout < 1.0 or not 0.0 <= self.label_smoothing < 1.0:
            raise TrainingError("--dropout and --label-smoothing must be in [0, 1).")
        if self.mixed_precision not in (None, "float16", "bfloat16"):
            raise TrainingError(
                f"--mixed-precision must be float16 or bfloat16, got {self.mixed_precision!r}."
            )
        if self.corpus is not None and not os.path.isfile(self.corpus):
            raise TrainingError(f"--corpus {self.corpus!r} does not exist.")

    @property
    def total_steps(self):
        """Optimizer steps of the whole run."""
        return self.epochs * self.steps_per_epoch


def _read_json(path):
    with open(path) as f:
        return json.load(f)


def _write_json(path, value):
    temporary = path + ".tmp"
    with open(temporary, "w") as f:
        json.dump(value, f, indent=2, sort_keys=True)
    os.replace(temporary, path)  # atomic: a kill never leaves half a file


def prepare_output(config, overwrite=False):
    """Checks the output folder before any work, and says whether to resume.

    Returns:
        The number of virtual epochs already done (0 for a new run).

    Raises:
        TrainingError: the folder is unwritable, holds a different model,
            or holds a finished run (unless `overwrite`).
    """
    probe = os.path.join(config.output, ".write-test")
    try:
        os.makedirs(config.output, exist_ok=True)
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as error:
        raise TrainingError(f"--output {config.output!r} is not writable: {error.strerror}.")
    config_path = os.path.join(config.output, CONFIG_FILE)
    if overwrite or not os.path.exists(config_path):
        for name in (PROGRESS_FILE, SUMMARY_FILE):
            if os.path.exists(os.path.join(config.output, name)):
                os.remove(os.path.join(config.output, name))
        _write_json(config_path, dataclasses.asdict(config))
        return 0
    saved = _read_json(config_path)
    current = dataclasses.asdict(config)
    different = sorted(
        key for key in current
        if key not in _RESUMABLE_CHANGES and saved.get(key) != current[key]
    )
    if different:
        changes = ", ".join(f"{key}: {saved.get(key)!r} -> {current[key]!r}" for key in different)
        raise TrainingError(
            f"--output {config.output!r} holds a different run ({changes}). "
            "Use another --output, the same settings to resume, or --overwrite."
        )
    summary_path = os.path.join(config.output, SUMMARY_FILE)
    if os.path.exists(summary_path) and _read_json(summary_path).get("completed_steps", 0) >= config.total_steps:
        raise TrainingError(
            f"--output {config.output!r} already holds a finished run of {config.total_steps} steps. "
            "Raise --epochs to train further, or use --overwrite to start again."
        )
    _write_json(config_path, current)
    progress_path = os.path.join(config.output, PROGRESS_FILE)
    return _read_json(progress_path)["epochs_done"] if os.path.exists(progress_path) else 0


class _ProgressFile(keras.callbacks.Callback):
    """Records finished virtual epochs, after the backup of the same epoch."""

    def __init__(self, path):
        super().__init__()
        self.path = path

    def on_epoch_end(self, epoch, logs=None):
        _write_json(self.path, {"epochs_done": epoch + 1})


def _token_statistics(dataset):
    """Batches, real tokens and padding fraction of one pass over a dataset."""
    batches = real = total = 0
    for inputs, labels in dataset:
        batches += 1
        for tokens in (inputs["encoder_tokens"], labels):
            real += int((tokens != 0).numpy().sum())
            total += int(tokens.shape[0] * tokens.shape[1])
    return batches, real, 1.0 - real / max(total, 1)


def _sample_translations(model, tokenizer, pairs, log):
    """Greedy translations of a few dev pairs, three shown, BLEU on all."""
    from keras_transformer.evaluation import evaluate_pairs
    from keras_transformer.translator import Translator

    result = evaluate_pairs(Translator(model, tokenizer), pairs, verbose=0)
    for pair, translation in list(zip(pairs, result["translations"]))[:3]:
        log(f"  {pair.source}\n  -> {translation}\n  (reference: {pair.target})")
    log(f"dev BLEU {result['bleu']:.2f} (greedy, first {len(pairs)} dev sentences; {result['bleu_signature']})")
    return {"dev_sample_bleu": result["bleu"], "dev_sample_sentences": len(pairs)}


def build_translator(config, **model_options):
    """The compiled Transformer a `TrainConfig` describes.

    Args:
        config: a resolved `TrainConfig`.
        **model_options: more arguments for `kt.models.transformer`, e.g.
            `embedding_scale=None` or `norm_first=True` (the ablations use
            them).

    Example:

    >>> config = TrainConfig(preset="tiny", vocabulary_size=100).resolved()
    >>> build_translator(config).name
    'transformer'
    """
    from keras_transformer import models
    from keras_transformer import training

    model = models.transformer(
        config.vocabulary_size,
        config.vocabulary_size,
        num_layers=config.num_layers,
        d_model=config.d_model,
        num_heads=config.num_heads,
        ff_dim=config.ff_dim,
        max_length=config.max_length,
        dropout=config.dropout,
        tie_embeddings=config.tie_embeddings,
        **model_options,
    )
    schedule = training.TransformerSchedule(config.d_model, warmup_steps=config.warmup_steps)
    model.compile(
        optimizer=keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        loss=training.MaskedSparseCrossentropy(label_smoothing=config.label_smoothing),
        metrics=[training.MaskedAccuracy()],
        jit_compile=config.jit_compile,
    )
    return model


def train_translator(config, overwrite=False, verbose=1, log=print, callbacks=()):
    """Trains (or resumes) a translator as `config` says; returns a summary dict.

    Args:
        config: a `TrainConfig`.
        overwrite: start from scratch even if `config.output` holds a run.
        verbose: Keras' `fit` verbosity (1: a progress bar per epoch).
        log: callable for one-line progress messages.
        callbacks: extra Keras callbacks, run after the package's own.

    Returns:
        A dict with train/dev loss, dev token accuracy, tokens per second,
        wall time and the step count, also written to `summary.json`.
    """
    import tensorflow as tf

    from keras_transformer.data import corpus
    from keras_transformer.data import pipeline
    from keras_transformer.data import tokenizer as tokenizer_lib

    start = time.time()
    config = config.resolved()
    epochs_done = prepare_output(config, overwrite=overwrite)
    output = config.output
    if config.mixed_precision:
        keras.config.set_dtype_policy(f"mixed_{config.mixed_precision}")
    keras.utils.set_random_seed(config.seed)

    train_pairs = corpus.load_bible_pairs("train", path=config.corpus)
    dev_pairs = corpus.load_bible_pairs("dev", path=config.corpus)
    vocabulary_path = os.path.join(output, VOCABULARY_FILE)
    if epochs_done == 0 or not os.path.exists(vocabulary_path):
        texts = [p.source for p in train_pairs] + [p.target for p in train_pairs]
        try:
            tokenizer_lib.train_tokenizer(texts, config.vocabulary_size, path=vocabulary_path)
        except ValueError as error:  # e.g. more pieces than the corpus supports
            raise TrainingError(f"--vocabulary-size: {error}")
    tokenizer = tokenizer_lib.load_tokenizer(vocabulary_path)
    train_tokens = pipeline.tokenize_pairs(train_pairs, tokenizer, config.max_length)
    dev_tokens = pipeline.tokenize_pairs(dev_pairs, tokenizer, config.max_length)
    log(
        f"corpus: {len(train_pairs)} train / {len(dev_pairs)} dev pairs, "
        f"{train_tokens.num_truncated} train pairs truncated to {config.max_length} tokens"
    )
    batching = dict(batch_tokens=config.batch_tokens, bucket=config.bucket, seed=config.seed)
    epoch_batches, epoch_tokens, padding = _token_statistics(
        pipeline.translation_dataset(train_tokens, shuffle=False, **batching)
    )
    log(f"batches: {epoch_batches} per pass over the data, {padding:.1%} padding tokens")
    train_data = pipeline.translation_dataset(train_tokens, repeat=True, **batching)
    train_data = train_data.skip(epochs_done * config.steps_per_epoch)
    dev_data = pipeline.translation_dataset(dev_tokens, shuffle=False, **batching)
    # A known length keeps Keras from warning "ran out of data" after each
    # validation pass over a bucketed dataset.
    dev_batches = _token_statistics(dev_data)[0]
    dev_data = dev_data.apply(tf.data.experimental.assert_cardinality(dev_batches))

    model = build_translator(config)
    log(
        f"model: preset {config.preset}, {model.count_params():,} parameters, "
        f"backend {keras.backend.backend()}, {config.total_steps} steps"
        + (f", resuming after epoch {epochs_done}" if epochs_done else "")
    )
    callbacks = [
        # Backup first: the progress file must never run ahead of it.
        keras.callbacks.BackupAndRestore(os.path.join(output, "backup"), double_checkpoint=True),
        _ProgressFile(os.path.join(output, PROGRESS_FILE)),
        keras.callbacks.CSVLogger(os.path.join(output, "log.csv"), append=True),
        keras.callbacks.TensorBoard(os.path.join(output, "logs")),
        keras.callbacks.TerminateOnNaN(),
        *callbacks,
    ]
    fit_start = time.time()
    history = model.fit(
        train_data,
        epochs=config.epochs,
        steps_per_epoch=config.steps_per_epoch,
        validation_data=dev_data,
        callbacks=callbacks,
        shuffle=False,  # tf.data already shuffles
        verbose=verbose,
    )
    fit_seconds = time.time() - fit_start
    trained_steps = config.total_steps - epochs_done * config.steps_per_epoch
    dev_loss, dev_accuracy = model.evaluate(dev_data, verbose=0)
    model.save(os.path.join(output, MODEL_FILE))
    sample = _sample_translations(model, tokenizer, dev_pairs[:SAMPLE_SENTENCES], log)
    summary = {
        "train_loss": history.history["loss"][-1] if history.history.get("loss") else None,
        "dev_loss": float(dev_loss),
        "dev_token_accuracy": float(dev_accuracy),
        "tokens_per_second": trained_steps * epoch_tokens / epoch_batches / fit_seconds,
        "padding_fraction": padding,
        "completed_steps": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
        "trained_steps_this_run": trained_steps,
        "fit_seconds": fit_seconds,
        "wall_seconds": time.time() - start,
        "parameters": model.count_params(),
        "backend": keras.backend.backend(),
        **sample,
    }
    _write_json(os.path.join(output, SUMMARY_FILE), summary)
    return summary
