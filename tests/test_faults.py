"""Injected failures for tests and drills (scalesweep/train/common/faults.py): the modes both
trainers read."""

import pytest

from scalesweep.train.common import faults

def test_fail_inject_mode_rejects_unknown_values():
    assert faults.fail_inject_mode({}) is None
    assert faults.fail_inject_mode({faults.FAIL_INJECT_ENV: "OOM"}) == "oom"
    assert faults.fail_inject_mode({faults.FAIL_INJECT_ENV: "oom-above:64"}) == "oom-above:64"
    for bad in ("segfault", "oom-above:", "oom-above:x", "oom-above:-1"):
        with pytest.raises(ValueError, match=f"SCALESWEEP_FAIL_INJECT='{bad}'"):
            faults.fail_inject_mode({faults.FAIL_INJECT_ENV: bad})

def test_injected_failure_per_attempt_and_batch():
    assert faults.injected_failure(None, 64) is None
    assert [faults.injected_failure("oom", 1, attempt) for attempt in (1, 5)] == ["oom", "oom"]
    assert faults.injected_failure("crash", 8) == "crash"
    assert [faults.injected_failure("oom-once", 64, attempt) for attempt in (1, 2)] == ["oom", None]
    assert [faults.injected_failure("oom-above:64", batch) for batch in (64, 65)] == [None, "oom"]
