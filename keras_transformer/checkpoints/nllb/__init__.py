"""Hugging Face NLLB-200 (and M2M-100's model) checkpoints on this package's layers.

An `M2M100ForConditionalGeneration` is the paper's Transformer with
settings of its own, each an option of `keras_transformer.models.transformer`:
pre-LN (`norm_first`) with a LayerNorm after each stack, ReLU, biases on
every projection, one token matrix scaled by sqrt(d_model) for source,
target and output (`share_embeddings`, `tie_embeddings`), fairseq's
sinusoids (`sinusoid_layout="fairseq"`: sines then cosines, counted from
position 2), and a decoder that starts from `</s>` and writes the target
language's token first (the decoder's `forced_first_id`). Its ids are
permuted so that its specials sit where this package's are
(`keras_transformer_runtime.nllb_tokenizer`).

One module a step: `config` (`config.json` as `transformer()` arguments),
`weights` (the tensors, named as this package's variables), `checkpoint`
(the folder read and checked whole; the Keras model) and `run_import`
(`keras-transformer import`: a folder or hub id written as a run folder).

Example:

>>> from keras_transformer.checkpoints import nllb
>>> nllb.import_nllb("no such folder", "runs/nllb")
Traceback (most recent call last):
...
keras_transformer_runtime.errors.UserInputError: no such folder: no such folder, and not a hub id ...
"""

from keras_transformer.checkpoints.nllb.checkpoint import NllbCheckpoint
from keras_transformer.checkpoints.nllb.checkpoint import build_model
from keras_transformer.checkpoints.nllb.checkpoint import load_nllb
from keras_transformer.checkpoints.nllb.checkpoint import read_nllb
from keras_transformer.checkpoints.nllb.checkpoint import run_config
from keras_transformer.checkpoints.nllb.config import NllbArchitecture
from keras_transformer.checkpoints.nllb.run_import import import_nllb
