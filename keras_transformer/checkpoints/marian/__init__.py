"""Hugging Face Marian (OPUS-MT) checkpoints on this package's layers.

A `MarianMTModel` is the paper's Transformer with a few settings of its
own, each an option of `keras_transformer.models.transformer`: post-LN
with LayerNorm epsilon 1e-5, biases on every projection, swish in the
feed-forward, one token matrix for source, target and output
(`share_embeddings`, `tie_embeddings`) plus a `final_logits_bias`
(`output_bias`), sinusoids laid out in halves (`sinusoid_layout`), and a
decoder that starts from its padding token (`decoder_start_id`). Its ids
are permuted so that its specials sit where this package's are
(`keras_transformer_runtime.marian_tokenizer.marian_id_order`).

Reading a checkpoint needs neither torch nor transformers: `config.json`,
the weights of `model.safetensors` (read with `safetensors.numpy`) and the
SentencePiece models. A `pytorch_model.bin` needs torch to unpickle.

One module a step: `config` (`config.json` as `transformer()` arguments),
`weights` (the tensors, named as this package's variables), `checkpoint`
(the folder read and checked whole; the Keras model), `run_import`
(`keras-transformer import`: a folder or hub id written as a run folder)
and `export` (a run written back as a Marian folder).

Example:

>>> from keras_transformer.checkpoints import marian
>>> marian.fetch_marian("no such folder")
Traceback (most recent call last):
...
keras_transformer_runtime.errors.UserInputError: no such folder: no such folder, and not a hub id ...
"""

from keras_transformer.checkpoints.marian.checkpoint import MarianCheckpoint
from keras_transformer.checkpoints.marian.checkpoint import build_model
from keras_transformer.checkpoints.marian.checkpoint import load_marian
from keras_transformer.checkpoints.marian.checkpoint import read_marian
from keras_transformer.checkpoints.marian.checkpoint import run_config
from keras_transformer.checkpoints.marian.config import MarianArchitecture
from keras_transformer.checkpoints.marian.export import export_marian
from keras_transformer.checkpoints.marian.run_import import copy_vocabulary_files
from keras_transformer.checkpoints.marian.run_import import fetch_marian
from keras_transformer.checkpoints.marian.run_import import import_marian
