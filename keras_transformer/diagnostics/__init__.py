"""The statistics the tutorials measure, as functions and a Keras callback.

Three groups:

- **Attention logits and softmax**: the variance of `q . k` for random
  unit-variance vectors (it is `key_dim`), the entropy, largest weight and
  Jacobian norm of a softmax, and the logits of a built model's attention
  layers on a real batch.
- **Embeddings**: how large the scaled token vectors are next to the
  positional encodings, and how much of the learned token embeddings lies in
  the subspace the positions use.
- **Gradients**: the gradient norm of each layer of a model on one batch
  (backend-specific code lives here, at the edge, not in the layers).

`DiagnosticsLogger` logs them during `model.fit`; the tutorials call the
functions directly. Everything returns numpy floats or arrays.


Each group is a module of this package; every public function is also here,
as `keras_transformer.diagnostics.<name>`.
"""

from keras_transformer.diagnostics.arrays import to_float64
from keras_transformer.diagnostics.attention import attention_logits
from keras_transformer.diagnostics.attention import attention_statistics
from keras_transformer.diagnostics.attention import dot_product_variance
from keras_transformer.diagnostics.attention import logit_variance_estimates
from keras_transformer.diagnostics.attention import softmax_entropy
from keras_transformer.diagnostics.attention import softmax_jacobian_norm
from keras_transformer.diagnostics.attention import softmax_max_weight
from keras_transformer.diagnostics.embeddings import embedding_layers
from keras_transformer.diagnostics.embeddings import embedding_position_ratio
from keras_transformer.diagnostics.embeddings import positional_subspace_energy
from keras_transformer.diagnostics.embeddings import principal_angles
from keras_transformer.diagnostics.gradients import gradient_norms
from keras_transformer.diagnostics.logger import DiagnosticsLogger

__all__ = [
    "DiagnosticsLogger",
    "attention_logits",
    "attention_statistics",
    "dot_product_variance",
    "embedding_layers",
    "embedding_position_ratio",
    "gradient_norms",
    "logit_variance_estimates",
    "positional_subspace_energy",
    "principal_angles",
    "softmax_entropy",
    "softmax_jacobian_norm",
    "softmax_max_weight",
    "to_float64",
]
