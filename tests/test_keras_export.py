"""`model.export(path, format=...)` through Keras, run in each format's own runtime.

A `kt.models.transformer(...)` exports wherever Keras 3.15 supports the
format on the backend, with a dynamic batch and length; the file then runs
in onnxruntime, OpenVINO or the LiteRT interpreter (no Flex ops) and gives
the Keras model's logits. The combinations Keras itself cannot export (for
any model with a LayerNormalization, say) are skipped with Keras' reason;
docs/keras-workflows.md lists them.
"""

import importlib.util

import keras
import numpy as np
import pytest

from conftest import to_numpy
import keras_transformer as kt

pytestmark = pytest.mark.export_runtimes

TOLERANCE = 1e-4
FILES = {"tf_saved_model": "saved_model", "onnx": "model.onnx", "openvino": "model.xml", "litert": "model.tflite"}
# What Keras 3.15 cannot export, whatever the layers (checked with a model of
# one Dense and one LayerNormalization).
KERAS_LIMITS = {
    ("jax", "litert"): "Keras exports LiteRT from TensorFlow or PyTorch only",
    ("jax", "openvino"): "Keras' JAX export leaves an XlaCallModule OpenVINO cannot convert",
    ("torch", "tf_saved_model"): "Keras exports a SavedModel from torch only through torch_xla",
    ("torch", "onnx"): "torch.onnx cannot export Keras' LayerNormalization with a dynamic length",
    ("torch", "litert"): "needs the litert-torch package (not in the export extra)",
}
RUNTIMES = {"onnx": ["onnxruntime"], "openvino": ["openvino"], "litert": ["ai_edge_litert"], "tf_saved_model": []}
EXPORTERS = {("tensorflow", "onnx"): "tf2onnx", ("jax", "onnx"): "jax2onnx", ("jax", "tf_saved_model"): "tensorflow"}


def _inputs(batch, length):
    rng = np.random.default_rng(batch * 100 + length)
    encoder = rng.integers(3, 50, (batch, length)).astype("int32")
    encoder[0, -2:] = 0  # padding
    return {"encoder_tokens": encoder, "decoder_tokens": rng.integers(3, 50, (batch, length - 1)).astype("int32")}


def _run(fmt, path, inputs):
    if fmt == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path))
        return session.run(None, {i.name: inputs[i.name] for i in session.get_inputs()})[0]
    if fmt == "openvino":
        import openvino

        # OpenVINO computes in bf16 on CPUs that have it unless told otherwise.
        compiled = openvino.Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        return compiled(inputs)[0]
    if fmt == "litert":
        from ai_edge_litert.interpreter import Interpreter

        interpreter = Interpreter(model_path=str(path))
        ops = {op["op_name"] for op in interpreter._get_ops_details()}
        assert not {op for op in ops if op.startswith("Flex")}, "Flex ops need TensorFlow's delegate"
        return next(iter(interpreter.get_signature_runner()(**inputs).values()))
    import tensorflow as tf

    loaded = tf.saved_model.load(str(path))  # held: its variables die with it
    return loaded.serve(inputs).numpy()


@pytest.mark.parametrize("fmt", sorted(FILES))
def test_keras_export_runs_in_its_runtime_with_a_dynamic_batch_and_length(fmt, tmp_path):
    backend = keras.backend.backend()
    if (backend, fmt) in KERAS_LIMITS:
        pytest.skip(f"Keras limit: {KERAS_LIMITS[(backend, fmt)]}")
    for module in RUNTIMES[fmt] + [EXPORTERS.get((backend, fmt), "keras")]:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed: pip install 'keras-transformer[export]'")
    keras.utils.set_random_seed(0)
    model = kt.models.transformer(50, 50, num_layers=1, d_model=16, num_heads=2, ff_dim=32, max_length=16,
                                  dropout=0.0, tie_embeddings=True)
    model(_inputs(2, 5))
    path = tmp_path / FILES[fmt]
    model.export(str(path), format=fmt, verbose=False)
    for batch, length in ((2, 7), (3, 12)):
        inputs = _inputs(batch, length)
        got = np.asarray(_run(fmt, path, inputs))
        np.testing.assert_allclose(got, to_numpy(model(inputs)), atol=TOLERANCE, rtol=TOLERANCE)
