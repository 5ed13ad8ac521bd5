"""The package's main job: train a translator end to end.

corpus (the embedded Spanish -> English Bible corpus, or your own files:
see `data.parallel_corpus`) -> SentencePiece vocabulary -> bucketed
batches -> functional Transformer -> `model.fit` with the paper's schedule
and a masked, label-smoothed loss -> an output folder holding the model
(the weights with the best dev BLEU: `model_selection`), the vocabulary,
the config, the logs and a learning-curve PNG (`learning_curve`).
`keras-transformer train` is a thin layer over `train_translator`.

The batches come from `tf.data` wherever TensorFlow imports, else from a
`keras.utils.PyDataset` tokenized with the `sentencepiece` library
(`input_pipeline`): the same batches either way (one NumPy batch plan), so
a run can even resume on the other one. With `stream=True` the corpus is
never held: it is scanned once and the train pairs stream through
`tf.data`, or without TensorFlow through a chunked `PyDataset`
(`train_input`, which reads the corpus and builds the batches in every
mode). TensorFlow is imported only on the `tf.data` path, for
TensorBoard logs and for `tf.distribute`.

Training runs as `epochs` "virtual epochs" of `steps_per_epoch` steps over a
repeated dataset. A backup is written at the end of each one, so a killed
run, started again with the same command, resumes from the last virtual
epoch, skips the batches it already trained on, and ends after the same
number of steps as an uninterrupted run. A damaged backup is detected
before training (the previous one is used, or the run stops with a message;
it never silently starts again from scratch), a NaN or infinite loss stops
the run at that step with the last good backup kept, and too little free
disk space fails before the first step. The run folder's files, resuming
and backups are `run_folder`'s job; devices are `distribute`'s; the
settings are a `TrainConfig` (`train_config`).
"""

import dataclasses
import math
import os
import time

import keras

from keras_transformer.training import compile_ahead
from keras_transformer.training import distribute
from keras_transformer.training import fine_tuning
from keras_transformer.training import learning_curve
from keras_transformer import lora
from keras_transformer.training import model_flops
from keras_transformer.training import model_selection
from keras_transformer.training import non_finite_loss
from keras_transformer.training import run_folder
from keras_transformer.training import train_input
from keras_transformer.training import training_speed
from keras_transformer.data.parallel_corpus import ParallelCorpus
from keras_transformer.training.masked_loss import MaskedAccuracy
from keras_transformer.training.masked_loss import MaskedSparseCrossentropy
from keras_transformer.training.schedule import TransformerSchedule
from keras_transformer.training.train_config import CORPUS_FIELDS
from keras_transformer.training.train_config import TrainConfig  # noqa: F401 (the trainer's input, importable from here)
from keras_transformer.training.train_config import check_jit_compile
from keras_transformer.training.train_config import tensorflow_imports
from keras_transformer_runtime.run_tokenizer import load_run_tokenizer
from keras_transformer_runtime.special_tokens import START_ID
from keras_transformer_runtime.timings import phase


class _EpochTensorBoard(keras.callbacks.TensorBoard):
    """TensorBoard logs once a virtual epoch; async-safe like `run_folder.EpochBackup`.

    With `update_freq="epoch"` Keras' batch-end hook writes nothing per
    batch but the train graph, after the first batch, which only a
    `tf.function` has. To find that out it reads `self.model`, and on JAX
    reading `Callback.model` writes the running step's state back into the
    model's variables. On a worker thread that lands while the next steps
    run: the variables then hold arrays those steps have donated, and the
    step after fails ("Array has been deleted", issue 31). So the hook runs
    only on TensorFlow, where Keras never uses worker threads.
    """

    async_safe = True

    def on_train_batch_end(self, batch, logs=None):
        if keras.backend.backend() == "tensorflow":
            super().on_train_batch_end(batch, logs)


def _show_translations(pairs, translations, log):
    for pair, translation in list(zip(pairs, translations))[:3]:
        log(f"  {pair.source}\n  -> {translation}\n  (reference: {pair.target})")


def build_translator(
    vocabulary_size,
    *,
    num_layers,
    d_model,
    num_heads,
    ff_dim,
    max_length,
    dropout=0.1,
    tie_embeddings=True,
    warmup_steps=4000,
    label_smoothing=0.1,
    jit_compile="auto",
    learning_rate=None,
    source_vocabulary_size=None,
    **model_options,
):
    """A compiled Transformer with the paper's optimizer, schedule and loss.

    `TrainConfig.model_arguments()` gives these arguments for a training
    run; the ablations pass their own.

    Args:
        vocabulary_size: int, the target's, and the source's unless
            `source_vocabulary_size` is given.
        num_layers, d_model, num_heads, ff_dim, max_length: as `kt.models.transformer`.
        dropout, tie_embeddings: as `kt.models.transformer`.
        warmup_steps: int, of `TransformerSchedule`.
        learning_rate: float, the schedule's peak (at `warmup_steps`);
            None is the paper's, `d_model^-0.5 * warmup_steps^-0.5`.
        label_smoothing: float, of `MaskedSparseCrossentropy`.
        source_vocabulary_size: int, the encoder's vocabulary where it is
            not the target's (an imported Marian run whose target has a
            table of its own); None shares `vocabulary_size`.
        jit_compile: as `Model.compile`; True is refused on torch
            (`train_config.check_jit_compile`).
        **model_options: more arguments for `kt.models.transformer`, e.g.
            `embedding_scale=None`, `norm_first=True` or `flash_attention`.

    Returns:
        The compiled `keras.Model`.

    Example:

    >>> from keras_transformer.training.train_config import TrainConfig
    >>> config = TrainConfig(preset="tiny", vocabulary_size=100).resolved()
    >>> build_translator(**config.model_arguments()).name
    'transformer'
    """
    from keras_transformer import models

    check_jit_compile(jit_compile)
    model = models.transformer(
        source_vocabulary_size or vocabulary_size,
        vocabulary_size,
        num_layers=num_layers,
        d_model=d_model,
        num_heads=num_heads,
        ff_dim=ff_dim,
        max_length=max_length,
        dropout=dropout,
        tie_embeddings=tie_embeddings,
        **model_options,
    )
    schedule = TransformerSchedule(d_model, warmup_steps=warmup_steps)
    if learning_rate is not None:
        schedule = TransformerSchedule.with_peak(d_model, warmup_steps, learning_rate)
    model.compile(
        optimizer=keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        loss=MaskedSparseCrossentropy(label_smoothing=label_smoothing),
        metrics=[MaskedAccuracy()],
        jit_compile=jit_compile,
    )
    return model


def train_translator(
    config, overwrite=False, verbose=1, log=print, callbacks=(), sample_sentences=None
):
    """Trains (or resumes) a translator as `config` says; returns a summary dict.

    Before it writes anything it reads the whole corpus (with `stream`:
    scans it once, keeping the dev and test pairs and a vocabulary sample;
    a bad line is an error, or with `skip_bad_lines` a warning; so is an
    empty train or dev split). Before the first step it checks the output folder (writable,
    same run, enough free space for the model and its backups) and the
    backups it would resume from; a NaN or infinite loss stops training at that step
    with a `UserInputError` and leaves the last good backup in place.

    Args:
        config: a `TrainConfig`.
        overwrite: start from scratch even if `config.output` holds a run.
        verbose: Keras' `fit` verbosity (1: a progress bar per epoch).
        log: callable for one-line progress messages.
        callbacks: extra Keras callbacks, run after the package's own.
        sample_sentences: overrides `config.dev_bleu_sentences`, the dev
            sentences scored with BLEU after each virtual epoch to choose
            the weights kept (0: the last ones). Defaults to the config's.

    Returns:
        A dict with train/dev loss, dev token accuracy, tokens per second,
        seconds a step, model FLOP/s and MFU (`training_speed.TrainingSpeed.report`),
        wall time and the step count, also written to `summary.json`.

    Raises:
        UserInputError: bad settings, a bad corpus line (its file and line
            named), an empty train or dev split, an unusable output folder
            or backup, too little disk space, or a loss that stopped being
            finite.
    """
    start_time = time.time()
    process_id, num_processes = distribute.join_processes()  # before anything touches JAX (resolving does)
    if sample_sentences is not None:
        config = dataclasses.replace(config, dev_bleu_sentences=sample_sentences)
    # The facts the settings depend on are gathered first: the corpus
    # (its files checked) and the run to start from. Resolved once, the
    # config then hands each part only the values it uses.
    corpus = ParallelCorpus(
        config.corpus, **{name: getattr(config, name) for name in CORPUS_FIELDS if name != "corpus"}
    )
    corpus.check()
    start = None
    if config.start_from:  # the model and vocabulary to start from, checked before anything is written
        start = fine_tuning.read_starting_run(config.start_from, config.output, weights=True)
        config = fine_tuning.fine_tuning_config(config, start)
    config = config.resolved(corpus)
    model_arguments = config.model_arguments()
    placement = distribute.place(config.distribute, log, num_heads=config.num_heads, ff_dim=config.ff_dim)
    inputs = train_input.TrainInput(
        corpus, max_length=config.max_length, batch_tokens=config.batch_tokens, bucket=config.bucket,
        bucket_width=config.bucket_width, seed=config.seed, stream=config.stream,
        vocabulary_sample=config.vocabulary_sample, input_pipeline=config.input_pipeline,
        vocabulary_size=config.vocabulary_size, vocabulary_from=config.start_from, placement=placement,
        decoder_start_id=(config.model_options or {}).get("decoder_start_id", START_ID),
        languages=(config.source_language, config.target_language),
    )
    # The whole corpus is read before the output folder is touched: a bad
    # line stops the run with nothing written, so the fixed command starts afresh.
    # Streamed (--stream), it is scanned once instead, keeping what is small.
    with phase("load"):
        corpus_data = inputs.read_corpus(log)
    # Set either way and restored after: a policy left by an earlier run in
    # the process (or reset by keras.backend.clear_session()) must not decide this one's.
    previous_policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(f"mixed_{config.mixed_precision}" if config.mixed_precision else "float32")
    keras.utils.set_random_seed(config.seed)
    previous_distribution = keras.distribution.distribution() if placement.distribution else None
    if placement.distribution:
        # Before the model is built: its variables are created sharded.
        keras.distribution.set_distribution(placement.distribution)
    try:
        return _train(config, model_arguments, inputs, corpus_data, placement, start, start_time,
                      overwrite=overwrite, process=(process_id, num_processes), verbose=verbose, log=log,
                      callbacks=callbacks)
    finally:
        keras.config.set_dtype_policy(previous_policy)
        if placement.distribution:
            keras.distribution.set_distribution(previous_distribution)


def _train(config, model_arguments, inputs, corpus_data, placement, start, start_time, *, overwrite, process, verbose,
           log, callbacks):
    output = config.output
    with placement.scope():
        model = build_translator(**model_arguments)
        if start is not None:
            fine_tuning.assign_starting_weights(model, start)
        if config.lora_rank:
            lora.enable_lora_on(model, config.lora_rank, config.lora_targets or fine_tuning.LORA_TARGETS)
        # The output folder is touched only once the model is built and holds its starting weights.
        recorded_epochs = run_folder.prepare_output(
            output, dataclasses.asdict(config), config.total_steps, overwrite, *process
        )
        run_folder.check_free_space(output, model.count_params(), config.average_last if config.average_last > 1 else 0)
        epochs_done = run_folder.restore_point(model, output, config.steps_per_epoch, recorded_epochs, log, placement)
    random_states = run_folder.read_progress(output).get("random_states")
    random_state = random_states.get(str(epochs_done)) if epochs_done and isinstance(random_states, dict) else None

    vocabulary_path = os.path.join(output, run_folder.VOCABULARY_FILE)
    with phase("load"):
        if inputs.vocabulary_from or epochs_done == 0 or not os.path.exists(vocabulary_path):
            inputs.write_vocabulary(corpus_data, vocabulary_path)
        data = inputs.train_data(corpus_data, vocabulary_path, epochs_done * config.steps_per_epoch, log)
    train_data, dev_data, dev_pairs = data.train, data.dev, corpus_data.splits["dev"]

    trainable = sum(int(math.prod(variable.shape)) for variable in model.trainable_weights)
    log(
        f"model: preset {config.preset}, {model.count_params():,} parameters"
        + (f" ({trainable:,} trainable: LoRA rank {config.lora_rank} on "
           f"{', '.join(config.lora_targets or fine_tuning.LORA_TARGETS)})" if config.lora_rank else "")
        + (f", starting from {config.start_from}" if config.start_from else "")
        + f", backend {keras.backend.backend()}, {config.total_steps} steps"
        + (f", resuming after epoch {epochs_done}" if epochs_done else "")
    )
    tensorboard = []
    if tensorflow_imports():  # Keras writes TensorBoard logs with tf.summary
        tensorboard = [_EpochTensorBoard(os.path.join(output, run_folder.TENSORBOARD_FOLDER))]
    else:
        log("TensorBoard logs need TensorFlow, which does not import here; the metrics are in log.csv")
    dev_bleu = None
    if config.dev_bleu_sentences:
        dev_bleu = model_selection.DevBleu(
            dev_pairs[: config.dev_bleu_sentences],
            load_run_tokenizer(output, *inputs.languages),
            output,
            config.steps_per_epoch,
            # On TensorFlow one compiled decoding program, reused every epoch, reads the weights as they are.
            # Compiling costs about as much as two eager scorings, so short runs score eagerly
            # (benchmarks/findings/training-speed.md, "Compiled or not").
            jit_compile=placement.devices == 1 and config.epochs - epochs_done > 3,
            log=log,
        )
    selection = [dev_bleu] if dev_bleu else []
    if config.average_last > 1:
        selection.append(model_selection.LastCheckpoints(output, config.average_last))
    speed = training_speed.TrainingSpeed(
        config.steps_per_epoch,
        flops_per_step=model_flops.mean_training_flops(
            data.batch_shapes, config.num_layers, config.num_layers, config.d_model, config.ff_dim,
            config.vocabulary_size,
        ),
        devices=placement.devices, device_name=model_flops.accelerator_name(), log=log,
    )
    progress = run_folder.ProgressFile(os.path.join(output, run_folder.PROGRESS_FILE), epochs_done)
    keeper = model_selection.KeepBest(output, dev_bleu, config.average_last, log)
    stop_on_non_finite = non_finite_loss.StopOnNonFiniteLoss(config.steps_per_epoch)
    clock = training_speed.RunClock(config.epochs, start_time, log)
    callbacks = [
        speed,  # first: its clock stops before the others' epoch-end work
        # Backup first: the progress file must never run ahead of it. The
        # last backup stays after training, so a larger --epochs continues.
        run_folder.EpochBackup(os.path.join(output, run_folder.BACKUP_FOLDER)),
        *([lora.RestartAdapters(config.seed + epochs_done)] if config.lora_rank and epochs_done else []),
        run_folder.RestoreRandomState(random_state),
        progress,
        # Before the clock starts the first epoch: compiling is not projected onto every epoch.
        *([compile_ahead.StepsCompiledAhead(data.batch_shapes, dev_data)]
          if model_flops.accelerator_name() and config.total_steps >= (data.batches_per_pass or math.inf) else []),
        training_speed.ValidationCompiledFirst(dev_data),
        # Before the loggers: dev BLEU joins the epoch's logs.
        *selection,
        keras.callbacks.CSVLogger(os.path.join(output, run_folder.LOG_FILE), append=True),
        *tensorboard,
        learning_curve.LearningCurve(output, config.steps_per_epoch, log),
        stop_on_non_finite,
        # Last of the package's epoch ends: its epochs' times include the others' epoch-end work.
        clock,
        # When training ends, after the speed is said: the weights kept, before the user's callbacks see them.
        keeper,
        *callbacks,
    ]
    fit_start = time.time()
    try:
        history = model.fit(
            train_data,
            epochs=config.epochs,
            steps_per_epoch=config.steps_per_epoch,
            validation_data=dev_data,
            callbacks=callbacks,
            shuffle=False,  # the batch plan already shuffles
            verbose=verbose,
        )
    except non_finite_loss.NonFiniteLoss as stop:
        raise non_finite_loss.stop_error(stop_on_non_finite.first_failure() or stop, config) from None
    except Exception as error:
        lost = distribute.lost_process_error(error, placement, progress.epochs_done)
        if lost is None:
            raise
        raise lost from error
    fit_seconds = speed.train_end_time - fit_start  # without the weights kept after the last epoch
    trained_steps = config.total_steps - epochs_done * config.steps_per_epoch
    speed_report, kept = speed.report(), keeper.kept
    dev_loss, dev_accuracy = model.evaluate(dev_data, verbose=0)
    sample = {}
    if dev_bleu:
        if dev_bleu.best_translations:
            _show_translations(dev_bleu.pairs, dev_bleu.best_translations, log)
        sample = {"dev_sample_bleu": kept["dev_bleu"], "dev_sample_sentences": len(dev_bleu.pairs)}
    summary = {
        "train_loss": history.history["loss"][-1] if history.history.get("loss") else None,
        "dev_loss": float(dev_loss),
        "dev_token_accuracy": float(dev_accuracy),
        "tokens_per_second": trained_steps * data.tokens_per_batch / fit_seconds,
        "padding_fraction": data.padding,
        "completed_steps": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
        "trained_steps_this_run": trained_steps,
        "fit_seconds": fit_seconds,
        "wall_seconds": time.time() - start_time,
        "parameters": model.count_params(),
        "trainable_parameters": trainable,
        "backend": keras.backend.backend(),
        "input_pipeline": data.pipeline,
        "stream": config.stream,
        "devices": placement.devices,
        "output": output,
        "corpus_format": corpus_data.splits.format,
        "source_language": corpus_data.splits.source_language,
        "target_language": corpus_data.splits.target_language,
        "train_pairs": corpus_data.train_pairs,
        "dev_pairs": len(dev_pairs),
        "skipped_lines": dict(corpus_data.splits.skipped),
        **speed_report,
        **kept,
        **sample,
    }
    run_folder.write_json(os.path.join(output, run_folder.SUMMARY_FILE), summary)
    estimate = (f" (estimated after virtual epoch {clock.estimates[-1][0]}: {training_speed.duration(clock.estimates[-1][1])})"
                if clock.estimates else "")
    log(f"time: the run took {training_speed.duration(summary['wall_seconds'])}{estimate}")
    return summary
