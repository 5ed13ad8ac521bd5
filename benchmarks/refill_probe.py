"""Search refilling finished rows, against the engine's batches: one process, alternating.

    KERAS_BACKEND=jax python -m benchmarks.refill_probe --model runs/es-en --queues 32 64
    KERAS_BACKEND=jax python -m benchmarks.refill_probe --model runs/es-en --beam-width 4 --slots 4 --queues 32 64

The compiled engine's program decodes a batch of sources (8 greedy, 4 for
beam 4 on a CPU) until its last hypothesis ends (`sampler.search_tensors`
with growing caches, as `translation_program` exports it).
`decoding.refill` decodes a queue of sources, `--slots` at a time, and
gives the rows of a sentence that ended the next source.
Both run here as `jax.jit` loops on the test split, sorted by length as
`TextTranslator` sorts it, each source width bucketed as the engine's: the
batches of 8 one at a time, the queues of `--queues` sources one at a
time. One thread of calls each (XLA spreads a call's work over the cores).
A warm-up pass compiles every shape; then `--rounds` rounds time each loop
over the whole split in turn. Prints sentences/s (median), the ratio, the
row-steps of each, and how many translations differ; `--out` also writes
`results.json`.
"""

import argparse
import json
import os
import statistics
import time

import numpy as np


def parse_args(argv=None):
    """The command line.

    Example:

    >>> args = parse_args(["--model", "runs/es-en"])
    >>> args.queues, args.slots, args.rounds
    ([64], 8, 5)
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks.refill_probe", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a `keras-transformer train` output folder")
    parser.add_argument("--split", default="test", help="of the embedded corpus (default: %(default)s)")
    parser.add_argument("--queues", type=int, nargs="+", default=[64], help="sources a refilling call takes")
    parser.add_argument("--slots", type=int, default=8,
                        help="sources decoded at a time, and the batches' size (default: %(default)s)")
    parser.add_argument("--beam-width", type=int, default=1, help="1: greedy search (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default: %(default)s)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="the translator's limit")
    parser.add_argument("--flat-batch-caches", action="store_true",
                        help="the batches' caches at their full length from the first step (not grown)")
    parser.add_argument("--out", default=None, help="folder for results.json")
    return parser.parse_args(argv)


def groups(items, size):
    """`items` in consecutive groups of `size`.

    Example:

    >>> groups([1, 2, 3, 4, 5], 2)
    [[1, 2], [3, 4], [5]]
    """
    return [items[i:i + size] for i in range(0, len(items), size)]


def _loops(translator, slots, flat_batch_caches=False):
    import jax
    from keras_transformer.translation.translation_program import decoding_choice
    from keras_transformer.decoding.refill import refill_search_tensors
    from keras_transformer.decoding.sampler import search_tensors
    from keras_transformer.decoding.sampler import with_variable_values

    decoder = translator.decoder
    variables = list(decoder.model.variables)
    settings = dict(max_new_tokens=translator.max_new_tokens, no_repeat_ngram_size=translator.no_repeat_ngram_size)
    choice = decoding_choice(translator)

    def batches(tokens):
        return search_tensors(decoder, tokens, choice, grow_caches=not flat_batch_caches, **settings)

    def refilled(tokens):
        return refill_search_tensors(decoder, tokens, slots, choice=choice, **settings)

    values = [variable.value for variable in variables]
    compiled = [jax.jit(with_variable_values(loop, variables)) for loop in (batches, refilled)]
    return [lambda tokens, loop=loop: loop(values, tokens) for loop in compiled]


def _pass(loop, padded, refilling, width):
    """Every call of one pass: `(tokens of each source in order, row-steps)`."""
    outputs, row_steps = [], 0
    for batch, count in padded:
        if refilling:
            generated, steps, loop_steps = loop(batch)
            row_steps += int(loop_steps) * REFILL_SLOTS[0] * width
        else:
            generated, steps = loop(batch)
            row_steps += int(steps) * batch.shape[0] * width
        generated = np.asarray(generated)[:count, :int(steps)]
        outputs += [tuple(int(t) for t in row if t) for row in generated]
    return outputs, row_steps


REFILL_SLOTS = [8]


def measure(args, log=print):
    """The rows of the probe: one for the batches, one a queue size."""
    import keras

    from keras_transformer.data import load_bible_pairs
    from keras_transformer.translation.translator import Translator

    assert keras.backend.backend() == "jax", "run with KERAS_BACKEND=jax"
    REFILL_SLOTS[0] = args.slots
    translator = Translator.from_directory(args.model, beam_width=args.beam_width, beam_search="kept",
                                           max_new_tokens=args.max_new_tokens)
    sources = [pair.source for pair in load_bible_pairs(args.split)]
    ids = translator._token_ids(sources)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    ids = [ids[i] for i in order]
    batch_loop, refill_loop = _loops(translator, args.slots, args.flat_batch_caches)
    batches = f"batches of {args.slots}"
    plans = {batches: (batch_loop, [(translator._padded_batch(group, batch_rows=args.slots), len(group))
                                    for group in groups(ids, args.slots)], False)}
    for queue in args.queues:
        plans[f"queues of {queue}"] = (refill_loop, [(translator._padded_batch(group, batch_rows=len(group)),
                                                      len(group)) for group in groups(ids, queue)], True)
    results = {name: {"seconds": []} for name in plans}
    for name, (loop, padded, refilling) in plans.items():  # compiles every shape
        outputs, row_steps = _pass(loop, padded, refilling, args.beam_width)
        results[name].update(outputs=outputs, row_steps=row_steps)
    for _ in range(args.rounds):
        for name, (loop, padded, refilling) in plans.items():
            start = time.perf_counter()
            _pass(loop, padded, refilling, args.beam_width)
            results[name]["seconds"].append(time.perf_counter() - start)
    reference = results[batches]
    rows = []
    for name, result in results.items():
        seconds = statistics.median(result["seconds"])
        rows.append({
            "loop": name, "sentences_per_second": round(len(ids) / seconds, 1),
            "speed_ratio": round(statistics.median(reference["seconds"]) / seconds, 3),
            "row_steps": result["row_steps"],
            "differ": sum(a != b for a, b in zip(result["outputs"], reference["outputs"])),
            "seconds": [round(s, 4) for s in result["seconds"]],
        })
        log(f"{name:>14}: {rows[-1]['sentences_per_second']:8.1f} sent/s  {rows[-1]['speed_ratio']:.3f}x  "
            f"row-steps {rows[-1]['row_steps']:,}  differ {rows[-1]['differ']}")
    return rows


def main(argv=None):
    """Runs the probe and writes `results.json` to `--out`."""
    args = parse_args(argv)
    rows = measure(args)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "results.json"), "w") as handle:
            json.dump({"model": args.model, "slots": args.slots, "beam_width": args.beam_width,
                       "rounds": args.rounds, "rows": rows}, handle,
                      indent=1)


if __name__ == "__main__":
    main()
