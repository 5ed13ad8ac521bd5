"""`benchmarks.quantized_dot` in miniature: its quick run, and how it reads XLA's optimized HLO."""

import doctest
import json
import math
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("jax")

from benchmarks import quantized_dot  # noqa: E402 (after the skip)

pytestmark = pytest.mark.backend_independent

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.end_to_end  # a benchmark's subprocess of ~20 s: CI's marked run, not the contributor's loop
def test_quick_run_times_every_form_and_shape_and_keeps_the_error_small(tmp_path):
    subprocess.run([sys.executable, "-m", "benchmarks.quantized_dot", "--quick", "--out", str(tmp_path)], cwd=ROOT,
                   check=True, capture_output=True, timeout=600)
    report = json.loads((tmp_path / "results.json").read_text())
    shapes = quantized_dot.SHAPE_SETS["512"]
    expected = {(compiler, form, rows, k, n) for compiler in quantized_dot.COMPILERS for form in quantized_dot.FORMS
                for rows in (1, 4) for k, n in shapes}
    rows = {(r["compiler"], r["form"], r["rows"], r["k"], r["n"]): r for r in report["results"]}
    assert set(rows) == expected and len(report["results"]) == len(expected)
    for key, row in rows.items():
        assert len(row["us_repeats"]) == report["meta"]["settings"]["repeats"] == 3
        assert all(math.isfinite(t) and t > 0 for t in row["us_repeats"]), key
        assert math.isfinite(row["ratio_to_f32"]) and row["ratio_to_f32"] > 0, key
        limit = 1e-5 if row["form"] == "f32" else 2e-2  # int8: ~1e-2; bf16: ~3e-3
        assert row["max_error"] < limit, (key, row["max_error"])
        assert row["weight_bytes"] == {"f32": 4, "bf16": 2}.get(row["form"], 1) * row["k"] * row["n"] + (
            4 * row["n"] if row["form"].startswith("w8") else 0)
        assert row["hlo"]["dots"], key  # every program keeps a dot, wherever it runs
    # The int8 x int8 form multiplies int8 (or widened int32) operands, never float ones.
    for row in rows.values():
        if row["form"] == "w8a8":
            assert all(not dot.startswith("f32") for dot in row["hlo"]["dots"])
    table = (tmp_path / "results.md").read_text()
    assert "QUICK smoke run, not a measurement" in table and "| 4 | 512 x 2048 |" in table
    assert (tmp_path / "xla_dump" / "default" / "f32" / "rows4").is_dir()


def test_hlo_reading_names_the_library_the_operand_types_and_the_converts():
    text = """HloModule m
%fused_computation (param_0: s8[4,512], param_1: s8[512,512]) -> s32[4,512] {
  %param_0 = s8[4,512]{1,0} parameter(0)
  %param_1 = s8[512,512]{1,0} parameter(1)
  ROOT %dot_general.0 = s32[4,512]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
%wrapped_convert_computation (param_0.2: f32[4,512]) -> s8[4,512] {
  %param_0.2 = f32[4,512]{1,0} parameter(0)
  ROOT %convert.0 = s8[4,512]{1,0} convert(%param_0.2)
}
ENTRY %main.1 (x.1: f32[4,512], w.1: s8[512,512]) -> s32[4,512] {
  %x.1 = f32[4,512]{1,0} parameter(0)
  %w.1 = s8[512,512]{1,0} parameter(1)
  %wrapped_convert = s8[4,512]{1,0} fusion(%x.1), kind=kLoop, calls=%wrapped_convert_computation
  ROOT %ynn_fusion = s32[4,512]{1,0} fusion(%wrapped_convert, %w.1), kind=kCustom, calls=%fused_computation, \
backend_config={"fusion_config":{"kind":"__ynn_fusion"}}
}"""
    found = quantized_dot.describe_hlo(text, roles={512 * 512: "W"})
    assert found["dots"] == ["s8 x s8 W -> s32 in YNNPACK"]
    assert found["converts"] == ["f32 -> s8 in a loop fusion"]
    assert doctest.testmod(quantized_dot).failed == 0


def test_bad_choices_are_refused():
    with pytest.raises(SystemExit):
        quantized_dot.parse_args(["--forms", "f32,int4"])
    args = quantized_dot.parse_args(["--quick"])
    assert (args.rows, args.sets, args.repeats) == ([1, 4], ["512"], 3)
