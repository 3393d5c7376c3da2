"""Commands whose exit code 2 is an answer ("changes", "no host fits", "moves planned", "a
proposal is open", "a difference") exit 1 on a usage error, so a typo in a script never reads
as an answer; the others keep argparse's 2."""

from __future__ import annotations

import pytest

from reconciler.cli import main

ANSWER_WITH_2 = ("plan", "place", "drain", "propose", "impact")


@pytest.mark.parametrize("command", ANSWER_WITH_2)
def test_an_unknown_flag_exits_1_where_2_is_an_answer(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([command, "--no-such-flag"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert f"reconciler {command}: error:" in err


def test_drain_without_its_host_or_with_a_bad_duration_exits_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["drain"]) == 1
    assert "HOST" in capsys.readouterr().err
    assert main(["drain", "kvm-01", "--apply", "--lock-timeout", "soon"]) == 1
    assert "not a duration" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["apply", "undrain", "run", "validate", "observe"])
def test_other_commands_keep_exit_2_for_usage_errors(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--no-such-flag"]) == 2
    capsys.readouterr()
