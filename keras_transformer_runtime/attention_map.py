"""A picture of one translation's cross-attention: source words against target words.

`draw_attention_map` draws the word-level weights the alignments read
(`keras_transformer_runtime.alignment.word_attention`) as a heatmap, each
alignment link outlined, with matplotlib's object interface (no pyplot
state, no display needed). `keras-transformer translate --attention-map
FILE.png` calls it.
"""

import numpy as np

from keras_transformer_runtime.alignment import word_attention
from keras_transformer_runtime.alignment import words_of_pieces
from keras_transformer_runtime.errors import UserInputError


def draw_attention_map(translation, path, title=None):
    """Draws the best hypothesis' cross-attention of `translation` to the image file `path`.

    Args:
        translation: a `hypotheses.Translation` from
            `TextTranslator.n_best(..., alignments=True)`.
        path: the image file to write (PNG, SVG or PDF, by its extension).
        title: the picture's title. Defaults to the source.

    Returns:
        The word-level weights drawn, float NumPy `(target words, source
        words)`.

    Raises:
        ValueError: the translation carries no attention, or its source
            or its best hypothesis has no words (a blank input).
        UserInputError: matplotlib is not installed.

    Example:

    >>> import os, tempfile
    >>> from keras_transformer_runtime.hypotheses import Hypothesis, Translation
    >>> hypothesis = Hypothesis("Let there be light.", -1.0, -0.8, ("▁Let", "▁light", ".", "</s>"), (),
    ...                         alignment=((0, 0), (2, 1)), attention=((0.9, 0.1, 0.0), (0.0, 0.2, 0.8),
    ...                                                               (0.1, 0.1, 0.8), (0.3, 0.3, 0.4)))
    >>> translation = Translation("Sea la luz.", (hypothesis,), ("▁Sea", "▁la", "▁luz."))
    >>> path = os.path.join(tempfile.mkdtemp(), "map.png")
    >>> draw_attention_map(translation, path).shape, os.path.getsize(path) > 0
    ((2, 3), True)
    """
    best = translation.hypotheses[0]
    if best.attention is None or translation.source_tokens is None:
        raise ValueError("The translation carries no attention: translate with n_best(..., alignments=True).")
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UserInputError('Drawing the attention map needs matplotlib: pip install "keras-transformer[plots]".')
    weights = word_attention(best.attention, translation.source_tokens, best.tokens)
    source_words, target_words = words_of_pieces(translation.source_tokens), words_of_pieces(best.tokens)
    if not source_words or not target_words:
        raise ValueError(f"nothing to draw: the {'source' if not source_words else 'translation'} has no words.")
    figure = Figure(figsize=(1.6 + 0.45 * max(len(source_words), 4), 1.4 + 0.38 * max(len(target_words), 4)),
                    layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    image = axes.imshow(weights, cmap="Blues", vmin=0.0, vmax=max(float(np.max(weights, initial=0.0)), 1e-9),
                        aspect="auto")
    for i, j in best.alignment or ():
        axes.add_patch(_outline(i, j))
    axes.set_xticks(range(len(source_words)), source_words, rotation=60, ha="right", rotation_mode="anchor")
    axes.set_yticks(range(len(target_words)), target_words)
    axes.set_xlabel("source word (attended to)")
    axes.set_ylabel("target word (being chosen)")
    axes.set_title(title or translation.source, fontsize="medium", wrap=True)
    figure.colorbar(image, ax=axes, label="cross-attention weight", shrink=0.8)
    figure.savefig(path, dpi=120)
    return weights


def _outline(i, j):
    from matplotlib.patches import Rectangle

    return Rectangle((i - 0.5, j - 0.5), 1, 1, fill=False, edgecolor="darkorange", linewidth=1.5)
