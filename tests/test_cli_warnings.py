"""The CLI's warning relay: recorded warnings are emitted once each, after recording stops.

Regression test for the study hang: re-emitting a recorded warning while the recorder was still
active appended to the list being iterated, so any warning (singular fit, ModelFitWarning, a
missing glyph) made ``scoremix study`` loop until killed for memory.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import pytest

from scoremix import cli
from scoremix.metrics import ScoreDirectionWarning


def test_other_warnings_pass_through_once_and_return(capsys: pytest.CaptureFixture[str]) -> None:
    with warnings.catch_warnings(record=True) as outer:
        warnings.simplefilter("always")
        with cli._direction_warnings("study", None, ""):
            for _ in range(3):
                warnings.warn("singular fit", UserWarning)
            warnings.warn("another", RuntimeWarning)
    texts = [str(w.message) for w in outer]
    assert texts == ["singular fit", "another"]


def test_direction_warning_printed_once(capsys: pytest.CaptureFixture[str]) -> None:
    with cli._direction_warnings("eer", "f.csv", " hint"):
        for _ in range(5):
            warnings.warn("scores look reversed", ScoreDirectionWarning)
    err = capsys.readouterr().err
    assert err.count("ScoreDirectionWarning: scores look reversed hint") == 1
    assert "f.csv" in err


def test_warnings_emitted_when_the_block_raises() -> None:
    with warnings.catch_warnings(record=True) as outer:
        warnings.simplefilter("always")
        with pytest.raises(ValueError):
            with cli._direction_warnings("study", None, ""):
                warnings.warn("before the failure", UserWarning)
                raise ValueError("boom")
    assert [str(w.message) for w in outer] == ["before the failure"]


def test_warning_relay_terminates_in_a_fresh_process() -> None:
    """In a subprocess with the default filters (as the CLI runs), a warning inside the relay
    must not hang; the old code looped forever here."""
    code = textwrap.dedent("""
        import warnings
        from scoremix import cli
        with cli._direction_warnings("study", None, ""):
            warnings.warn("a singular fit", UserWarning)
        print("done")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert out.stdout.strip() == "done"
    assert out.stderr.count("a singular fit") == 1
