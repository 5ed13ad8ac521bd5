"""Whether a starting run's vocabulary can spell a new corpus (`train --from`).

A fine-tuned run keeps the vocabulary of the run it starts from
(`vocabulary_from`): a character that vocabulary has no piece for becomes
`<unk>`, which the model can neither read nor write. This module measures
that share on a sample of the corpus, warns above `UNKNOWN_WARNING` and
refuses the corpus above `UNKNOWN_ERROR`.
"""

import os

from keras_transformer.errors import UserInputError
from keras_transformer_runtime.run_files import VOCABULARY_FILE
from keras_transformer_runtime.run_tokenizer import is_marian_run
from keras_transformer_runtime.run_tokenizer import is_nllb_run

# Characters of a corpus that a given vocabulary (a fine-tuned run's) cannot
# spell (they become <unk>): above the first share a warning, above the
# second the run is refused.
UNKNOWN_WARNING, UNKNOWN_ERROR = 0.01, 0.5
_SAMPLE_PAIRS = 5000


def unknown_shares(pairs, vocabulary_path, sample=_SAMPLE_PAIRS):
    """The share of each side's characters that a vocabulary cannot spell.

    A character the vocabulary has no piece for becomes `<unk>`: the model
    can neither read it (source) nor write it (target). Counted on the
    first `sample` pairs, spaces excluded.

    Args:
        pairs: `TranslationPair`s of the corpus.
        vocabulary_path: a `vocabulary.spm`.
        sample: int, pairs counted.

    Returns:
        `(source_share, target_share)`, floats in [0, 1].

    Example:

    >>> import tempfile, os
    >>> from keras_transformer.data.corpus import TranslationPair
    >>> from keras_transformer_runtime.sentence_piece_tokenizer import train_tokenizer
    >>> path = os.path.join(tempfile.mkdtemp(), "v.spm")
    >>> _ = train_tokenizer(["la tierra y el cielo", "the earth and the sky"], 20, path=path)
    >>> unknown_shares([TranslationPair("1", "", "train", "la tierra", "地球", ("地球",))], path)
    (0.0, 1.0)
    """
    from keras_transformer_runtime.sentence_piece_tokenizer import read_vocabulary
    from keras_transformer_runtime.special_tokens import UNK_ID

    _, processor = read_vocabulary(vocabulary_path)
    shares = []
    for side in ("source", "target"):
        texts = [getattr(pair, side) for pair in pairs[:sample]]
        # An unknown piece is spelled by its surface text, and its id is <unk>'s.
        rows = zip(processor.encode(texts, out_type=int), processor.encode(texts, out_type=str))
        shares.append(_unknown_share((piece, id_ == UNK_ID) for ids, pieces in rows for id_, piece in zip(ids, pieces)))
    return tuple(shares)


def _unknown_share(pieces):
    """The share of the characters of `(piece, unknown)` pairs that are in unknown pieces (spaces excluded)."""
    unknown = total = 0
    for piece, is_unknown in pieces:
        characters = len(piece.replace("\u2581", "").replace(" ", ""))
        total += characters
        unknown += characters * is_unknown
    return unknown / total if total else 0.0


def _marian_unknown_shares(pairs, run, sample=_SAMPLE_PAIRS):
    """`unknown_shares` for an imported Marian run: each side's pieces looked up in its id table."""
    from keras_transformer_runtime.marian_tokenizer import MarianTokenizer
    from keras_transformer_runtime.special_tokens import UNK_ID

    tokenizer = MarianTokenizer(run)
    return tuple(
        _unknown_share((piece, to_id(piece) == UNK_ID)
                       for pieces in processor.encode([getattr(pair, side) for pair in pairs[:sample]], out_type=str)
                       for piece in pieces)
        for side, processor, to_id in (("source", tokenizer.source_processor, tokenizer.source_token_to_id),
                                       ("target", tokenizer.target_processor, tokenizer.token_to_id))
    )


def _nllb_unknown_shares(pairs, run, sample=_SAMPLE_PAIRS):
    """`unknown_shares` for an imported NLLB-200 or M2M-100 run: the share of each side's pieces that are `<unk>`.

    Each piece counts one: NLLB's BPE fuses a run of unknown characters into one `<unk>`.
    """
    from keras_transformer_runtime.m2m100_tokenizer import open_m2m100_tokenizer
    from keras_transformer_runtime.special_tokens import UNK_ID

    tokenizer = open_m2m100_tokenizer(run)
    return tuple(
        _unknown_share(("x", i == UNK_ID) for row in tokenizer.piece_ids([getattr(pair, side)
                                                                             for pair in pairs[:sample]])
                       for i in row)
        for side in ("source", "target")
    )


def check_vocabulary_covers(pairs, run, log=print):
    """Says how much of a corpus the vocabulary of `run` (`--from`) cannot spell; refuses a corpus it cannot read.

    Args:
        pairs: `TranslationPair`s of the corpus.
        run: the run folder whose `vocabulary.spm` is checked.
        log: callable for the one-line figure.

    Returns:
        `(source_share, target_share)`, as `unknown_shares`.

    Raises:
        UserInputError: more than `UNKNOWN_ERROR` of a side's characters
            are unknown to the vocabulary.

    Example:

    >>> import tempfile, os
    >>> from keras_transformer.data.corpus import TranslationPair
    >>> from keras_transformer_runtime.sentence_piece_tokenizer import train_tokenizer
    >>> run = tempfile.mkdtemp()
    >>> _ = train_tokenizer(["la tierra y el cielo", "the earth and the sky"], 20,
    ...                     path=os.path.join(run, "vocabulary.spm"))
    >>> pairs = [TranslationPair("1", "", "train", "la tierra", "the earth", ("the earth",))]
    >>> check_vocabulary_covers(pairs, run, log=lambda line: None)
    (0.0, 0.0)
    """
    if is_nllb_run(run):
        source, target = _nllb_unknown_shares(pairs, run)
    elif is_marian_run(run):
        source, target = _marian_unknown_shares(pairs, run)
    else:
        source, target = unknown_shares(pairs, os.path.join(run, VOCABULARY_FILE))
    log(f"vocabulary of {run}: {source:.2%} of the source and {target:.2%} of the target characters "
        "are unknown to it (<unk>)")
    worst = max(source, target)
    if worst > UNKNOWN_ERROR:
        raise UserInputError(
            f"the vocabulary of --from {run!r} cannot spell {worst:.0%} of the new corpus' "
            f"{'source' if source >= target else 'target'} characters (another script or language?): "
            "fine-tuning would learn <unk>. Train a new model on this corpus instead (no --from); nothing was written."
        )
    if worst > UNKNOWN_WARNING:
        import warnings

        warnings.warn(
            f"the vocabulary of --from {run!r} cannot spell {worst:.1%} of the new corpus' "
            f"{'source' if source >= target else 'target'} characters; they become <unk> in training and "
            "translations. A model trained on this corpus from scratch has its own vocabulary.",
            stacklevel=2,
        )
    return source, target
