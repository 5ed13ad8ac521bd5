"""BLEU and chrF with sacrebleu, multi-reference where the corpus has two; loops counted."""

import string

import sacrebleu

# A translation "loops" when a word or a phrase of up to this many words...
LOOP_MAX_WORDS = 3
# ...occurs this many times or more in a row.
LOOP_REPEATS = 4


def loops(text, max_words=LOOP_MAX_WORDS, repeats=LOOP_REPEATS):
    """Whether a word or a phrase of up to `max_words` words repeats `repeats` times in a row.

    Words are compared lowercased and without surrounding punctuation, so
    "also also also also," loops.

    Args:
        text: a translation.
        max_words: int, the longest phrase checked.
        repeats: int, how many times in a row count as a loop.

    Returns:
        bool.

    Example:

    >>> loops("He also also also also, and all the heavens")
    True
    >>> loops("the light and good and good and good and good")
    True
    >>> loops("Holy, holy, holy is the Lord")
    False
    """
    words = [word.strip(string.punctuation).lower() for word in text.split()]
    for size in range(1, max_words + 1):
        for start in range(len(words) - size * repeats + 1):
            phrase = words[start : start + size]
            if all(words[start + k * size : start + (k + 1) * size] == phrase for k in range(1, repeats)):
                return True
    return False


def loop_rate(translations):
    """The fraction of `translations` that loop (see `loops`).

    Example:

    >>> loop_rate(["the the the the end", "in the beginning"])
    0.5
    """
    return sum(map(loops, translations)) / max(1, len(translations))


def score_translations(hypotheses, references):
    """Corpus BLEU and chrF of `hypotheses` against one or more references each.

    A sentence with fewer references than the others repeats its first one,
    which scores it exactly as a single-reference sentence.

    Args:
        hypotheses: list of translated strings.
        references: list (one entry per hypothesis) of reference tuples,
            e.g. `TranslationPair.references` (WEB, then KJV).

    Returns:
        A dict with `bleu`, `chrf` and their sacrebleu `signature`s.

    Example:

    >>> scores = score_translations(["the cat sat on the mat"],
    ...                             [("the cat sat on the mat",)])
    >>> round(scores["bleu"], 1)
    100.0
    """
    if len(hypotheses) != len(references):
        raise ValueError(
            f"Got {len(hypotheses)} hypotheses but {len(references)} reference entries."
        )
    if not hypotheses:
        raise ValueError("No hypotheses to score.")
    count = max(len(refs) for refs in references)
    streams = [[refs[i] if i < len(refs) else refs[0] for refs in references] for i in range(count)]
    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, streams)
    chrf_score = chrf.corpus_score(hypotheses, streams)
    return {
        "bleu": bleu_score.score,
        "chrf": chrf_score.score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "references_per_sentence": count,
    }


def evaluate_pairs(translator, pairs, verbose=1):
    """Translates `pairs` and scores them against their references.

    The translator gets every source at once: a `Translator` decodes them
    in batches of similar lengths and reports each batch to the progress bar.

    Args:
        translator: a `keras_transformer.translation.translator.Translator`, or any
            callable from a list of strings to a list of strings.
        pairs: list of `TranslationPair` (`source`, `references`).
        verbose: 1 shows a progress bar, 0 is silent.

    Returns:
        A dict: the scores of `score_translations`, `sentences`, the
        `loop_rate` and the `translations` themselves.

    Example (any callable from a list of strings to a list of strings
    serves as the translator):

    >>> from keras_transformer.data.corpus import TranslationPair
    >>> pair = TranslationPair("Gen.1.3", "Gen", "dev", "Sea la luz.",
    ...                        "Let there be light.", ("Let there be light.",))
    >>> result = evaluate_pairs(lambda texts: ["Let there be light."], [pair], verbose=0)
    >>> result["sentences"], round(result["bleu"], 1)
    (1, 100.0)
    """
    import keras

    from keras_transformer.translation.translator import Translator

    progress = keras.utils.Progbar(len(pairs), unit_name="sentence", verbose=verbose)
    sources = [pair.source for pair in pairs]
    if isinstance(translator, Translator):
        translations = translator(sources, progress=progress.add)
    else:
        translations = list(translator(sources))
        progress.add(len(pairs))
    scores = score_translations(translations, [pair.references for pair in pairs])
    return {**scores, "sentences": len(pairs), "loop_rate": loop_rate(translations), "translations": translations}
