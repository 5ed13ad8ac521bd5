"""How many decoding steps the compiled engine runs for a split, against CTranslate2: a gap per step, or in steps?

    KERAS_BACKEND=jax python -m benchmarks.search_steps --model runs/es-en --out DIR

For each beam width, both translators decode `--sentences` sentences of
`--split` as `translate` and the `ctranslate2` loop of
`benchmarks.translation_speed` do (the engine: `translate`'s program and
batches, one batch a core; CTranslate2: float32, batches of 64 on every
core), and every batch's steps are counted in row-steps (one row of the
decoder through one step; beam search runs `beam` rows a sentence):

- `engine`: a batch runs until its last row has ended, so each batch adds
  `steps x rows x beam`, its padding rows included;
- `engine, finished sources dropped`: what the same search would run if
  a source left the batch as soon as all its beam rows had ended (from the
  program that returns every beam row, `n_best=beam`, the same loop);
- `ctranslate2`: CTranslate2 drops a sentence from its batch once it is
  finished (greedy: its end token; beam search with a length penalty: its
  `beam` hypotheses set aside, a finished one replaced by the next
  candidate), so each sentence adds its own steps, read from the longest
  of its `beam` hypotheses (`num_hypotheses=beam`, which leaves the search
  as it is).

Each translator is also timed: a warm-up pass, then `--passes` passes of
translating alone (tokenizing included), median; microseconds a row-step
are that time over the row-steps, so that the ratio of the two speeds
splits into the ratio of row-steps and the ratio of the cost of one.
A row also counts the translations that are CTranslate2's, word for word.
`--beam-search pooled --early-stopping` counts the engine's search that
sets finished hypotheses aside and stops a sentence at `beam` of them,
as CTranslate2's beam search does with a length penalty. Writes `results.json` and `results.md` to `--out`.
"""

import argparse
import collections
import json
import os
import statistics
import time

import numpy as np

from benchmarks.machine import cpu_name
from benchmarks.translation_speed import ended_steps


def parse_args(argv=None):
    """The command line of `python -m benchmarks.search_steps`.

    Example:

    >>> args = parse_args(["--model", "runs/es-en"])
    >>> args.beams, args.sentences, args.passes
    ([1, 4], 605, 3)
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search_steps", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a `keras-transformer train` output folder")
    parser.add_argument("--split", default="test", help="of the embedded corpus (default: %(default)s)")
    parser.add_argument("--sentences", type=int, default=605, help="the split's first N (default: %(default)s)")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4], help="(default: 1 4)")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="the longest output, both translators (default: the run's)")
    parser.add_argument("--beam-search", choices=["kept", "pooled"], default="kept",
                        help="the engine's beam search (default: %(default)s, a trained run's)")
    parser.add_argument("--early-stopping", action="store_true",
                        help="with --beam-search pooled: a sentence stops once it has `beam` finished hypotheses, "
                             "as CTranslate2's does with a length penalty")
    parser.add_argument("--passes", type=int, default=3, help="timed passes after a warm-up (default: %(default)s)")
    parser.add_argument("--out", default="benchmark_results/search_steps", help="folder for the results")
    return parser.parse_args(argv)


class StepCounter:
    """Row-steps of every batch an engine decoded, as it ran them and as a loop that dropped finished sources would.

    Wraps the translator's `_decode` (greedy: each row's tokens) or, for a
    translator of `n_best=beam`, its `_decode_n_best` (every beam row of
    each source), and its `_padded_batch`, which says how many of a
    batch's rows are sentences (the others repeat the first, to fill the
    batch's shape). The translator must decode its batches one at a time,
    in order (`parallel_batches=1`).

    Example:

    >>> class Stub:
    ...     beam_width = 1
    ...     def _padded_batch(self, ids, batch_rows=None):
    ...         return np.array(ids + ids[:1])  # the last row fills the batch
    ...     def _decode(self, source):
    ...         return np.array([[5, 3, 0], [5, 6, 3], [5, 3, 0]])
    >>> stub = Stub()
    >>> counter = StepCounter(stub)
    >>> _ = stub._decode(stub._padded_batch([[7, 3], [8, 3]]))
    >>> counter.run, counter.dropped, counter.sources
    (9, 5, 2)
    """

    def __init__(self, translator):
        self.run = self.dropped = self.sources = 0
        self._sentences = collections.deque()  # of each padded batch, in order
        beam = translator.beam_width
        padded_batch = translator._padded_batch

        def counted_padding(ids, *args, **kwargs):
            self._sentences.append(len(ids))
            return padded_batch(ids, *args, **kwargs)

        translator._padded_batch = counted_padding
        if beam == 1:
            decode = translator._decode

            def counted(source):
                tokens = np.asarray(decode(source))
                self._add(source, ended_steps(tokens, tokens.shape[1]), tokens.shape[1], 1)
                return tokens

            translator._decode = counted
        else:
            decode_n_best = translator._decode_n_best

            def counted_n_best(source, n, *args, **kwargs):
                best = decode_n_best(source, n, *args, **kwargs)
                steps = best.tokens.shape[2]
                self._add(source, ended_steps(best.tokens, steps).max(axis=1), steps, beam)
                return best

            translator._decode_n_best = counted_n_best

    def _add(self, source, source_steps, steps, beam):
        sentences = self._sentences.popleft()
        self.run += steps * len(source) * beam
        self.dropped += int(source_steps[:sentences].sum()) * beam
        self.sources += sentences


class CTranslate2StepCounter:
    """Row-steps CTranslate2 ran for the batches a `CTranslate2Translator` decoded: each sentence's steps x beam.

    Wraps the translator's `translate_batch` to ask for all `beam_width`
    hypotheses (the search is the same; the first is still the best). A
    sentence's steps are those of its longest hypothesis, plus its end
    token where it had room for one.

    Example (one sentence of `beam_width` 1 that ended after 2 pieces: 3 steps):

    >>> class Result:
    ...     hypotheses = [["▁a", "▁b"]]
    >>> class Stub:
    ...     beam_width, max_new_tokens = 1, 10
    ...     def translate_batch(self, rows, num_hypotheses=1):
    ...         return [Result() for _ in rows]
    >>> stub = Stub()
    >>> counter = CTranslate2StepCounter(stub)
    >>> _ = stub.translate_batch([[5, 3]])
    >>> counter.run
    3
    """

    def __init__(self, translator):
        self.run = 0
        translate_batch = translator.translate_batch
        beam, limit = translator.beam_width, translator.max_new_tokens

        def counted(source, **options):
            results = translate_batch(source, **{"num_hypotheses": beam, **options})
            for result in results:
                self.run += min(max(len(hypothesis) for hypothesis in result.hypotheses) + 1, limit) * beam
            return results

        translator.translate_batch = counted


def _timed(translator, sources, passes):
    translator(sources)  # compiles, fills caches
    seconds = []
    for _ in range(passes):
        start = time.perf_counter()
        translator(sources)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def _engine(args, beam, n_best=None, parallel_batches="auto"):
    from keras_transformer_cli.serve import write_program_in_a_child
    from keras_transformer_runtime.compiled_translator import load_compiled_translator
    from keras_transformer_runtime.program_cache import ProgramCache

    return load_compiled_translator(args.model, ProgramCache(), beam_width=beam, write=write_program_in_a_child,
                                    n_best=n_best, max_new_tokens=args.max_new_tokens,
                                    parallel_batches=parallel_batches, beam_search=args.beam_search,
                                    early_stopping=args.early_stopping)


def _ctranslate2(args, beam, folder):
    from keras_transformer.translation.ctranslate2_model import CTranslate2Translator
    from keras_transformer.translation.ctranslate2_model import export_ctranslate2

    if not os.path.isdir(folder):
        export_ctranslate2(args.model, folder)
    return CTranslate2Translator(folder, beam_width=beam, intra_threads=os.cpu_count(),
                                 max_new_tokens=args.max_new_tokens)


def measure(args, log=print):
    """One row per beam width: row-steps and microseconds a row-step of the engine and of CTranslate2."""
    import tempfile

    from keras_transformer.data.corpus import load_bible_pairs

    sources = [pair.source for pair in load_bible_pairs(args.split)[: args.sentences]]
    with tempfile.TemporaryDirectory(prefix="search_steps_") as work:
        return [_measure_beam(args, beam, sources, os.path.join(work, "ctranslate2"), log) for beam in args.beams]


def _measure_beam(args, beam, sources, folder, log):
    """One beam width's row (`measure`); CTranslate2's export goes to `folder`, once."""
    engine = _engine(args, beam)
    engine_seconds = _timed(engine, sources, args.passes)
    counted = _engine(args, beam, n_best=beam if beam > 1 else None, parallel_batches=1)
    counter = StepCounter(counted)
    ours = engine(sources)
    same = counted(sources) == ours
    ctranslate2 = _ctranslate2(args, beam, folder)
    ctranslate2_seconds = _timed(ctranslate2, sources, args.passes)
    ctranslate2_counter = CTranslate2StepCounter(ctranslate2)
    theirs = ctranslate2(sources)
    row = dict(beam=beam, beam_search=args.beam_search, early_stopping=args.early_stopping,
               sentences=len(sources), engine_batch=engine.batch_size,
               engine_parallel_batches=engine.parallel_batches, counted_translations_equal=bool(same),
               translations_as_ctranslate2s=sum(a == b for a, b in zip(ours, theirs)),
               engine_row_steps=counter.run, engine_row_steps_finished_dropped=counter.dropped,
               ctranslate2_row_steps=ctranslate2_counter.run,
               engine_seconds=engine_seconds, ctranslate2_seconds=ctranslate2_seconds)
    # Significant digits, not decimal places: a test's few sentences take milliseconds.
    row.update(_ratios(row), engine_seconds=_significant(engine_seconds, 5),
               ctranslate2_seconds=_significant(ctranslate2_seconds, 5))
    log(json.dumps(row))
    return row


def _ratios(row):
    engine_us = 1e6 * row["engine_seconds"] / row["engine_row_steps"]
    ctranslate2_us = 1e6 * row["ctranslate2_seconds"] / row["ctranslate2_row_steps"]
    return dict(engine_us_per_row_step=round(engine_us, 2), ctranslate2_us_per_row_step=round(ctranslate2_us, 2),
                speed_ratio=_significant(row["ctranslate2_seconds"] / row["engine_seconds"], 4),
                row_steps_ratio=_significant(row["engine_row_steps"] / row["ctranslate2_row_steps"], 4),
                row_step_cost_ratio=_significant(engine_us / ctranslate2_us, 4))


def _significant(value, digits):
    return float(f"{value:.{digits}g}")


def markdown(rows, machine=""):
    """The rows as a Markdown table; the speed ratio is the inverse of row-steps ratio x cost ratio.

    Example:

    >>> row = dict(beam=1, beam_search="kept", early_stopping=False, sentences=10, engine_row_steps=200,
    ...            engine_row_steps_finished_dropped=150, ctranslate2_row_steps=160, engine_seconds=0.2,
    ...            ctranslate2_seconds=0.1, translations_as_ctranslate2s=10)
    >>> print(markdown([{**row, **_ratios(row)}]).splitlines()[-1])
    | 1 | greedy | 10 | 200 | 150 | 160 | 1000.0 | 625.0 | 1.25x | 1.60x | 0.50x | 10 |
    """
    lines = [f"Machine: {machine}\n" if machine else "",
             "| beam | engine's search | sentences | engine row-steps | engine, finished sources dropped "
             "| CTranslate2 row-steps | engine us a row-step | CTranslate2 us a row-step "
             "| row-steps, engine / CTranslate2 | cost of a row-step, engine / CTranslate2 "
             "| speed, engine / CTranslate2 | translations as CTranslate2's |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        search = "greedy" if r["beam"] == 1 else r["beam_search"] + (", early stopping" if r["early_stopping"] else "")
        lines.append(f"| {r['beam']} | {search} | {r['sentences']} | {r['engine_row_steps']} | "
                     f"{r['engine_row_steps_finished_dropped']} | {r['ctranslate2_row_steps']} | "
                     f"{r['engine_us_per_row_step']} | {r['ctranslate2_us_per_row_step']} | "
                     f"{r['row_steps_ratio']:.2f}x | {r['row_step_cost_ratio']:.2f}x | {r['speed_ratio']:.2f}x | "
                     f"{r['translations_as_ctranslate2s']} |")
    return "\n".join(line for line in lines if line) + "\n"


def main(argv=None):
    """Measures, then adds the rows to `results.json` and `results.md` in `--out` (several runs share a folder)."""
    from benchmarks.results_folder import add_rows

    args = parse_args(argv)
    rows = add_rows(args.out, measure(args), lambda rows: markdown(rows, cpu_name()))
    print(markdown(rows, cpu_name()))
    return rows[-len(args.beams):]


if __name__ == "__main__":
    main()
