"""What defines a training run: `TrainConfig`, its fields and their resolution (the presets: `presets`).

Importing this module imports neither Keras nor a backend, so the command
line can show its help and check its flags at once; Keras is imported when
a config is resolved.
"""

import dataclasses
import os

from keras_transformer.data.corpus_scan import DEFAULT_VOCABULARY_SAMPLE
from keras_transformer.errors import UserInputError
from keras_transformer.training.presets import DEFAULT_PRESET
from keras_transformer.training.presets import PRESETS
from keras_transformer.training.presets import hardware_defaults
from keras_transformer.training.presets import training_defaults

DEFAULT_MAX_LENGTH = 128
DISTRIBUTE_MODES = ("data", "model")
INPUT_PIPELINES = ("auto", "tf.data", "python")
# Fields that may differ when a run is resumed in the same folder (a backup
# holds whole arrays, so it reloads onto another number of devices; both
# input pipelines yield the same batches).
# The language names are labels only; dev BLEU and averaging pick among the
# weights, they do not change training.
RESUMABLE_CHANGES = (
    "output", "epochs", "jit_compile", "distribute", "input_pipeline", "flash_attention",
    "source_language", "target_language", "dev_bleu_sentences", "average_last",
)
# The fields that say where the corpus is and how to read and split it
# (`keras_transformer.data.parallel_corpus.ParallelCorpus`).
CORPUS_FIELDS = (
    "corpus", "dev", "test", "dev_fraction", "test_fraction", "header", "skip_bad_lines",
    "source_language", "target_language",
)


def check_jit_compile(jit_compile):
    """Refuses `jit_compile=True` on the torch backend, saying what to do instead.

    Keras' `torch.compile` of the train step graph-breaks in every layer
    call; `torch._dynamo` then crashes on this package's model (KeyError:
    'mask', torch 2.11-2.13), and where it ran (the crash patched out) a
    step was no faster than eager (tiny preset, CPU:
    benchmarks/findings/training-speed.md, "torch.compile").

    Args:
        jit_compile: True, False or "auto".

    Raises:
        UserInputError: `jit_compile` is True and the backend is torch.

    Example:

    >>> check_jit_compile("auto")  # Keras decides: eager on torch
    """
    import keras

    if jit_compile is True and keras.backend.backend() == "torch":
        raise UserInputError(
            "--jit-compile does not work on the torch backend: torch.compile of the train step crashes "
            "inside torch._dynamo (KeyError: 'mask'). Leave it off (--no-jit-compile, or no flag: the default "
            "trains eagerly on torch), or use KERAS_BACKEND=jax or tensorflow for a compiled train step."
        )


@dataclasses.dataclass
class TrainConfig:
    """Everything that defines a training run; saved as `config.json`.

    Model sizes default to the preset's; `preset=None` is "tiny" on any
    machine, trained longer on larger batches on a GPU or TPU.

    Args:
        output: folder for the model, vocabulary, config and logs. None
            (the default) takes `runs/SOURCE-TARGET` when the languages
            are known (`runs/es-en` for the embedded corpus), else
            `runs/NAME` after the corpus file's name.
        corpus: None for the embedded Spanish -> English Bible corpus; the
            path of a TSV (`source<TAB>target[<TAB>more references]`, or
            the Bible corpus' own format, recognised by its header); or a
            list of two aligned text files, source then target. UTF-8,
            gzipped or not (see `keras_transformer.data.parallel_files`).
        preset: "tiny", "small", "base", "big" or None.
        num_layers, d_model, num_heads, ff_dim: model size; None takes the
            preset's.
        dropout: residual dropout. Defaults to 0.1.
        max_length: longest source or target, in tokens. None (the
            default) is 128, or the starting run's with `start_from`.
        vocabulary_size: joint SentencePiece vocabulary; None takes the
            preset's (`TRAINING_DEFAULTS`: 4000 for tiny, else 8000).
        batch_tokens: tokens per batch (source or target side, padding
            included). None takes the preset's: 4096, or 8192 for tiny
            on a GPU or TPU (`ACCELERATOR_TRAINING_DEFAULTS`).
        epochs, steps_per_epoch, warmup_steps: virtual epochs, optimizer
            steps per virtual epoch, warm-up of the learning-rate schedule;
            None takes the preset's (`TRAINING_DEFAULTS`, on a GPU or TPU
            `ACCELERATOR_TRAINING_DEFAULTS` first).
        label_smoothing: defaults to 0.1, as in the paper.
        mixed_precision: "float32", "float16" or "bfloat16"; None (the
            default) is bfloat16 on a GPU whose bf16 peak
            `model_flops.PEAK_BF16_FLOPS` knows (A100, L4, L40S, H100,
            H200), float32 elsewhere. Resolved, float32 is None.
        jit_compile: True, False or "auto" (Keras decides: eager on torch
            and on a CPU-only TensorFlow). True is refused on torch, where
            `torch.compile` of the train step crashes (issue 13).
        bucket: batch sequences of similar length together.
        bucket_width: padded lengths are multiples of this (and
            max_length). Defaults to 32 on a GPU or TPU, 8 elsewhere. Each
            padded length is one batch shape, and JAX compiles one program
            per shape (about a minute each for the base model on a GPU),
            hence 32 there (lengths 32/64/96/128).
        tie_embeddings: share the decoder embedding with the output layer.
            None (the default) is True, or the starting run's.
        seed: seeds weights, dropout and data order.
        distribute: None (one device), "data" (data parallel: the model is
            replicated, every global batch is split across the devices) or
            "model" (JAX only: attention and feed-forward kernels are split
            across the devices of each host, see
            `model_parallel_layout_map`). Needs the JAX or TensorFlow
            backend; with a single device it trains on that one.
        input_pipeline: "auto" (the default: "tf.data" where TensorFlow
            imports, else "python"), "tf.data" (`tf.data`, tokenized with
            KerasHub) or "python" (a `keras.utils.PyDataset` tokenized with
            the `sentencepiece` library, no TensorFlow). Both yield the same
            batches.
        flash_attention: None (default) lets the backend pick the attention
            kernel (fused cuDNN / SDPA kernels on a GPU in float16 or
            bfloat16); False takes the explicit float32-softmax path, the
            fallback if a fused kernel misbehaves. A resumed run may change it.
        dev, test: dev / test pairs in the format of `corpus`, or None to
            split them off `corpus` by a hash of the source text.
        dev_fraction, test_fraction: the shares of `corpus` that the hash
            split sends to dev and test; None means 0.02 each.
        header: the TSV's first line is a header (skipped).
        skip_bad_lines: skip, count and report bad lines of the corpus
            instead of stopping at the first.
        source_language, target_language: names such as "de" and "en",
            labels only (the default output folder, the summary).
        stream: read the train pairs in chunks of lines inside the input
            pipeline (either one) instead of holding the corpus in memory
            (see `train_input`): for a corpus larger than memory. Defaults
            to False.
        vocabulary_sample: the vocabulary is learned from at most this many
            train sentences (both sides of half as many pairs, a uniform
            sample seeded by `seed`). Defaults to 200,000.
        dev_bleu_sentences: after each virtual epoch the first this many
            dev sentences are translated (greedy) and scored with BLEU;
            `model.keras` keeps the weights that scored best
            (`model_selection`). 0 turns it off: the last weights are kept.
            Defaults to 200.
        average_last: above 1, the trainable weights of this many last
            virtual epochs are averaged after training, as in the paper, and
            the average is kept if it scores a better dev BLEU (without dev
            BLEU: always). Defaults to 1 (no averaging).
        start_from: None (random weights, a new vocabulary), or the folder
            of a trained run to fine-tune: the new run keeps its model's
            sizes and its vocabulary, starts from its weights with a fresh
            optimizer, and takes `fine_tuning.FINE_TUNING_DEFAULTS` for the
            epochs, steps, warm-up and learning rate it does not set
            (`keras_transformer.training.fine_tuning`).
        lora_rank: with `start_from`, train only LoRA adapters of this rank
            (`keras_transformer.lora`) on `lora_targets`; the saved model
            holds the merged weights. None (the default) trains every weight.
        lora_targets: what `lora_rank` adapts: a list of "query", "key",
            "value", "output" (each attention layer's projections) and
            "embeddings" (the token embeddings, and with tied embeddings
            the output projection). None is `fine_tuning.LORA_TARGETS`.
        model_options: dict of more `models.transformer` arguments, or
            None. An imported Marian run records its own
            (`checkpoints.marian`: shared embeddings, sinusoids in halves,
            swish, ...); a run started from it keeps them.
        learning_rate: the peak of the learning-rate schedule (warm-up,
            then 1/sqrt(step) decay); None (the default) is the paper's
            d_model^-0.5 * warmup_steps^-0.5, or with `start_from` the
            fine-tuning default.

    Example:

    >>> config = TrainConfig(output="/tmp/run", preset="tiny").resolved()
    >>> config.d_model, config.num_layers
    (128, 2)
    """

    output: str = None
    corpus: object = None
    preset: str = None
    num_layers: int = None
    d_model: int = None
    num_heads: int = None
    ff_dim: int = None
    dropout: float = 0.1
    max_length: int = None
    vocabulary_size: int = None
    batch_tokens: int = None
    epochs: int = None
    steps_per_epoch: int = None
    warmup_steps: int = None
    label_smoothing: float = 0.1
    mixed_precision: str = None
    jit_compile: object = "auto"
    bucket: bool = True
    tie_embeddings: bool = None
    seed: int = 0
    distribute: str = None
    bucket_width: int = None
    input_pipeline: str = "auto"
    flash_attention: bool = None
    dev: object = None
    test: object = None
    dev_fraction: float = None
    test_fraction: float = None
    header: bool = False
    skip_bad_lines: bool = False
    source_language: str = None
    target_language: str = None
    stream: bool = False
    vocabulary_sample: int = DEFAULT_VOCABULARY_SAMPLE
    dev_bleu_sentences: int = 200
    average_last: int = 1
    start_from: str = None
    lora_rank: int = None
    lora_targets: list = None
    learning_rate: float = None
    model_options: dict = None

    def parallel_corpus(self):
        """The `ParallelCorpus` the corpus fields name (checked when resolved).

        Example:

        >>> TrainConfig(corpus=["train.de", "train.en"]).parallel_corpus().path
        ('train.de', 'train.en')
        """
        from keras_transformer.data.parallel_corpus import ParallelCorpus

        return ParallelCorpus.from_config({key: getattr(self, key) for key in CORPUS_FIELDS})

    def model_arguments(self):
        """The arguments of `trainer.build_translator` for this run.

        Example:

        >>> sorted(TrainConfig(preset="tiny").resolved().model_arguments())[:3]
        ['d_model', 'dropout', 'ff_dim']
        """
        names = ("vocabulary_size", "num_layers", "d_model", "num_heads", "ff_dim", "max_length", "dropout",
                 "tie_embeddings", "warmup_steps", "label_smoothing", "jit_compile", "flash_attention",
                 "learning_rate")
        return {**{name: getattr(self, name) for name in names}, **(self.model_options or {})}

    def resolved(self, corpus=None):
        """A copy with the preset, the hardware defaults and the output folder filled in.

        It checks no corpus file and reads no run: the caller gathers those
        facts (the trainer checks the corpus first). A fine-tuning config (`start_from`) must already hold the starting
        run's sizes and the fine-tuning defaults: the code that reads the
        starting run puts them in (`fine_tuning.fine_tuning_config`), so a
        run's configuration never reads another run itself. Its output
        folder defaults to `fine_tuned_output(start_from)`.

        Args:
            corpus: the `ParallelCorpus` of the corpus fields; its
                languages (for a TSV, from its first line) name the default
                output folder. None builds it from the fields.

        Returns:
            The resolved `TrainConfig`.

        Raises:
            UserInputError: a setting is out of range or contradicts another.
            ValueError: `start_from` is set but the starting run's sizes
                are not (call `fine_tuning.resolved_config` instead).
        """
        corpus = corpus or self.parallel_corpus()
        output = self.output or (fine_tuned_output(self.start_from) if self.start_from else _default_output(corpus))
        config = dataclasses.replace(self, output=output)
        if self.start_from is not None:
            if any(getattr(config, key) is None for key in ("num_layers", "d_model", "vocabulary_size")):
                raise ValueError("A fine-tuning TrainConfig takes its sizes from the starting run: resolve it with "
                                 "keras_transformer.training.fine_tuning.resolved_config(config).")
        elif self.lora_rank is not None:
            raise UserInputError("--lora adapts a trained model: give the run to start from with --from.")
        preset = config.preset or DEFAULT_PRESET
        if preset not in PRESETS:
            raise UserInputError(f"--preset must be one of {', '.join(PRESETS)}, got {preset!r}.")
        sizes = {key: getattr(config, key) or value for key, value in PRESETS[preset].items()}
        # One spelling in config.json: a path, or a list of two.
        paths = {key: list(value) if isinstance(value, tuple) else value
                 for key, value in (("corpus", corpus.path), ("dev", corpus.dev), ("test", corpus.test))}
        config = dataclasses.replace(config, preset=preset, **sizes, **paths)
        for key, value in (("max_length", DEFAULT_MAX_LENGTH), ("tie_embeddings", True)):
            if getattr(config, key) is None:
                config = dataclasses.replace(config, **{key: value})
        for key, value in {**training_defaults(preset), **hardware_defaults()}.items():
            if getattr(config, key) is None:
                config = dataclasses.replace(config, **{key: value})
        if config.mixed_precision == "float32":
            config = dataclasses.replace(config, mixed_precision=None)
        config._validate()
        return config

    def _validate(self):
        positive = ("num_layers", "d_model", "num_heads", "ff_dim", "max_length",
                    "vocabulary_size", "batch_tokens", "epochs", "steps_per_epoch", "warmup_steps",
                    "bucket_width")
        for key in positive:
            if getattr(self, key) < 1:
                raise UserInputError(f"--{key.replace('_', '-')} must be positive, got {getattr(self, key)}.")
        if self.d_model % self.num_heads:
            raise UserInputError(
                f"--d-model {self.d_model} is not divisible by --num-heads {self.num_heads}."
            )
        if self.batch_tokens < self.max_length:
            raise UserInputError(
                f"--batch-tokens {self.batch_tokens} is smaller than --max-length "
                f"{self.max_length}: a batch could not hold one sequence."
            )
        if not 0.0 <= self.dropout < 1.0 or not 0.0 <= self.label_smoothing < 1.0:
            raise UserInputError("--dropout and --label-smoothing must be in [0, 1).")
        if self.mixed_precision not in (None, "float16", "bfloat16"):
            raise UserInputError(
                f"--mixed-precision must be float32, float16 or bfloat16, got {self.mixed_precision!r}."
            )
        if self.input_pipeline not in INPUT_PIPELINES:
            raise UserInputError(
                f"--input-pipeline must be one of {', '.join(INPUT_PIPELINES)}, got {self.input_pipeline!r}."
            )
        if self.input_pipeline == "tf.data" and not tensorflow_imports():
            raise UserInputError(
                "--input-pipeline tf.data needs TensorFlow, which does not import here: "
                "pip install tensorflow, or use --input-pipeline python ("
                + ("it streams too, no TensorFlow; its shuffle differs)." if self.stream
                   else "the same batches, no TensorFlow).")
            )
        if self.dev_bleu_sentences < 0 or self.average_last < 1:
            raise UserInputError(
                f"--dev-bleu-sentences must be at least 0 and --average-last at least 1, got "
                f"{self.dev_bleu_sentences} and {self.average_last}."
            )
        if self.vocabulary_sample < 2:
            raise UserInputError(
                f"--vocabulary-sample must be at least 2 sentences (one pair), got {self.vocabulary_sample}."
            )
        if self.lora_rank is not None and self.lora_rank < 1:
            raise UserInputError(f"--lora must be a positive rank, got {self.lora_rank}.")
        if self.lora_targets is not None and not self.lora_rank:
            raise UserInputError("--lora-targets says what --lora adapts: give the rank with --lora.")
        if self.lora_targets is not None:
            from keras_transformer.lora import TARGETS

            unknown = [target for target in self.lora_targets if target not in TARGETS]
            if unknown or not set(self.lora_targets) - {"embeddings"}:
                raise UserInputError(f"--lora-targets must be some of {', '.join(TARGETS)}, at least one of them an "
                                     f"attention projection; got {self.lora_targets!r}.")
        if self.lora_rank and self.average_last > 1:
            raise UserInputError(
                "--average-last averages the trainable weights, which under --lora are the two factors of each "
                "adapter: their average is not the average adapter. Leave out --average-last with --lora."
            )
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise UserInputError(f"--learning-rate must be positive, got {self.learning_rate}.")
        if self.distribute not in (None, *DISTRIBUTE_MODES):
            raise UserInputError(f"--distribute must be data or model, got {self.distribute!r}.")
        import keras

        backend = keras.backend.backend()
        if self.distribute and backend not in ("jax", "tensorflow"):
            raise UserInputError(
                f"--distribute needs the jax or tensorflow backend (KERAS_BACKEND=jax or tensorflow); "
                f"the {backend} backend trains on one device here."
            )
        check_jit_compile(self.jit_compile)
        if self.distribute == "model" and backend != "jax":
            raise UserInputError(
                "--distribute model (keras.distribution.ModelParallel) needs the jax backend "
                "(KERAS_BACKEND=jax); on tensorflow use --distribute data (MirroredStrategy)."
            )

    @property
    def total_steps(self):
        """Optimizer steps of the whole run."""
        return self.epochs * self.steps_per_epoch


def fine_tuned_output(start_from):
    """The default `--output` of a run fine-tuned from `start_from`: its folder's name plus `-fine-tuned`.

    Example:

    >>> fine_tuned_output("runs/es-en/")
    'runs/es-en-fine-tuned'
    """
    return os.path.normpath(start_from) + "-fine-tuned"


def _default_output(corpus):
    source, target = corpus.languages
    if source and target:
        return os.path.join("runs", f"{source}-{target}")
    path = corpus.path[0] if isinstance(corpus.path, tuple) else corpus.path
    return os.path.join("runs", os.path.basename(path).split(".")[0] or "corpus")


def tensorflow_imports():
    """True when `import tensorflow` works here.

    Example:

    >>> tensorflow_imports() in (True, False)
    True
    """
    try:
        import tensorflow  # noqa: F401
    except Exception:  # ImportError, or a broken install (missing libraries...)
        return False
    return True
