"""Fine-tuning: a training run that starts from a trained run's model and vocabulary.

`keras-transformer train --from RUN_FOLDER` (`TrainConfig.start_from`)
builds the model the starting run trained, with its sizes and its
vocabulary (`vocabulary.spm` is copied, never learned again), puts that
run's weights in it, and trains on the new corpus with a fresh optimizer
and a fine-tuning schedule (`FINE_TUNING_DEFAULTS`: a short warm-up, a
lower peak learning rate, a short budget). With `lora_rank` (`--lora RANK`)
only low-rank adapters on the attention projections train
(`keras_transformer.lora`). The new folder is an ordinary run folder: it
resumes, keeps the weights with the best dev BLEU, translates, evaluates
and exports like any other, and its `config.json` records `start_from`.

Everything here runs before the new run writes anything: a starting
folder without a model or vocabulary, a model this version cannot read,
sizes that contradict it, or `--from` equal to `--output` stop the command
with nothing written; so does a corpus the starting vocabulary does not
cover (`train_input.TrainInput`, given that vocabulary, checks it as it
reads the corpus).
"""

import dataclasses
import os

from keras_transformer.errors import UserInputError

# The fields that define the model's shape: a fine-tuning run takes them
# from the starting run, and a flag that contradicts one is refused.
ARCHITECTURE_FIELDS = (
    "preset", "num_layers", "d_model", "num_heads", "ff_dim", "max_length", "vocabulary_size", "tie_embeddings",
)
# Recorded by some runs only (an imported Marian run's options), kept when present.
OPTIONAL_ARCHITECTURE_FIELDS = ("model_options",)
# The training settings a fine-tuning run takes when it does not set them,
# for every preset. `learning_rate` is the schedule's peak. Measured on the
# Spanish -> KJV shift from the default tiny model (docs/fine-tuning.md):
# 300 steps take minutes on a CPU, and of the peaks 5e-4, 1e-3, 2e-3 and
# 4e-3, 2e-3 scored the best dev BLEU.
FINE_TUNING_DEFAULTS = dict(epochs=3, steps_per_epoch=100, warmup_steps=50, learning_rate=2e-3)
# Rank-8 adapters on the same shift, 300 steps: of the peaks 1e-3, 3e-3, 1e-2
# and 3e-2, W_Q and W_V scored best at 1e-2; at 1e-2, adding the embeddings
# gained more than adding W_K and W_O, and adapting all of them gained a
# little more again for more parameters and a slower step
# (docs/fine-tuning.md, "What the table says").
LORA_DEFAULTS = dict(learning_rate=1e-2)
# What `--lora` adapts unless `--lora-targets` says otherwise: the LoRA
# paper's W_Q and W_V, and the token embeddings (with tied embeddings, the
# output projection too), which a shift of vocabulary needs.
LORA_TARGETS = ("query", "value", "embeddings")


@dataclasses.dataclass(frozen=True)
class StartingRun:
    """A trained run folder a new run starts from.

    Args:
        folder: the run folder.
        config: its `config.json`, a dict.
        model_path: its `model.keras`.
        vocabulary_path: its `vocabulary.spm`.
        weights: its model's weights (NumPy arrays, in the model's
            order), once read (`read_starting_run(..., weights=True)`).
    """

    folder: str
    config: dict
    model_path: str
    vocabulary_path: str
    weights: list = None

    @property
    def architecture(self):
        """The starting run's `ARCHITECTURE_FIELDS`, as its config records them."""
        return {**{key: self.config[key] for key in ARCHITECTURE_FIELDS},
                **{key: self.config[key] for key in OPTIONAL_ARCHITECTURE_FIELDS if self.config.get(key)}}


def read_starting_run(folder, output=None, weights=False):
    """Checks a run folder to start from; reads its config, and on request its weights.

    Args:
        folder: the `--from` folder.
        output: the new run's `--output`, which must be another folder;
            None is its default, `train_config.fine_tuned_output(folder)`,
            which always is.
        weights: read the model's weights too (`read_starting_weights`),
            as the trainer does before it writes anything.

    Returns:
        A `StartingRun`.

    Raises:
        UserInputError: the folder is the output folder, or lacks a model,
            a vocabulary or a config that records the model's sizes.

    Example:

    >>> import tempfile
    >>> read_starting_run(tempfile.mkdtemp())
    Traceback (most recent call last):
    ...
    keras_transformer_runtime.errors.UserInputError: --from ... holds no model.keras, no vocabulary.spm and no config.json: ...
    """
    from keras_transformer.training import run_folder
    from keras_transformer_runtime.run_tokenizer import vocabulary_files

    if not os.path.isdir(folder):
        raise UserInputError(f"--from {folder!r} is not a folder: pass the --output folder of a finished training run.")
    if output is not None and os.path.realpath(folder) == os.path.realpath(output):
        raise UserInputError(
            f"--from {folder!r} is the --output folder itself: fine-tuning writes a new run, which would "
            "overwrite the model it starts from. Pass another --output."
        )
    vocabulary = vocabulary_files(folder)
    paths = {name: os.path.join(folder, name) for name in (run_folder.MODEL_FILE, *vocabulary, run_folder.CONFIG_FILE)}
    missing = [name for name, path in paths.items() if not os.path.isfile(path)]
    if missing:
        named = missing[0] if len(missing) == 1 else ", no ".join(missing[:-1]) + " and no " + missing[-1]
        raise UserInputError(
            f"--from {folder!r} holds no {named}: pass the --output folder of a finished "
            "`keras-transformer train` run (it holds model.keras, vocabulary.spm and config.json)."
        )
    try:
        config = run_folder.read_json(paths[run_folder.CONFIG_FILE])
    except (OSError, ValueError) as error:
        raise UserInputError(f"{paths[run_folder.CONFIG_FILE]!r} is unreadable ({error}).") from error
    absent = [key for key in ARCHITECTURE_FIELDS if not isinstance(config, dict) or key not in config]
    if absent:
        raise UserInputError(
            f"{paths[run_folder.CONFIG_FILE]!r} does not record the model's {', '.join(absent)}: it was not "
            "written by `keras-transformer train`, or by an incompatible version; nothing was changed."
        )
    start = StartingRun(folder, _with_source_vocabulary(folder, config), paths[run_folder.MODEL_FILE],
                        paths[vocabulary[0]])
    return dataclasses.replace(start, weights=read_starting_weights(start)) if weights else start


def _with_source_vocabulary(folder, config):
    """`config`, whose `model_options` name the encoder's vocabulary where a Marian target has a table of its own.

    A run imported before `run_config` recorded `source_vocabulary_size`
    gets it from its tokenizer, whose source table sizes the encoder.
    """
    from keras_transformer_runtime.run_tokenizer import has_target_vocabulary_of_its_own

    options = config.get("model_options") or {}
    if "source_vocabulary_size" in options or not has_target_vocabulary_of_its_own(folder):
        return config
    from keras_transformer_runtime.marian_tokenizer import MarianTokenizer

    size = MarianTokenizer(folder).source_vocabulary_size()
    return {**config, "model_options": {**options, "source_vocabulary_size": size}}


def resolved_config(config, corpus=None):
    """`config.resolved(corpus)`, with the starting run's sizes and the fine-tuning defaults when it fine-tunes.

    Reads the run `config.start_from` names (`read_starting_run`), checks
    the flags against it (`fine_tuning_config`) and resolves the rest; a
    config without `start_from` is simply resolved. The trainer takes the
    same steps, keeping the starting run it read.

    Args:
        config: a `TrainConfig`.
        corpus: as `TrainConfig.resolved`.

    Returns:
        The resolved `TrainConfig`.

    Raises:
        UserInputError: as `read_starting_run`, `fine_tuning_config` and
            `TrainConfig.resolved`.

    Example:

    >>> from keras_transformer.training.train_config import TrainConfig
    >>> resolved_config(TrainConfig(preset="tiny")).d_model
    128
    """
    if config.start_from is None:
        return config.resolved(corpus)
    start = read_starting_run(config.start_from, config.output)
    return fine_tuning_config(config, start).resolved(corpus)


def fine_tuning_config(config, start):
    """`config` with the starting run's sizes and the fine-tuning defaults filled in.

    A size the new run sets (not None) must equal the starting run's.

    Args:
        config: the new run's unresolved `TrainConfig`.
        start: a `StartingRun`.

    Returns:
        The `TrainConfig`, still to be resolved.

    Raises:
        UserInputError: a size contradicts the starting model, naming each.
    """
    contradictions = [
        f"--{key.replace('_', '-')} {getattr(config, key)!r} (the model has {value!r})"
        for key, value in start.architecture.items()
        if getattr(config, key) is not None and getattr(config, key) != value
    ]
    if contradictions:
        raise UserInputError(
            f"--from {start.folder!r} trained another model: {', '.join(contradictions)}. A fine-tuning run "
            "keeps the model's sizes and vocabulary; leave these flags out."
        )
    defaults = {**FINE_TUNING_DEFAULTS, **(LORA_DEFAULTS if config.lora_rank else {})}
    filled = {key: value for key, value in defaults.items() if getattr(config, key) is None}
    return dataclasses.replace(config, **start.architecture, **filled)


def read_starting_weights(start):
    """The starting run's trained weights, as NumPy arrays in the model's order.

    Read before the new run writes anything, so a model this version
    cannot read stops the command first. The optimizer is not read: a
    fine-tuning run starts a fresh one.

    Raises:
        UserInputError: `model.keras` is missing, damaged or holds layers
            this package does not define.
    """
    import keras

    from keras_transformer import model_file

    trained = model_file.load_model(start.model_path, compile=False)
    return [keras.ops.convert_to_numpy(variable) for variable in trained.weights]


def assign_starting_weights(model, start):
    """Puts `start.weights` into `model`, built with the starting run's sizes.

    Raises:
        UserInputError: the weights do not fit the model the starting run's
            config describes (another version wrote them, or the folder
            mixes files of different runs).
    """
    variables = model.weights
    mismatched = [
        f"{variable.path} {tuple(variable.shape)} against {tuple(value.shape)}"
        for variable, value in zip(variables, start.weights) if tuple(variable.shape) != tuple(value.shape)
    ]
    if len(variables) != len(start.weights) or mismatched:
        raise UserInputError(
            f"{start.model_path!r} does not fit the model its config.json describes "
            f"({len(start.weights)} weights, the model {len(variables)}"
            + (f"; {mismatched[0]}" if mismatched else "")
            + "): an incompatible version wrote it, or the folder mixes files of different runs."
        )
    for variable, value in zip(variables, start.weights):
        variable.assign(value)
