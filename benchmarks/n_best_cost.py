"""What n-best lists cost: a split translated by one `Translator`, plainly and with `n_best(n)`.

    KERAS_BACKEND=jax python -m benchmarks.n_best_cost --model runs/es-en --out DIR

Every shape is compiled first (a plain pass and an n-best pass for each
`n`); then each way is timed `--repeats` times in turn, whole calls, and
the medians and their ratios to the plain call are written to
`results.json` and `results.md`. It also checks that the first hypothesis
of every sentence is the plain translation.
"""

import argparse
import json
import os
import statistics
import time


def time_in_turn(ways, repeats):
    """Each way's whole-call seconds, the ways called in turn `repeats` times (after one call each to compile).

    Args:
        ways: dict of name -> callable.
        repeats: int, rounds.

    Returns:
        `(seconds, medians)`: lists of seconds and their medians, by name.

    Example:

    >>> seconds, medians = time_in_turn({"plain": lambda: None}, 3)
    >>> len(seconds["plain"]), medians["plain"] >= 0
    (3, True)
    """
    for run in ways.values():  # compiles every shape
        run()
    seconds = {name: [] for name in ways}
    for _ in range(repeats):
        for name, run in ways.items():
            start = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - start)
    return seconds, {name: statistics.median(values) for name, values in seconds.items()}


def cost_table(medians, sentences):
    """The Markdown rows of each way's median, sentences/s and ratio to `medians["plain"]`.

    Example:

    >>> cost_table({"plain": 2.0, "n_best 4": 2.5}, 100)[-1]
    '| n_best 4 | 2.500 | 40.0 | 1.250 |'
    """
    lines = ["| way | median s | sentences/s | x plain |", "|---|---:|---:|---:|"]
    return lines + [f"| {name} | {median:.3f} | {sentences / median:.1f} | {median / medians['plain']:.3f} |"
                    for name, median in medians.items()]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a `keras-transformer train` output folder")
    parser.add_argument("--split", default="test", help="of the embedded corpus (default: %(default)s)")
    parser.add_argument("--beam", type=int, default=4, help="(default: %(default)s)")
    parser.add_argument("--n", type=int, nargs="+", default=[1, 4], help="n-best sizes (default: 1 4)")
    parser.add_argument("--repeats", type=int, default=3, help="(default: %(default)s)")
    parser.add_argument("--out", default="benchmark_results/n_best_cost", help="folder for the results")
    args = parser.parse_args(argv)

    import keras

    from keras_transformer.data.parallel_corpus import ParallelCorpus
    from keras_transformer.translation.translator import Translator

    texts = [pair.source for pair in ParallelCorpus().read()[args.split]]
    translator = Translator.from_directory(args.model, beam_width=args.beam)
    ways = {"plain": lambda: translator(texts)}
    ways.update({f"n_best {n}": (lambda n=n: translator.n_best(texts, n)) for n in args.n})
    plain = ways["plain"]()
    first_is_plain = all([t.text for t in ways[f"n_best {n}"]()] == plain for n in args.n)
    seconds, medians = time_in_turn(ways, args.repeats)
    result = {"backend": keras.backend.backend(), "split": args.split, "sentences": len(texts), "beam": args.beam,
              "first_hypothesis_is_the_translation": first_is_plain, "seconds": seconds, "median_seconds": medians}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(result, f, indent=2)
    lines = cost_table(medians, len(texts))
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(f"{result['backend']}, {len(texts)} {args.split} sentences, beam {args.beam}, "
                f"median of {args.repeats}; first hypothesis = translation: {first_is_plain}\n\n"
                + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
