"""How often each decoder layer's alignments link a name or number to itself, and what they cost.

    KERAS_BACKEND=jax python -m benchmarks.alignment_layers --model runs/es-en --out DIR

A check that needs no dictionary: a word that stands once in a source and
once in its translation, spelled the same (after stripping punctuation),
and that is a name (capitalized) or holds a digit, is the translation of
itself: "David" in "Y David dijo a Saúl" and in "David said to Saul". For
each such anchor the alignment (`keras_transformer_runtime.alignment`'s
rule) should link the target word to the source word. The default layer is
also read with two other ways of weighing a source word's pieces than the
rule's largest piece: their sum, and the first piece only. The share of
anchors it links right is measured for each decoder layer's
cross-attention and for their mean, beside a guess that needs no
attention at all (each target word linked to the source word at the same
relative position), with a 95 % Wilson interval, over the splits of the
embedded corpus that training never sees (dev, test, held-out), translated
by the model itself (`Translator.n_best(texts, 1, alignments=True)`).

It also times the translation of those sentences with `n_best(1)` with and
without alignments, and plainly (every shape compiled first, whole calls,
medians of `--repeats`), and writes `results.json` and `results.md`.
"""

import argparse
import json
import math
import os
import statistics
import time

PUNCTUATION = "\"'“”‘’¿¡«»()[],.;:!?-—"


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


def bare(word):
    """`word` without the punctuation around it.

    Example:

    >>> bare("“Jacob,")
    'Jacob'
    """
    return word.strip(PUNCTUATION)


def anchors(source, target):
    """`(source word, target word)` index pairs of the names and numbers both sides spell alike, once each.

    Example:

    >>> anchors("Y David dijo a Saúl: 12 panes.", "And David said to Saul, “12 loaves.”")
    [(1, 1), (5, 5)]
    """
    source_words, target_words = [bare(w) for w in source.split()], [bare(w) for w in target.split()]
    pairs = []
    for i, word in enumerate(source_words):
        named = len(word) >= 2 and (word[0].isupper() or any(c.isdigit() for c in word))
        if named and source_words.count(word) == 1 and target_words.count(word) == 1:
            pairs.append((i, target_words.index(word)))
    return pairs


def positional_links(source, target):
    """Each target word linked to the source word at the same relative position (the guess without attention).

    Example:

    >>> sorted(positional_links("a b", "x y z w"))
    [(0, 0), (0, 1), (1, 2), (1, 3)]
    """
    source_count, target_count = len(source.split()), len(target.split())
    return {(min(source_count - 1, int(j * source_count / target_count)), j) for j in range(target_count)}


def _links_by(hypothesis, source_pieces, how):
    """The links of the alignment rule with another way of reading a source word's pieces: `"sum"` or `"first"`.

    The rule takes the largest weight over a source word's pieces; these
    are the alternatives it was measured against.
    """
    import numpy as np

    from keras_transformer_runtime.alignment import END_PIECE
    from keras_transformer_runtime.alignment import word_of_each_piece

    target_pieces = [p for p in hypothesis.tokens if p != END_PIECE]
    if not target_pieces or not source_pieces:
        return set()
    attention = np.asarray(hypothesis.attention)[: len(target_pieces), : len(source_pieces)]
    source_words, target_words = word_of_each_piece(source_pieces), word_of_each_piece(target_pieces)
    scores = np.zeros((max(target_words) + 1, max(source_words) + 1))
    for a, j in enumerate(target_words):
        for b, i in enumerate(source_words):
            if how == "sum" or b == 0 or source_words[b - 1] != i:
                scores[j, i] += attention[a, b]
    return {(int(i), j) for j, i in enumerate(np.argmax(scores, axis=1))}


def agreement(examples, links_of):
    """`(hits, anchors)`: how many anchors the links `links_of(example)` hold, of how many.

    Example:

    >>> agreement([{"anchors": [(1, 0), (2, 2)]}], lambda example: {(1, 0), (0, 1)})
    (1, 2)
    """
    hits = total = 0
    for example in examples:
        links = links_of(example)
        for pair in example["anchors"]:
            total += 1
            hits += pair in links
    return hits, total


def wilson_interval(hits, total, z=1.96):
    """The 95 % Wilson score interval of a share `hits / total`.

    Example:

    >>> [round(bound, 3) for bound in wilson_interval(90, 100)]
    [0.826, 0.945]
    """
    if not total:
        return float("nan"), float("nan")
    share = hits / total
    centre = (share + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(share * (1 - share) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return centre - half, centre + half


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a `keras-transformer train` output folder")
    parser.add_argument("--splits", nargs="+", default=["dev", "test", "heldout"],
                        help="of the embedded corpus (default: dev test heldout)")
    parser.add_argument("--beam", type=int, default=4, help="(default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="timing rounds (default: %(default)s)")
    parser.add_argument("--out", default="benchmark_results/alignment_layers", help="folder for the results")
    args = parser.parse_args(argv)

    import keras

    from keras_transformer.data.parallel_corpus import ParallelCorpus
    from keras_transformer.translation.translator import Translator
    from keras_transformer_runtime.alignment import ALIGNMENT_LAYER

    splits = ParallelCorpus().read()
    texts = [pair.source for split in args.splits for pair in splits[split]]
    translator = Translator.from_directory(args.model, beam_width=args.beam)
    layers = [*range(translator.decoder_layer_count()), "mean"]
    examples = []
    for layer in layers:
        for k, translation in enumerate(translator.n_best(texts, 1, alignments=True, alignment_layer=layer)):
            if layer == layers[0]:
                text = translation.text
                examples.append({"source": texts[k], "translation": text, "anchors": anchors(texts[k], text),
                                 "links": {}})
            examples[k]["links"][str(layer)] = set(translation.hypotheses[0].alignment)
            if layer == ALIGNMENT_LAYER:
                for how in ("sum", "first"):
                    examples[k]["links"][f"{layer}, {how}"] = _links_by(translation.hypotheses[0],
                                                                      translation.source_tokens, how)
    hits = {name: agreement(examples, lambda example: example["links"][name])[0] for name in examples[0]["links"]}
    hits["position"], count = agreement(examples, lambda e: positional_links(e["source"], e["translation"]))

    ways = {"plain": lambda: translator(texts), "n_best 1": lambda: translator.n_best(texts, 1),
            "n_best 1 + alignments": lambda: translator.n_best(texts, 1, alignments=True)}
    seconds, medians = time_in_turn(ways, args.repeats)

    default_layer = ALIGNMENT_LAYER if ALIGNMENT_LAYER == "mean" else str(range(len(layers) - 1)[ALIGNMENT_LAYER])
    result = {"backend": keras.backend.backend(), "model": args.model, "splits": args.splits, "sentences": len(texts),
              "beam": args.beam, "anchors": count, "sentences_with_anchors": sum(bool(e["anchors"]) for e in examples),
              "anchors_linked": hits, "default": default_layer, "seconds": seconds, "median_seconds": medians,
              "examples": [{"source": e["source"], "translation": e["translation"], "anchors": e["anchors"]}
                           for e in examples if e["anchors"]][:20]}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(result, f, indent=2, ensure_ascii=False)
    lines = ["| cross-attention read | anchors linked right | share | 95 % interval |", "|---|---:|---:|---|"]
    for name, linked in hits.items():
        label = {"mean": "mean of the layers", "position": "no attention: same relative position",
                 f"{ALIGNMENT_LAYER}, sum": f"{ALIGNMENT_LAYER}, summed over a source word's pieces",
                 f"{ALIGNMENT_LAYER}, first": f"{ALIGNMENT_LAYER}, a source word's first piece only"}.get(
            name, f"decoder layer {name}") + (" (the default)" if name == default_layer else "")
        low, high = wilson_interval(linked, count)
        lines.append(f"| {label} | {linked} of {count} | {linked / count:.1%} | {low:.1%} - {high:.1%} |")
    lines += ["", *cost_table(medians, len(texts))]
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(f"{result['backend']}, {len(texts)} sentences ({' '.join(args.splits)}), beam {args.beam}, "
                f"{count} anchors in "
                f"{result['sentences_with_anchors']} sentences; timings: median of {args.repeats}\n\n"
                + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
