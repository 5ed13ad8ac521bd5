"""benchmarks.xla_cost: XLA's cost analysis and the optimized HLO of a training step, by category (JAX only)."""

import json
import os

import keras
import pytest

pytestmark = pytest.mark.skipif(keras.backend.backend() != "jax", reason="benchmarks.xla_cost compiles with JAX")

from benchmarks import xla_cost  # noqa: E402
from benchmarks.reference_models import build_model  # noqa: E402

# A hand-written module with one op of each kind the parser must tell apart:
# a bf16 matmul fused with its bias, an attention matmul (batch dimensions),
# a cuDNN flash-attention custom-call, a loop of RNG run 3 times, the
# log-softmax's reduction over a vocabulary of 32, the optimizer's update,
# a transpose, an all-reduce and a host callback.
MODULE = """
HloModule jit_train_step

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}

%fused_dot (x: bf16[8,16], w: bf16[16,32], bias: f32[32]) -> f32[8,32] {
  %x = bf16[8,16]{1,0} parameter(0)
  %w = bf16[16,32]{1,0} parameter(1)
  %bias = f32[32]{0} parameter(2)
  %dot.1 = f32[8,32]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %broadcast.1 = f32[8,32]{1,0} broadcast(%bias), dimensions={1}
  ROOT %add.1 = f32[8,32]{1,0} add(%dot.1, %broadcast.1)
}

%body (state: (s32[], u32[4])) -> (s32[], u32[4]) {
  %state = (s32[], u32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%state), index=0
  %bits = u32[4]{0} get-tuple-element(%state), index=1
  %next = u32[4]{0} xor(%bits, %bits), metadata={op_name="jit(train_step)/dropout/jit(_uniform)/threefry2x32/xor"}
  ROOT %out = (s32[], u32[4]{0}) tuple(%i, %next)
}

%condition (state: (s32[], u32[4])) -> pred[] {
  %state.1 = (s32[], u32[4]{0}) parameter(0)
  %i.1 = s32[] get-tuple-element(%state.1), index=0
  %three = s32[] constant(3)
  ROOT %lt = pred[] compare(%i.1, %three), direction=LT
}

ENTRY %main (x: bf16[8,16], w: bf16[16,32], bias: f32[32], q: bf16[2,4,8,8], seed: (s32[], u32[4])) -> f32[32] {
  %x.1 = bf16[8,16]{1,0} parameter(0)
  %w.1 = bf16[16,32]{1,0} parameter(1)
  %bias.1 = f32[32]{0} parameter(2)
  %q = bf16[2,4,8,8]{3,2,1,0} parameter(3)
  %seed = (s32[], u32[4]{0}) parameter(4)
  %logits = f32[8,32]{1,0} fusion(%x.1, %w.1, %bias.1), kind=kOutput, calls=%fused_dot
  %scores = f32[2,4,8,8]{3,2,1,0} dot(%q, %q), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={3}
  %flash = (bf16[2,4,8,8]{3,2,1,0}, u8[0]{0}) custom-call(%q, %q, %q), custom_call_target="__cudnn$fmhaSoftmax"
  %loop = (s32[], u32[4]{0}) while(%seed), condition=%condition, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  %zero = f32[] constant(0)
  %lse = f32[8]{0} reduce(%logits, %zero), dimensions={1}, to_apply=%add, metadata={op_name="jit(train_step)/compile_loss/sparse_categorical_crossentropy/log_softmax/reduce_sum"}
  %update = f32[32]{0} multiply(%bias.1, %bias.1), metadata={op_name="jit(train_step)/adam/mul"}
  %moved = bf16[16,8]{1,0} transpose(%x.1), dimensions={1,0}
  %summed = f32[32]{0} all-reduce(%update), to_apply=%add
  %host = () custom-call(%summed), custom_call_target="xla_ffi_python_cpu_callback"
  ROOT %result = f32[32]{0} add(%summed, %bias.1)
}
"""


def test_hlo_categories_of_a_hand_written_module():
    report = xla_cost.categorize_hlo(MODULE, vocabulary_size=32)
    categories = report["categories"]
    ops = {name: value["ops"] for name, value in categories.items()}
    assert ops == {
        "matmul (dense)": 1,  # the fusion of dot and bias: one op
        "matmul (attention)": 1,
        "attention (fused kernel)": 1,
        "host transfers and callbacks": 1,
        "collectives": 1,
        "dropout RNG": 3,  # the loop body's xor, run 3 times
        "optimizer": 1,
        "logits and loss over the vocabulary": 1,
        "copies and transposes": 1,
        "other element-wise": 4,  # the final add, and the loop condition's compare run 3 times
    }
    assert categories["matmul (dense)"]["flops"] == 2 * 8 * 32 * 16 + 8 * 32  # dot, and the bias add (one FLOP an element)
    assert categories["matmul (dense)"]["bytes"] == 8 * 16 * 2 + 16 * 32 * 2 + 32 * 4 + 8 * 32 * 4
    assert categories["matmul (attention)"]["flops"] == 2 * (2 * 4 * 8 * 8) * 8
    assert report["matmul_dtypes"] == {
        "bf16 x bf16 -> f32": {"ops": 2, "flops": 2 * 8 * 32 * 16 + 2 * (2 * 4 * 8 * 8) * 8}}
    assert report["fused_attention_targets"] == {"__cudnn$fmhaSoftmax": 1}
    assert report["while_loops"] == [{"op_name": "", "trip_count": 3}]


def test_roofline_charges_f32_matmuls_at_the_f32_rate():
    categories = {"matmul (dense)": {"flops": 1e12, "bytes": 0}}
    bf16 = xla_cost.roofline(categories, {"bf16 x bf16 -> f32": {"ops": 1, "flops": 1e12}},
                             peak_flops=1e12, peak_flops_f32=0.5e12)
    f32 = xla_cost.roofline(categories, {"f32 x f32 -> f32": {"ops": 1, "flops": 1e12}},
                            peak_flops=1e12, peak_flops_f32=0.5e12)
    assert bf16["matmul (dense)"] == {"seconds": 1.0, "bound": "compute"}
    assert f32["matmul (dense)"] == {"seconds": 2.0, "bound": "compute"}


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("xla_cost"))
    assert xla_cost.main(["--config", "quick", "--seq-len", "8", "--batch-size", "2", "--time-calls", "2",
                          "--out", out]) == 0
    with open(os.path.join(out, "results.json")) as f:
        report = json.load(f)
    with open(os.path.join(out, "results.md")) as f:
        table = f.read()
    return report, table


def _kernels(implementation):
    """Matmul kernels of the quick model (2-D or more weights that are not embedding tables)."""
    model = build_model(implementation, "quick", 8)
    return [w for w in model.trainable_weights if len(w.shape) >= 2 and "embedding" not in w.path]


def test_tool_writes_both_programs_and_sees_every_kernels_matmuls(quick_report):
    report, table = quick_report
    result = report["results"][0]
    assert result["implementation"] == "keras_transformer"
    assert "### keras_transformer: training step" in table and "### keras_transformer: encoder forward pass" in table
    kernels = len(_kernels("keras_transformer"))
    train = result["train"]
    # Every kernel: one matmul forward and two backward (the input's and the kernel's gradients).
    assert train["categories"]["matmul (dense)"]["ops"] >= 3 * kernels
    assert train["categories"]["matmul (attention)"]["ops"] > 0
    assert train["categories"]["optimizer"]["ops"] > 0
    assert train["categories"]["dropout RNG"]["ops"] > 0
    assert train["categories"]["logits and loss over the vocabulary"]["ops"] > 0
    # The encoder alone: no optimizer, no loss, no dropout at inference.
    encode = result["encode"]
    assert {"optimizer", "logits and loss over the vocabulary", "dropout RNG"}.isdisjoint(encode["categories"])
    assert encode["categories"]["matmul (dense)"]["ops"] >= 4  # Q/K/V (fused), output, two feed-forward


def test_the_compiled_programs_run_and_are_timed(quick_report):
    report, table = quick_report
    for program in ("train", "encode"):
        timed = report["results"][0][program]["timed"]
        assert len(timed["seconds_repeats"]) == 2 and timed["seconds"] > 0
        tokens = 2 * 8 * (2 if program == "train" else 1)
        assert timed["tokens_per_second"] == pytest.approx(tokens / timed["seconds"])
    assert table.count("the compiled program alone (2 calls, median)") == 2


def test_xla_flops_are_near_the_model_flops(quick_report):
    report, _ = quick_report
    for program in ("train", "encode"):
        data = report["results"][0][program]
        # XLA also counts element-wise work, biases and norms; model FLOPs only the matmuls.
        assert 1.0 <= data["xla_over_model_flops"] < 2.0, (program, data["xla_over_model_flops"])
        matmul = sum(value["flops"] for value in data["matmul_dtypes_compiled"].values())
        assert matmul == pytest.approx(data["model_flops"], rel=0.05)


def _encode_matmul_dtypes(precision):
    args = xla_cost.parse_args(["--config", "quick", "--seq-len", "8", "--batch-size", "2", "--programs", "encode",
                                "--out", "unused", *(["--mixed-precision", precision] if precision else [])])
    try:
        data = xla_cost.analyze_implementation("keras_transformer", args, log=lambda _: None)["encode"]
    finally:
        keras.config.set_dtype_policy("float32")
    import jax

    # XLA's CPU compiler computes bf16 matmuls in f32; a GPU keeps what JAX asked for.
    on_gpu = jax.devices()[0].platform != "cpu"
    return data["matmul_dtypes_requested"], data["matmul_dtypes_compiled"] if on_gpu else None


def test_mixed_bfloat16_reaches_the_matmuls_and_float32_does_not():
    requested, compiled = _encode_matmul_dtypes(None)
    assert not any("bf16" in key for key in requested)
    assert compiled is None or not any("bf16" in key for key in compiled)
    requested, compiled = _encode_matmul_dtypes("bfloat16")
    assert any(key.startswith("bf16 x bf16") for key in requested), requested
    dense_flops = sum(value["flops"] for value in requested.values())
    bf16_flops = sum(value["flops"] for key, value in requested.items() if key.startswith("bf16 x bf16"))
    assert bf16_flops >= 0.8 * dense_flops
    assert compiled is None or any(key.startswith("bf16 x bf16") for key in compiled), compiled


def test_every_implementation_of_a_run_gets_the_mixed_precision_policy(tmp_path):
    # keras.backend.clear_session() resets the global policy to float32: a
    # run that set it once would compile the second model in float32.
    xla_cost.main(["--config", "quick", "--seq-len", "8", "--batch-size", "2", "--programs", "encode",
                   "--mixed-precision", "bfloat16", "--implementations", "keras_transformer", "tutorial",
                   "--out", str(tmp_path)])
    with open(tmp_path / "results.json") as f:
        results = json.load(f)["results"]
    assert [r["implementation"] for r in results] == ["keras_transformer", "tutorial"]
    for result in results:
        requested = result["encode"]["matmul_dtypes_requested"]
        assert any(key.startswith("bf16 x bf16") for key in requested), (result["implementation"], requested)
    assert keras.config.dtype_policy().name == "float32"


def test_docstring_examples_run():
    import doctest

    result = doctest.testmod(xla_cost, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
