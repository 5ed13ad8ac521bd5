"""Keras' own `MultiHeadAttention` test file passes against this package's layer.

The installed keras ships `keras/src/layers/attention/multi_head_attention_test.py`;
`tests/keras_suite/mha_plugin.py` runs it with our layer in place of
Keras' and skips the tests that meet a documented difference. Run in a
subprocess: the file changes Keras' global flash-attention setting.
"""

import os
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import keras
import pytest

from tests.keras_suite.mha_plugin import DIFFERENCES

pytestmark = pytest.mark.keras_suite

KERAS_TEST_FILE = pathlib.Path(keras.__file__).parent / "src" / "layers" / "attention" / "multi_head_attention_test.py"
REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
# Keras' file skips these itself on TensorFlow (no flash attention there).
KERAS_OWN_SKIPS = {"tensorflow": {"test_basics_with_flash_attention", "test_flash_attention_with_errors"}}


def _is_difference(name):
    return any(name == key or name.startswith(key + "_") for key in DIFFERENCES)


def test_keras_own_multi_head_attention_tests_pass_except_documented_differences(tmp_path):
    assert KERAS_TEST_FILE.exists(), f"the installed keras has no {KERAS_TEST_FILE}"
    report = tmp_path / "report.xml"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", str(KERAS_TEST_FILE), "-p", "tests.keras_suite.mha_plugin", "-q",
         "-p", "no:cacheprovider", "-o", "addopts=", "--junitxml", str(report)],
        cwd=REPOSITORY, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPOSITORY)},
    )
    assert report.exists(), result.stdout[-3000:] + result.stderr[-3000:]
    outcomes = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        failed = case.find("failure") is not None or case.find("error") is not None
        outcomes[case.get("name")] = "failed" if failed else "skipped" if case.find("skipped") is not None else "passed"
    failed = sorted(name for name, outcome in outcomes.items() if outcome == "failed")
    assert not failed, result.stdout[-5000:]
    skipped = {name for name, outcome in outcomes.items() if outcome == "skipped"}
    own_skips = KERAS_OWN_SKIPS.get(keras.backend.backend(), set())
    assert {name for name in skipped if not _is_difference(name)} == own_skips
    assert len(outcomes) == 50
    assert sum(outcome == "passed" for outcome in outcomes.values()) >= 35
