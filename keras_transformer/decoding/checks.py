"""Host-side checks of what a decoding call is given, before any model work.

Decoding takes its source from the host, so unlike the layers (which see
token values only when eager) these checks always run, on every backend.
"""

import numpy as np
from keras import ops

from keras_transformer.layers.input_checks import token_id_error


def check_encoder_tokens(encoder_tokens, decoder, owner="decoding"):
    """Host-side checks of a batch of source ids; returns it as int32 NumPy.

    Decoding takes its source from the host, so unlike the layers (which see
    token values only when eager) these checks always run, on every backend,
    before any model work.

    Args:
        encoder_tokens: array-like `(batch, source_length)` of token ids.
        decoder: the `CachedDecoder` (or an object with the same interface)
            whose model the ids are for; its `source_vocabulary_size` and
            `source_max_length`, when present, bound the ids and length.
        owner: str, the function named in messages.

    Returns:
        An int32 NumPy array.

    Raises:
        TypeError: non-integer ids.
        ValueError: not a rectangular `(batch, source_length)` array, an
            empty batch or length, a length beyond the model's
            `max_length`, or ids outside the source vocabulary.

    Example:

    >>> check_encoder_tokens([[5, 6, 0]], decoder=None).dtype
    dtype('int32')
    """
    try:
        tokens = np.asarray(ops.convert_to_numpy(encoder_tokens) if ops.is_tensor(encoder_tokens) else encoder_tokens)
    except ValueError as error:  # ragged nested lists
        raise ValueError(
            f"{owner}: `encoder_tokens` must be a rectangular (batch, source_length) array "
            f"of token ids padded with 0 ({error})."
        ) from None
    if tokens.dtype.kind not in "iu":
        raise TypeError(
            f"{owner}: `encoder_tokens` must hold integer token ids, got dtype {tokens.dtype}. "
            "Tokenize the text first, or cast the ids with `.astype(\"int32\")`."
        )
    if tokens.ndim != 2:
        raise ValueError(
            f"{owner}: `encoder_tokens` must have shape (batch, source_length), got shape "
            f"{tokens.shape}. For one sentence pass a batch of one: [token_ids]."
        )
    if 0 in tokens.shape:
        raise ValueError(
            f"{owner}: `encoder_tokens` is empty (shape {tokens.shape}); pass at least one "
            "row with at least one position."
        )
    max_length = getattr(decoder, "source_max_length", None)
    if max_length is not None and tokens.shape[1] > max_length:
        raise ValueError(
            f"{owner}: `encoder_tokens` has source_length {tokens.shape[1]}, beyond the "
            f"model's max_length={max_length}. Truncate the rows (the Translator does, "
            "with a warning)."
        )
    vocabulary_size = getattr(decoder, "source_vocabulary_size", None)
    if vocabulary_size is not None:
        error = token_id_error(
            owner, "encoder_tokens", tokens, vocabulary_size,
            "Tokenize with the vocabulary the model was trained with.",
        )
        if error is not None:
            raise error
    return tokens.astype("int32")



def check_decoder(decoder, owner):
    """Raises `TypeError` unless `decoder` has a decoder's interface.

    A decoder has `start(encoder_tokens) -> state`, `next_logits(tokens,
    index, state) -> (logits, state)` and `max_length`, as `CachedDecoder`.

    Args:
        decoder: the object to check.
        owner: str, the function named in the message.

    Example:

    >>> check_decoder("model.keras", "greedy_search")
    Traceback (most recent call last):
    ...
    TypeError: greedy_search: `decoder` must be a CachedDecoder, got str. ...
    """
    if not all(hasattr(decoder, name) for name in ("start", "next_logits", "max_length")):
        raise TypeError(
            f"{owner}: `decoder` must be a CachedDecoder, got {type(decoder).__name__}. "
            f"Wrap the model: {owner}(CachedDecoder(model), ...)."
        )


def check_int(owner, name, value, low):
    """Raises unless `value` is an int (not a bool) `>= low`.

    Example:

    >>> check_int("beam_search", "beam_width", 0, 1)
    Traceback (most recent call last):
    ...
    ValueError: beam_search: `beam_width` must be >= 1, got beam_width=0.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{owner}: `{name}` must be an int, got {name}={value!r}.")
    if value < low:
        raise ValueError(f"{owner}: `{name}` must be >= {low}, got {name}={value}.")


def check_max_new_tokens(max_new_tokens, max_length):
    """Raises unless `max_new_tokens` is an int in `[1, max_length)`.

    The start token takes the first of the cache's `max_length` positions.

    Example:

    >>> check_max_new_tokens(12, 12)
    Traceback (most recent call last):
    ...
    ValueError: max_new_tokens=12 must be in [1, max_length=12): the start token takes one position.
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)):
        raise TypeError(f"`max_new_tokens` must be an int, got max_new_tokens={max_new_tokens!r}.")
    if not 1 <= max_new_tokens < max_length:
        raise ValueError(
            f"max_new_tokens={max_new_tokens} must be in [1, max_length={max_length}): "
            "the start token takes one position."
        )
