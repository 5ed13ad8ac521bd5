"""The gradient norm of each layer of a model on one batch.

Backend-specific code (`jax.grad`, `tf.GradientTape`, torch autograd) lives
here, at the edge, not in the layers.
"""

import math
import weakref

import keras
import numpy as np

from keras_transformer.diagnostics.arrays import to_float64

_jax_gradients = weakref.WeakKeyDictionary()  # model -> {loss: its compiled gradient}


def _owners(model):
    """Maps each trainable variable's id to the top-level layer holding it."""
    owners = {}
    for layer in model.layers:
        for variable in layer.trainable_weights:
            owners.setdefault(id(variable), layer.name)
    return owners


def gradient_norms(model, inputs, targets, loss=None):
    """The gradient norm of each layer's weights on one batch.

    Uses the backend's own autodiff (`tf.GradientTape`, `jax.grad`, torch's
    `backward`); the weights are not changed.

    Args:
        model: a built Keras model.
        inputs: a batch the model accepts.
        targets: the labels for `loss`.
        loss: a Keras loss; defaults to the model's compiled loss.

    Returns:
        A dict `{layer name: global L2 norm of its weights' gradients}` for
        the layers with trainable weights.

    Example:

    >>> import keras_transformer as kt
    >>> model = kt.models.transformer(50, 50, num_layers=1, d_model=16,
    ...                               num_heads=2, ff_dim=32, max_length=8)
    >>> batch = {"encoder_tokens": np.array([[5, 6, 7, 0]]),
    ...          "decoder_tokens": np.array([[2, 9, 4]])}
    >>> norms = gradient_norms(model, batch, np.array([[9, 4, 3]]),
    ...                        kt.training.MaskedSparseCrossentropy())
    >>> all(value > 0 for value in norms.values()), "decoder_layer_0" in norms
    (True, True)
    """
    loss = loss or model.loss
    if loss is None:
        raise ValueError("gradient_norms needs a loss: pass `loss` or compile the model.")
    loss = keras.losses.get(loss)
    variables = model.trainable_variables
    grads = _gradients(model, variables, inputs, targets, loss)
    owners = _owners(model)
    squares = {}
    for variable, grad in zip(variables, grads):
        name = owners.get(id(variable), "other")
        value = 0.0 if grad is None else float(np.sum(to_float64(grad) ** 2))
        squares[name] = squares.get(name, 0.0) + value
    return {name: math.sqrt(value) for name, value in squares.items()}


def _gradients(model, variables, inputs, targets, loss):
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            value = loss(targets, model(inputs, training=False))
        return tape.gradient(value, variables)
    if backend == "jax":
        import jax

        trainable = [v.value for v in model.trainable_variables]
        frozen = [v.value for v in model.non_trainable_variables]

        gradient = _jax_gradients.setdefault(model, {}).get(loss)
        if gradient is None:
            owner = weakref.ref(model)  # the cache's value must not keep its key alive

            def compute(trainable_values, frozen_values, batch_inputs, batch_targets):
                outputs, _ = owner().stateless_call(trainable_values, frozen_values, batch_inputs, training=False)
                return loss(batch_targets, outputs)

            # Compiled whole, once per model and loss: op by op, JAX compiled hundreds of small programs, most of
            # a short fit logging every step (benchmarks/findings/training-speed.md, "Compiled or not").
            gradient = _jax_gradients[model][loss] = jax.jit(jax.grad(compute))
        return gradient(trainable, frozen, inputs, targets)
    if backend == "torch":
        model.zero_grad()
        value = loss(targets, model(inputs, training=False))
        value.backward()
        grads = [v.value.grad for v in variables]
        model.zero_grad()
        return grads
    raise NotImplementedError(f"gradient_norms does not support the {backend!r} backend.")
