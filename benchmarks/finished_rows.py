"""What shrinking a batch to its live rows would save: row-steps with and without, from real outputs.

    python -m benchmarks.finished_rows --model runs/es-en --beam 4

A batch of the compiled engine decodes until its longest output ends, so
rows that ended early keep decoding padding. This translates the test split
with the engine (`parallel_batches=1`, its own batch size), notes when each
source of each batch ended (greedy: its row's length; beam: the longest of
its hypotheses, as the n-best program returns them) and counts, per batch,
the row-steps of the loop as it runs (`rows x steps`) against a loop that at
each of `--bounds` shrinks the batch to the smallest of 8, 4, 2, 1 sources
that holds the live ones (`x beam` rows), and against the ideal of no
finished row decoded. Prints one line a bound set; writes nothing.
"""

import argparse

import numpy as np


def shrunk_row_steps(ends, bounds, sizes=(8, 4, 2, 1)):
    """Sources x steps of one batch whose sources end at `ends`, shrinking at `bounds`.

    Example:

    >>> shrunk_row_steps([10, 3, 3, 3], []), shrunk_row_steps([10, 3, 3, 3], [4])
    (40, 22)
    """
    ends = np.asarray(ends)
    steps, done, total = int(ends.max()), 0, 0
    for bound in [*bounds, steps]:
        bound = min(bound, steps)
        if bound <= done:
            continue
        live = int((ends > done).sum())
        rows = len(ends) if not bounds else min(len(ends), min(size for size in sizes if size >= live))
        total += rows * (bound - done)
        done = bound
    return total


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.finished_rows", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--beam", type=int, default=4)
    args = parser.parse_args(argv)
    from keras_transformer.data.corpus import load_bible_pairs
    from keras_transformer_cli.serve import write_program_in_a_child
    from keras_transformer_runtime.compiled_translator import load_compiled_translator
    from keras_transformer_runtime.program_cache import ProgramCache

    sources = [pair.source for pair in load_bible_pairs("test")]
    n_best = {"n_best": args.beam} if args.beam > 1 else {}
    translator = load_compiled_translator(args.model, ProgramCache(), beam_width=args.beam, parallel_batches=1,
                                          write=write_program_in_a_child, **n_best)
    ends = []
    if args.beam > 1:
        decode = translator._decode_n_best

        def recorded(source, n, cross_attention=False):
            hypotheses = decode(source, n, cross_attention)
            ends.append((hypotheses.tokens != 0).sum(-1).max(-1))
            return hypotheses

        translator._decode_n_best = recorded
        translator.n_best(sources, args.beam)
    else:
        decode = translator._decode

        def recorded(source):
            generated = decode(source)
            ends.append((generated != 0).sum(-1))
            return generated

        translator._decode = recorded
        translator(sources)
    # A call's last batch is filled up with copies of its first row: count its sentences only.
    ends[-1] = ends[-1][: len(sources) - translator.batch_size * (len(ends) - 1)]
    as_run = sum(shrunk_row_steps(batch, []) for batch in ends)
    ideal = sum(int(batch.sum()) for batch in ends)
    for bounds in ([32, 64], [16, 32, 64], [16, 24, 32, 48, 64, 96]):
        shrunk = sum(shrunk_row_steps(batch, bounds) for batch in ends)
        print(f"beam {args.beam}, {len(ends)} batches of {translator.batch_size}: shrinking at {bounds}: "
              f"{shrunk / as_run:.3f} of the row-steps as run; no finished row: {ideal / as_run:.3f}")


if __name__ == "__main__":
    main()
