"""Word alignments from cross-attention: which source word each target word attended to.

The rule reads the decoder's cross-attention (each layer's the mean of its
heads) at the step that chose each target piece (`decoding`'s
`return_cross_attention`):

1. Pieces are grouped into words: a piece that starts with `▁`
   (SentencePiece's word boundary) starts a word, the pieces after it
   continue that word. Words are the whitespace-separated words of the
   text, counted from 0 on each side.
2. A target word's attention to a source word is the attention of its
   pieces to the source word's pieces, the largest over the source word's
   pieces (a sum would favour words of many pieces, and words that carry
   a punctuation piece, where attention gathers) and averaged over the
   target word's pieces. The weights are those of one decoder layer or
   the mean of all (`ALIGNMENT_LAYER`, the default).
3. Each target word is linked to the source word it attended to most
   (ties: the first). The end token is no word and gets no link.

The links come as `(source word, target word)` pairs, written `i-j` as
fairseq, Moses and Marian write them. Which layer the rule reads is a
measured choice (`ALIGNMENT_LAYER`, benchmarks/alignment_layers.py), and so is
the largest over a source word's pieces.

Example (one layer's weights, a target piece a row):

>>> import numpy as np
>>> source, target = ["▁Sea", "▁la", "▁lu", "z", "."], ["▁Let", "▁there", "▁be", "▁light", ".", "</s>"]
>>> attention = np.full((6, 5), 0.01)
>>> for j, i in enumerate([0, 0, 0, 2, 4, 4]):
...     attention[j, i] = 0.96
>>> format_alignment(alignment_links(attention, source, target))
'0-0 0-1 0-2 2-3'
"""

import numpy as np

WORD_START = "▁"
END_PIECE = "</s>"

# The cross-attention the alignments read: the mean of the decoder layers,
# whose links agreed most often with the names and numbers a source and its
# translation share, on the splits of the shipped corpus that training never
# sees (docs/alignments.md).
ALIGNMENT_LAYER = "mean"


def word_of_each_piece(pieces):
    """For each piece, the index of the word it belongs to (see the module's rule).

    Args:
        pieces: a sequence of SentencePiece pieces (str).

    Returns:
        A list of ints, one per piece, from 0.

    Example:

    >>> word_of_each_piece(["▁Sea", "▁la", "▁lu", "z", "."])
    [0, 1, 2, 2, 2]
    """
    words, word = [], -1
    for piece in pieces:
        if word < 0 or piece.startswith(WORD_START):
            word += 1
        words.append(word)
    return words


def word_attention(attention, source_pieces, target_pieces):
    """The attention of each target word to each source word.

    Args:
        attention: float `(target pieces, source pieces)`, one layer's
            weights; rows past the target pieces given (e.g. the end
            token's) are ignored.
        source_pieces: the source's pieces.
        target_pieces: the target's pieces; a last `END_PIECE` is left out.

    Returns:
        float NumPy `(target words, source words)`: the largest over a
        source word's pieces, averaged over a target word's pieces.

    Example:

    >>> word_attention([[0.5, 0.25, 0.25], [0.0, 0.6, 0.4]], ["▁a", "▁b", "c"], ["▁x", "y"]).tolist()
    [[0.25, 0.425]]
    >>> word_attention((), (), ()).shape  # a blank input's empty translation
    (0, 0)
    """
    target_pieces = list(target_pieces)
    if target_pieces and target_pieces[-1] == END_PIECE:
        target_pieces = target_pieces[:-1]
    attention = np.asarray(attention, "float64").reshape(-1, len(source_pieces) or 1)
    attention = attention[: len(target_pieces), : len(source_pieces)]
    source_words, target_words = word_of_each_piece(source_pieces), word_of_each_piece(target_pieces)
    by_source_word = np.zeros((len(target_pieces), max(source_words, default=-1) + 1))
    np.maximum.at(by_source_word.T, source_words, attention.T)  # weights are >= 0
    sums = np.zeros((max(target_words, default=-1) + 1, by_source_word.shape[1]))
    np.add.at(sums, target_words, by_source_word)
    counts = np.bincount(target_words, minlength=sums.shape[0]).reshape(-1, 1)
    return sums / np.maximum(counts, 1)


def alignment_links(attention, source_pieces, target_pieces):
    """The `(source word, target word)` links of the module's rule, one per target word.

    Args:
        attention, source_pieces, target_pieces: as `word_attention`.

    Returns:
        A tuple of `(i, j)` int pairs, by target word `j`; empty when
        either side has no word.

    Example:

    >>> alignment_links([[0.2, 0.8], [0.7, 0.3], [0.5, 0.5]], ["▁luz", "▁Sea"], ["▁Let", "▁light", "</s>"])
    ((1, 0), (0, 1))
    """
    words = word_attention(attention, source_pieces, target_pieces)
    if words.size == 0:
        return ()
    return tuple((int(i), j) for j, i in enumerate(np.argmax(words, axis=1)))


def format_alignment(links):
    """Links as the usual `i-j i-j ...` text (source word - target word).

    Example:

    >>> format_alignment([(0, 0), (2, 1)])
    '0-0 2-1'
    """
    return " ".join(f"{i}-{j}" for i, j in links)


def check_layer(layer, layers):
    """Refuses an alignment layer that a model of `layers` decoder layers does not have.

    Args:
        layer: int index (negative from the last layer), or `"mean"`.
        layers: int, the model's decoder layers.

    Raises:
        ValueError: `layer` is neither `"mean"` nor an index of `layers` layers.

    Example:

    >>> check_layer(-1, 2)  # the last of two
    """
    if layer == "mean":
        return
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not -layers <= layer < layers:
        raise ValueError(f'alignment_layer must be "mean" or a decoder layer from {-layers} to {layers - 1} '
                         f"(the model has {layers}); got {layer!r}.")


def layer_weights(weights, layer):
    """One layer's weights out of every layer's, or their mean.

    Args:
        weights: float `(num_layers, target pieces, source pieces)`.
        layer: int index (negative from the last layer), or `"mean"`.

    Returns:
        float `(target pieces, source pieces)`.

    Raises:
        ValueError: as `check_layer`.

    Example:

    >>> layer_weights(np.arange(8.0).reshape(2, 2, 2), -1).tolist()
    [[4.0, 5.0], [6.0, 7.0]]
    """
    weights = np.asarray(weights)
    check_layer(layer, weights.shape[0])
    return weights.mean(axis=0) if layer == "mean" else weights[layer]


def words_of_pieces(pieces):
    """The words the pieces spell (the module's rule), without the end token.

    Example:

    >>> words_of_pieces(["▁Sea", "▁la", "▁lu", "z", ".", "</s>"])
    ['Sea', 'la', 'luz.']
    """
    pieces = list(pieces)
    if pieces and pieces[-1] == END_PIECE:
        pieces = pieces[:-1]
    words = []
    for piece, word in zip(pieces, word_of_each_piece(pieces)):
        if word == len(words):
            words.append("")
        words[word] += piece
    return [word.replace(WORD_START, " ").strip() for word in words]
