"""Train model variants with several seeds on the same data; compare them.

A variant is a name and a dict of options for `trainer.build_translator`:
model sizes, `tie_embeddings`, and anything `kt.models.transformer` takes
(e.g. `embedding_scale=None`, `merge="concat"`,
`position_dim=32`, `logit_scale="linear"`, `norm_first=True`,
`output_initializer=...`). Every variant and seed trains for the same steps
on the same tokenized corpus, with the paper's schedule and optimizer, and
is evaluated on the dev split every `eval_every` steps.

Ablations use label smoothing 0, so the dev loss is the cross-entropy per
target token (its exponential is the perplexity) and compares across
variants.

`keras-transformer ablate` is the command-line front end; the tutorials call
`run_ablation` and `summarize` directly.
"""

import ast
import dataclasses
import json
import math
import os
import time

import keras
import numpy as np

from keras_transformer.training import trainer

# The options the settings give a default for (the variants may change them).
_CONFIG_OPTIONS = ("num_layers", "d_model", "num_heads", "ff_dim", "tie_embeddings", "dropout")

VARIANTS = {
    "baseline": {},
    "no_embedding_scale": {"embedding_scale": None},
    "untied": {"tie_embeddings": False},
    "untied_no_embedding_scale": {"tie_embeddings": False, "embedding_scale": None},
    "pre_ln": {"norm_first": True},
    "logit_scale_linear": {"logit_scale": "linear"},
    "logit_scale_none": {"logit_scale": 1.0},
}


@dataclasses.dataclass
class AblationSettings:
    """What every variant shares: data, size, steps and evaluation.

    Args:
        corpus: None for the embedded corpus, the path of a TSV, or a
            `keras_transformer.data.ParallelCorpus` (your own files, their
            splits and bad-line handling).
        num_layers, d_model, num_heads, ff_dim: the base model size.
        dropout: residual dropout.
        max_length: longest sequence kept, in tokens.
        vocabulary_size: joint SentencePiece vocabulary.
        batch_tokens: tokens per batch.
        steps: optimizer steps per run.
        eval_every: steps between dev evaluations.
        warmup_steps: warm-up of the schedule; None takes `steps // 5`.
        train_pairs: use only the first N training pairs (None: all).

    The defaults are the full setting (tens of minutes per run on a CPU,
    a minute or two on a GPU); `QUICK` is a minutes-long CPU setting.
        dev_pairs: evaluate on the first N dev pairs (None: all).

    Example:

    >>> AblationSettings(steps=100, eval_every=25).evaluations
    4
    """

    corpus: str = None
    num_layers: int = 2
    d_model: int = 128
    num_heads: int = 4
    ff_dim: int = 512
    dropout: float = 0.1
    max_length: int = 64
    vocabulary_size: int = 4000
    batch_tokens: int = 2048
    steps: int = 1000
    eval_every: int = 100
    warmup_steps: int = None
    train_pairs: int = None
    dev_pairs: int = 200

    @property
    def evaluations(self):
        """Dev evaluations per run."""
        return max(1, self.steps // self.eval_every)


QUICK = AblationSettings(
    d_model=64, num_heads=4, ff_dim=256, num_layers=2, max_length=48,
    vocabulary_size=2000, batch_tokens=1536, steps=300, eval_every=100, dev_pairs=200,
)


def parse_variant(text):
    """A variant from `name` (see `VARIANTS`) or `name:key=value,key=value`.

    Values are Python literals (`None`, `True`, `32`, `"linear"`); anything
    else is taken as a string.

    Example:

    >>> parse_variant("concat16:merge=concat,position_dim=16,tie_embeddings=False")
    ('concat16', {'merge': 'concat', 'position_dim': 16, 'tie_embeddings': False})
    >>> parse_variant("no_embedding_scale")
    ('no_embedding_scale', {'embedding_scale': None})
    """
    name, _, options = text.partition(":")
    if not options:
        if name not in VARIANTS:
            raise ValueError(
                f"Unknown variant {name!r}: use one of {', '.join(VARIANTS)} or "
                "'name:key=value,...'."
            )
        return name, dict(VARIANTS[name])
    parsed = {}
    for item in options.split(","):
        key, equals, value = item.partition("=")
        if not equals:
            raise ValueError(f"Variant option {item!r} in {text!r} is not key=value.")
        try:
            parsed[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            parsed[key.strip()] = value.strip()
    return name, parsed


class SharedData:
    """The tokenizer and tokenized train/dev pairs every run shares.

    Args:
        settings: an `AblationSettings`.
        workdir: folder where the SentencePiece vocabulary is cached.

    Attributes:
        tokenizer, train, dev (`TokenizedPairs`), dev_pairs (texts),
        dev_data (`tf.data`), probe (the first dev batch, `(inputs, labels)`).
    """

    def __init__(self, settings, workdir):
        import tensorflow as tf

        from keras_transformer.data import pipeline
        from keras_transformer.data import tokenizer as tokenizer_lib
        from keras_transformer.data.parallel_corpus import ParallelCorpus

        corpus = settings.corpus
        if not isinstance(corpus, ParallelCorpus):
            corpus = ParallelCorpus(corpus)  # None (the embedded corpus) or a path
        splits = corpus.read()
        train = splits.require("train")[: settings.train_pairs]
        dev = splits.require("dev")[: settings.dev_pairs]
        path = os.path.join(workdir, f"vocabulary-{settings.vocabulary_size}.spm")
        if not os.path.exists(path):
            texts = [p.source for p in train] + [p.target for p in train]
            tokenizer_lib.train_tokenizer(texts, settings.vocabulary_size, path=path)
        self.tokenizer = tokenizer_lib.load_tokenizer(path)
        self.dev_pairs = dev
        self.train = pipeline.tokenize_pairs(train, self.tokenizer, settings.max_length)
        self.dev = pipeline.tokenize_pairs(dev, self.tokenizer, settings.max_length)
        self.settings = settings
        dev_data = self.dataset(self.dev, seed=0, train=False)
        batches = sum(1 for _ in dev_data)
        self.dev_data = dev_data.apply(tf.data.experimental.assert_cardinality(batches))
        self.probe = next(iter(dev_data))

    def dataset(self, tokenized, seed, train=True):
        from keras_transformer.data import pipeline

        return pipeline.translation_dataset(
            tokenized, batch_tokens=self.settings.batch_tokens, shuffle=train,
            seed=seed, repeat=train,
        )


class _StepTimer(keras.callbacks.Callback):
    """Wall time of each training batch (validation and epoch ends excluded)."""

    def __init__(self):
        super().__init__()
        self.seconds = []

    def on_train_batch_begin(self, batch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.seconds.append(time.perf_counter() - self._start)


def _model_arguments(settings, options):
    arguments = dict(
        vocabulary_size=settings.vocabulary_size,
        max_length=settings.max_length,
        warmup_steps=settings.warmup_steps or max(1, settings.steps // 5),
        label_smoothing=0.0,
        tie_embeddings=True,  # as a training run's default
        **{key: getattr(settings, key) for key in _CONFIG_OPTIONS if key != "tie_embeddings"},
    )
    arguments.update(options)
    return arguments


def build_variant(settings, options, seed):
    """The compiled, untrained model of one variant and seed.

    Returns:
        The compiled `keras.Model`: `trainer.build_translator` with the
        settings' sizes and the variant's options.

    Example:

    >>> settings = AblationSettings(d_model=16, num_heads=2, ff_dim=32,
    ...                             num_layers=1, vocabulary_size=100)
    >>> model = build_variant(settings, {"norm_first": True}, seed=0)
    >>> model.get_layer("encoder_layer_0").norm_first
    True
    """
    keras.utils.set_random_seed(seed)
    return trainer.build_translator(**_model_arguments(settings, options))


def train_variant(data, name, options, seed, callbacks=(), bleu_sentences=0, verbose=0):
    """Trains one variant with one seed; returns its row and the model.

    Args:
        data: the shared data (built by `run_ablation`).
        name: str, the variant's name.
        options: dict, its options.
        seed: int, seeds the weights, dropout and the batch order.
        callbacks: Keras callbacks for this run's `fit`.
        bleu_sentences: int, dev sentences to translate greedily for BLEU
            at the end (0: none).
        verbose: Keras' `fit` verbosity.

    Returns:
        `(row, model)`: the row is a dict with the variant, seed,
        parameters, dev loss and accuracy after every evaluation, the final
        ones, training seconds per step, whether it diverged, and BLEU.
    """
    settings = data.settings
    model = build_variant(settings, options, seed)
    timer = _StepTimer()
    history = model.fit(
        data.dataset(data.train, seed=seed),
        epochs=settings.evaluations,
        steps_per_epoch=settings.eval_every,
        validation_data=data.dev_data,
        callbacks=[timer, keras.callbacks.TerminateOnNaN(), *callbacks],
        shuffle=False,
        verbose=verbose,
    )
    dev_loss = [float(v) for v in history.history.get("val_loss", [])]
    dev_accuracy = [float(v) for v in history.history.get("val_masked_accuracy", [])]
    train_loss = [float(v) for v in history.history.get("loss", [])]
    diverged = not train_loss or not all(math.isfinite(v) for v in train_loss + dev_loss)
    row = {
        "variant": name,
        "options": {key: repr(value) for key, value in options.items()},
        "seed": seed,
        "parameters": model.count_params(),
        "steps": [settings.eval_every * (i + 1) for i in range(len(dev_loss))],
        "dev_loss_curve": dev_loss,
        "train_loss_curve": train_loss,
        "dev_loss": dev_loss[-1] if dev_loss and not diverged else float("nan"),
        "dev_accuracy": dev_accuracy[-1] if dev_accuracy and not diverged else float("nan"),
        # The median excludes the first steps' compilation.
        "seconds_per_step": float(np.median(timer.seconds)) if timer.seconds else float("nan"),
        "diverged": diverged,
    }
    if bleu_sentences and not diverged:
        from keras_transformer.translation.evaluation import evaluate_pairs
        from keras_transformer.translation.translator import Translator

        result = evaluate_pairs(
            Translator(model, data.tokenizer, beam_width=1), data.dev_pairs[:bleu_sentences], verbose=0
        )
        row["bleu"] = result["bleu"]
    return row, model


def run_ablation(
    variants,
    seeds=(0, 1, 2),
    settings=None,
    workdir="runs/ablate",
    bleu_sentences=0,
    on_model=None,
    callbacks=None,
    data=None,
    log=print,
):
    """Trains every variant with every seed; returns one row per run.

    Finished runs are appended to `workdir/runs.jsonl` as they end, and a
    second call with the same settings skips them, so an interrupted
    ablation resumes where it stopped.

    Args:
        variants: dict `{name: options}` (see `parse_variant`).
        seeds: the seeds each variant trains with.
        settings: an `AblationSettings`; defaults to its defaults.
        workdir: folder for the vocabulary and the runs file.
        bleu_sentences: dev sentences translated for BLEU per run (0: none).
        on_model: optional `f(row, model)` called after each run, e.g. to
            measure the trained model. Runs are then never skipped.
        callbacks: optional `f(name, seed) -> list of Keras callbacks` for
            each run's `fit`.
        data: a `SharedData` to reuse; built from `settings` when None.
        log: callable for one-line progress messages.

    Returns:
        A list of rows (see `train_variant`).
    """
    settings = settings or AblationSettings()
    os.makedirs(workdir, exist_ok=True)
    runs_path = os.path.join(workdir, "runs.jsonl")
    key = json.dumps(dataclasses.asdict(settings), sort_keys=True)
    done = {}
    if os.path.exists(runs_path):
        with open(runs_path) as f:
            for line in f:
                row = json.loads(line)
                if row.get("settings") == key and row.get("bleu_sentences") == bleu_sentences:
                    done[(row["variant"], json.dumps(row["options"], sort_keys=True), row["seed"])] = row
    data = data or SharedData(settings, workdir)
    rows = []
    total = len(variants) * len(seeds)
    for name, options in variants.items():
        for seed in seeds:
            run_key = (name, json.dumps({k: repr(v) for k, v in options.items()}, sort_keys=True), seed)
            if run_key in done and on_model is None and callbacks is None:
                rows.append(done[run_key])
                log(f"[{len(rows)}/{total}] {name} seed {seed}: done before, dev loss {done[run_key]['dev_loss']:.3f}")
                continue
            extra = callbacks(name, seed) if callbacks else ()
            row, model = train_variant(
                data, name, options, seed, callbacks=extra, bleu_sentences=bleu_sentences
            )
            row.update(settings=key, bleu_sentences=bleu_sentences)
            if on_model is not None:
                on_model(row, model)
            rows.append(row)
            with open(runs_path, "a") as f:
                f.write(json.dumps(row) + "\n")
            log(
                f"[{len(rows)}/{total}] {name} seed {seed}: dev loss {row['dev_loss']:.3f}, "
                f"{row['seconds_per_step'] * 1000:.0f} ms/step"
                + (" (diverged)" if row["diverged"] else "")
            )
            keras.backend.clear_session()
    return rows


def summarize(rows, metrics=("dev_loss", "dev_accuracy", "bleu", "seconds_per_step")):
    """Mean and sample standard deviation of each metric, per variant.

    Diverged runs are counted, not averaged.

    Example:

    >>> rows = [{"variant": "a", "parameters": 10, "diverged": False, "dev_loss": 2.0},
    ...         {"variant": "a", "parameters": 10, "diverged": False, "dev_loss": 4.0}]
    >>> summary = summarize(rows, metrics=("dev_loss",))[0]
    >>> summary["dev_loss_mean"], round(summary["dev_loss_std"], 3), summary["runs"]
    (3.0, 1.414, 2)
    """
    summary = []
    for name in dict.fromkeys(row["variant"] for row in rows):
        group = [row for row in rows if row["variant"] == name]
        good = [row for row in group if not row["diverged"]]
        entry = {
            "variant": name,
            "runs": len(group),
            "diverged": len(group) - len(good),
            "parameters": group[0]["parameters"],
        }
        for metric in metrics:
            values = [row[metric] for row in good if row.get(metric) is not None]
            if values:
                entry[f"{metric}_mean"] = float(np.mean(values))
                entry[f"{metric}_std"] = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
        summary.append(entry)
    return summary


def markdown_table(summary):
    """The summary as a Markdown table, `mean ± std` per metric.

    Example:

    >>> print(markdown_table([{"variant": "a", "runs": 2, "diverged": 0,
    ...                        "parameters": 10, "dev_loss_mean": 3.0,
    ...                        "dev_loss_std": 0.5}]))
    | variant | params | runs | diverged | dev loss |
    |---|---|---|---|---|
    | a | 10 | 2 | 0 | 3.000 ± 0.500 |
    """
    names = {
        "dev_loss": "dev loss",
        "dev_accuracy": "dev accuracy",
        "bleu": "BLEU",
        "seconds_per_step": "s/step",
    }
    metrics = [m for m in names if any(f"{m}_mean" in entry for entry in summary)]
    lines = [
        "| variant | params | runs | diverged | " + " | ".join(names[m] for m in metrics) + " |",
        "|---" * (4 + len(metrics)) + "|",
    ]
    for entry in summary:
        cells = [entry["variant"], f"{entry['parameters']:,}", str(entry["runs"]), str(entry["diverged"])]
        for metric in metrics:
            if f"{metric}_mean" in entry:
                cells.append(f"{entry[f'{metric}_mean']:.3f} ± {entry[f'{metric}_std']:.3f}")
            else:
                cells.append("n/a")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_results(rows, workdir):
    """Writes `results.json` (runs and summary) and `results.md`; returns the table."""
    summary = summarize(rows)
    table = markdown_table(summary)
    with open(os.path.join(workdir, "results.json"), "w") as f:
        json.dump({"runs": rows, "summary": summary}, f, indent=2)
    with open(os.path.join(workdir, "results.md"), "w") as f:
        f.write(table + "\n")
    return table
