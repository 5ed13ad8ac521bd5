"""Sentences per second of translating a split the way `keras-transformer evaluate` does, and its BLEU.

    KERAS_BACKEND=tensorflow python -m benchmarks.translation_speed --model runs/es-en --out DIR
    KERAS_BACKEND=tensorflow PYTHONPATH=OLD_CHECKOUT python -m benchmarks.translation_speed --model runs/es-en ...

For each beam width (1: greedy; 4: the default) and each loop (`default`:
`Translator.from_directory` as the command line builds it; `compiled`: with
`jit_compile=True`), it translates `--sentences` sentences of `--split` and
scores them (`evaluation.score_translations`), as the command line's
`evaluate` does, twice: the first pass pays the compilations (`cold`), the
second does not (`warm`; with `--warm-passes N`, N passes and their
median). `engine` is the compiled engine `translate` and
`evaluate` run by default (`CompiledTranslator`: the decoding loop as a
cached XLA program, run with JAX; a missing program is written first by a
child `keras-transformer translate`); `engine-int8` is it on the model
after Keras' `model.quantize("int8")` (`translate --quantize int8`). Each
pass is timed end to end and, apart, its
translating alone (the scores take about 0.35 s of it). For the `Translator`
loops the warm pass also counts the row-steps a batch ran after a row had
ended (each batch runs until its longest output ends).
The loops `default` and `compiled` use only what every version of the
package has, so the same command run on an older checkout (`PYTHONPATH`)
measures "before" on the same machine, model and sentences. The others
export the model first, into a temporary folder: `ctranslate2` and `ctranslate2-int8`
decode with `CTranslate2Translator` (float32 weights; int8 computation) one
batch at a time on as many threads as the machine has cores;
`ctranslate2-parallel` (float32) and `ctranslate2-int8-parallel` one batch
a core, one thread each, as the engine does (`parallel_batches`);
`savedmodel` calls the exported SavedModel's signature in batches of 64, in the split's order, as a server
would (greedy only: the signature's search); `keras-int8` and `keras-int4`
are the default loop on the model after Keras' `model.quantize(mode)`
(weights and, for int8, activations in integers; the model in memory,
nothing exported); `transformers` exports the run as a Hugging Face Marian
folder and decodes with `MarianMTModel.generate` on torch (this package's
tokenizer both ways, batches of `TRANSFORMERS_BATCH` sorted by length, the
same n-gram guard and new-token limit; its length penalty is
transformers' own formula, with our alpha). Each row also records the
mean words of its translations (`output_words`): with untrained weights,
where BLEU says nothing, it shows whether the rows did the same work.
Writes `results.json` and `results.md` to `--out`.
"""

import argparse
import functools
import itertools
import json
import os
import statistics
import tempfile
import time

import numpy as np

LOOPS = {"default": {}, "compiled": {"jit_compile": True}, "engine": {}, "engine-int8": {}, "ctranslate2": {},
         "ctranslate2-int8": {},
         "ctranslate2-parallel": {}, "ctranslate2-int8-parallel": {},
         "savedmodel": {}, "keras-int8": {}, "keras-int4": {}, "transformers": {}}
TRANSFORMERS_BATCH = 8
# The loops that count row-steps (they decode through `_decode`).
ROW_STEP_LOOPS = ("default", "compiled", "engine", "engine-int8", "keras-int8", "keras-int4")
SAVEDMODEL_BATCH = 64


def parse_args(argv=None):
    """The command line of `python -m benchmarks.translation_speed`.

    Example:

    >>> args = parse_args(["--model", "runs/es-en"])
    >>> args.beams, args.loops, args.sentences
    ([1, 4], ['default', 'compiled'], 605)
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks.translation_speed",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a `keras-transformer train` output folder")
    parser.add_argument("--split", default="test", help="of the embedded corpus (default: %(default)s)")
    parser.add_argument("--sentences", type=int, default=605, help="the split's first N (default: %(default)s, all of test)")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4], help="(default: 1 4)")
    parser.add_argument("--loops", nargs="+", choices=sorted(LOOPS), default=["default", "compiled"])
    parser.add_argument("--label", default="", help="names the code measured in the table, e.g. before or after")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=None,
                        help="sentences per batch, one row each (default: the translator's own)")
    parser.add_argument("--ctranslate2-length-penalty", type=float, default=None,
                        help="CTranslate2's beam length penalty (default: CTranslate2Translator's)")
    parser.add_argument("--warm-passes", type=int, default=1,
                        help="passes after the first; a row reports their median (default: %(default)s)")
    parser.add_argument("--out", default="benchmark_results/translation_speed", help="folder for the results")
    return parser.parse_args(argv)


class _SavedModelTranslator:
    """The exported signature as a translator: batches of `SAVEDMODEL_BATCH` strings, in order."""

    def __init__(self, path):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

        self._tf = tf
        self._serve = tf.saved_model.load(path).signatures["serving_default"]

    def __call__(self, texts):
        outputs = []
        for start in range(0, len(texts), SAVEDMODEL_BATCH):
            batch = self._tf.constant([text.encode("utf-8") for text in texts[start : start + SAVEDMODEL_BATCH]])
            outputs += [text.decode("utf-8") for text in self._serve(texts=batch)["translations"].numpy()]
        return outputs


def ended_steps(tokens, limit):
    """The step at which each row ended: its end token's index plus one, or `limit` for a row that never ended.

    Example:

    >>> ended_steps(np.array([[5, 3, 0, 0], [5, 6, 7, 8]]), 4).tolist()  # END_ID is 3
    [2, 4]
    """
    from keras_transformer_runtime.special_tokens import END_ID

    ended = np.asarray(tokens) == END_ID
    return np.where(ended.any(axis=-1), ended.argmax(axis=-1) + 1, limit)


class RowSteps:
    """Counts a `Translator`'s generated row-steps, and those after a row's end token (batches, not queues).

    Wraps the translator's `_decode`, which returns each batch's tokens
    `(rows, steps)`: every row runs `steps` steps, and those after its
    `END_ID` are work a loop that dropped finished rows would not do.

    Example:

    >>> class Stub:
    ...     def _decode(self, source):
    ...         return np.array([[5, 3, 0, 0], [5, 6, 7, 3]])  # END_ID is 3
    >>> stub = Stub()
    >>> steps = RowSteps(stub)
    >>> _ = stub._decode(None)
    >>> steps.total, steps.after_end
    (8, 2)
    """

    def __init__(self, translator):
        self.total = self.after_end = 0
        decode = translator._decode

        def counted(source):
            generated = decode(source)
            if getattr(translator, "queue_size", None) and len(source) > translator.batch_size:
                return generated  # a queue refills its rows: rows x steps is not what it ran
            tokens = np.asarray(generated)
            lengths = ended_steps(tokens, tokens.shape[1])
            self.total += tokens.size
            self.after_end += int((tokens.shape[1] - lengths).sum())
            return generated

        translator._decode = counted


class _TransformersTranslator:
    """A Marian export in `transformers`: strings in, strings out, in batches sorted by length."""

    def __init__(self, folder, tokenizer, beam_width, max_new_tokens, length_penalty, no_repeat_ngram_size=3,
                 batch_size=TRANSFORMERS_BATCH):
        import torch
        from transformers import MarianMTModel

        torch.set_num_threads(os.cpu_count())
        self.model = MarianMTModel.from_pretrained(folder, local_files_only=True).eval()  # the export just written
        self.tokenizer = tokenizer  # this package's: the ids the model was trained on, both ways
        self.options = dict(num_beams=beam_width, max_new_tokens=max_new_tokens, length_penalty=length_penalty,
                            no_repeat_ngram_size=no_repeat_ngram_size, do_sample=False,
                            forced_eos_token_id=None)  # as ours: an output that reaches the limit just stops
        self.batch_size = batch_size
        self.pad_id = self.model.config.pad_token_id

    def __call__(self, texts):
        import torch

        from keras_transformer_runtime.special_tokens import END_ID

        # Cut to the model's positions, as this package's translators cut them.
        ids = [list(row)[: self.model.config.max_position_embeddings] for row in self.tokenizer.tokenize(texts)]
        order = sorted(range(len(texts)), key=lambda i: len(ids[i]))
        outputs = [None] * len(texts)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            width = max(len(ids[i]) for i in batch)
            tokens = torch.tensor([ids[i] + [self.pad_id] * (width - len(ids[i])) for i in batch])
            with torch.no_grad():
                generated = self.model.generate(input_ids=tokens, attention_mask=tokens != self.pad_id, **self.options)
            rows = []
            for row in generated.tolist():
                row = row[1:]  # after the decoder's start token
                row = row[: row.index(END_ID)] if END_ID in row else row
                rows.append([token for token in row if token != self.pad_id])
            for i, text in zip(batch, self.tokenizer.detokenize(rows)):
                outputs[i] = text
        return outputs


@functools.lru_cache(maxsize=None)
def _export_folder():
    """One temporary folder for the run's exported models."""
    return tempfile.mkdtemp(prefix="translation_speed_")


def _translator(args, loop, beam, batch_size=None):
    """The translator of a loop, exporting the model the first time a loop needs it."""
    sized = {} if batch_size is None else {"batch_size": batch_size}
    if loop in ("engine", "engine-int8"):
        from keras_transformer_cli.serve import write_program_in_a_child
        from keras_transformer_runtime.compiled_translator import load_compiled_translator
        from keras_transformer_runtime.program_cache import ProgramCache

        return load_compiled_translator(args.model, ProgramCache(), beam_width=beam, write=write_program_in_a_child,
                                        quantize="int8" if loop == "engine-int8" else None, **sized)
    if loop in ("default", "compiled", "keras-int8", "keras-int4"):
        from keras_transformer.translation.translator import Translator

        translator = Translator.from_directory(args.model, beam_width=beam, **LOOPS[loop], **sized)
        if loop.startswith("keras-"):
            translator.model.quantize(loop.split("-")[1])
        return translator
    if loop == "savedmodel":
        from keras_transformer.translation.export import export_translator

        path = os.path.join(_export_folder(), "savedmodel")
        if not os.path.isdir(path):
            export_translator(args.model, path)
        return _SavedModelTranslator(path)
    if loop == "transformers":
        from keras_transformer.checkpoints.marian.export import export_marian
        from keras_transformer.translation.translator import Translator

        path = os.path.join(_export_folder(), "marian")
        if not os.path.isdir(path):
            export_marian(args.model, path)
        ours = Translator.from_directory(args.model, beam_width=beam)
        return _TransformersTranslator(path, ours.tokenizer, beam, ours.max_new_tokens, float(ours.length_penalty),
                                       ours.no_repeat_ngram_size, **sized)
    from keras_transformer.translation.ctranslate2_model import CTranslate2Translator
    from keras_transformer.translation.ctranslate2_model import export_ctranslate2

    path = os.path.join(_export_folder(), "ctranslate2")
    if not os.path.isdir(path):
        export_ctranslate2(args.model, path)
    options = {} if args.ctranslate2_length_penalty is None else {"length_penalty": args.ctranslate2_length_penalty}
    threads = dict(intra_threads=1, parallel_batches="auto") if loop.endswith("parallel") else \
        dict(intra_threads=os.cpu_count())
    return CTranslate2Translator(path, beam_width=beam, compute_type="int8" if "int8" in loop else "default",
                                 **threads, **options, **sized)


def measure(args, log=print):
    """One row per beam width and loop: cold and warm sentences/s, and BLEU."""
    import keras

    from keras_transformer.data.corpus import load_bible_pairs
    from keras_transformer.translation.evaluation import score_translations

    pairs = load_bible_pairs(args.split)[: args.sentences]
    sources, references = [pair.source for pair in pairs], [pair.references for pair in pairs]
    rows = []
    for beam, loop, batch_size in itertools.product(args.beams, args.loops, args.batch_sizes or [None]):
        if loop == "savedmodel" and beam != 1:
            continue  # the signature searches greedily
        translator = _translator(args, loop, beam, batch_size)
        seconds, bleu, row_steps = [], None, None
        for run in ("cold", *["warm"] * max(1, args.warm_passes)):
            if run == "warm" and loop in ROW_STEP_LOOPS and row_steps is None:
                row_steps = RowSteps(translator)  # the same batches every pass: the same fraction
            start = time.perf_counter()
            translations = translator(sources)
            translated = time.perf_counter()
            bleu = round(score_translations(translations, references)["bleu"], 2)
            seconds.append((translated - start, time.perf_counter() - start))
        translating = statistics.median(pass_seconds[0] for pass_seconds in seconds[1:])
        whole = statistics.median(pass_seconds[1] for pass_seconds in seconds[1:])
        row = dict(backend=keras.backend.backend(), label=args.label, beam=beam, loop=loop,
                   batch=getattr(translator, "batch_size", None), sentences=len(pairs),
                   parallel_batches=getattr(translator, "parallel_batches", 1), warm_passes=len(seconds) - 1,
                   cold_seconds=round(seconds[0][1], 2), warm_seconds=round(whole, 2),
                   warm_sentences_per_second=round(len(pairs) / whole, 1),
                   translating_sentences_per_second=round(len(pairs) / translating, 1), bleu=bleu,
                   output_words=round(statistics.mean(len(text.split()) for text in translations), 1))
        if row_steps is not None and row_steps.total:
            row["row_steps_after_end"] = round(row_steps.after_end / row_steps.total, 3)
        # A Keras model's weights' bytes: int8 and int4 kernels are smaller.
        if hasattr(getattr(translator, "model", None), "weights"):
            row["weights_megabytes"] = round(sum(np.asarray(w.numpy()).nbytes for w in translator.model.weights) / 2**20, 2)
        log(json.dumps(row))
        rows.append(row)
    return rows


def markdown(rows):
    """The rows as a Markdown table.

    Example:

    The last column divides a row's translating-only sentences/s
    (tokenizing included, scoring not) by those of the faster float32
    CTranslate2 row (`ctranslate2` or `ctranslate2-parallel`) of the same
    beam, backend and code, when the run measured one: the ratio of issue
    55, in one command.

    >>> row = dict(backend="jax", label="after", beam=4, loop="default", sentences=10, cold_seconds=3.0,
    ...            warm_seconds=1.0, warm_sentences_per_second=10.0, translating_sentences_per_second=12.5, bleu=1.0)
    >>> print(markdown([row, {**row, "loop": "ctranslate2", "translating_sentences_per_second": 50.0}]))
    | backend | code | beam | loop | batch | sentences | first pass s | second pass s | sentences/s | translating only | row-steps after the end | BLEU | vs CTranslate2 |
    |---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|
    | jax | after | 4 | default | 64 | 10 | 3.0 | 1.0 | 10.0 | 12.5 | — | 1.00 | 0.25x |
    | jax | after | 4 | ctranslate2 | 64 | 10 | 3.0 | 1.0 | 10.0 | 50.0 | — | 1.00 | 1.00x |
    <BLANKLINE>
    """
    lines = ["| backend | code | beam | loop | batch | sentences | first pass s | second pass s | sentences/s "
             "| translating only | row-steps after the end | BLEU | vs CTranslate2 |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    ctranslate2 = {}
    for r in rows:
        if r["loop"] in ("ctranslate2", "ctranslate2-parallel"):
            key = (r["backend"], r["label"], r["beam"])
            ctranslate2[key] = max(ctranslate2.get(key) or 0, r.get("translating_sentences_per_second") or 0) or None
    for r in rows:
        # Rows written before the batch column decoded 64 sentences at a time;
        # before the translating column, only passes end to end were timed.
        reference = ctranslate2.get((r["backend"], r["label"], r["beam"]))
        ratio = f"{r['translating_sentences_per_second'] / reference:.2f}x" if reference else "—"
        lines.append(f"| {r['backend']} | {r['label']} | {r['beam']} | {r['loop']} | {r.get('batch') or 64} | "
                     f"{r['sentences']} | "
                     f"{r['cold_seconds']} | {r['warm_seconds']} | {r['warm_sentences_per_second']} | "
                     f"{r.get('translating_sentences_per_second', '—')} | {_percent(r.get('row_steps_after_end'))} | "
                     f"{r['bleu']:.2f} | {ratio} |")
    return "\n".join(lines) + "\n"


def _percent(fraction):
    return "—" if fraction is None else f"{100 * fraction:.1f} %"


def main(argv=None):
    """Measures, then adds the rows to `results.json` and `results.md` in `--out` (several runs share a folder)."""
    from benchmarks.results_folder import add_rows

    args = parse_args(argv)
    rows = add_rows(args.out, measure(args), markdown)
    print(markdown(rows))
    return rows


if __name__ == "__main__":
    main()
