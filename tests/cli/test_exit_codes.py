"""``apply``'s exit codes are what its --help and docs/apply.md say: interrupted is 130/143,
never 3; moves planned before the first complete observation exit 1; a failed, skipped or
unrecorded move exits 3."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from reconciler.cli.apply import APPLY_EPILOG
from reconciler.cli.applying import exit_code
from reconciler.engine.round import RoundReport
from reconciler.errors import GitError, TransientError
from reconciler.model.status import MoveOutcome, MoveResult, ReconcileStatus

DOCS = Path(__file__).resolve().parents[2] / "docs" / "apply.md"


def report(*outcomes: MoveOutcome, **fields: object) -> RoundReport:
    results = [
        MoveResult(vm=f"vm-{i}", source="kvm-01", target="kvm-02", outcome=o, reason="Balance")
        for i, o in enumerate(outcomes)
    ]
    return RoundReport(status=ReconcileStatus(cluster="lab"), results=results, **fields)  # type: ignore[arg-type]


def test_interrupted_is_130_or_143_whatever_the_moves_did() -> None:
    for outcomes in ((), (MoveOutcome.SUCCEEDED,), (MoveOutcome.ABORTED, MoveOutcome.FAILED)):
        assert exit_code(report(*outcomes, interrupted=True), signal.SIGINT) == 130
        assert exit_code(report(*outcomes, interrupted=True), signal.SIGTERM) == 143


def test_moves_planned_before_a_complete_observation_exit_1_after_it_they_go_ahead() -> None:
    never_complete = report(not_acting="the cluster has not been observed completely yet")
    assert exit_code(never_complete, None) == 1
    # later a host that does not answer only stays out of the plan: the other moves count
    assert exit_code(report(MoveOutcome.SUCCEEDED), None) == 0


def test_a_failed_skipped_conflicting_or_unrecorded_round_exits_3() -> None:
    assert exit_code(report(MoveOutcome.SUCCEEDED, MoveOutcome.FAILED), None) == 3
    assert exit_code(report(MoveOutcome.SKIPPED), None) == 3
    assert exit_code(report(MoveOutcome.SUCCEEDED, conflicts=["vm-0: kept"]), None) == 3
    unrecorded = report(MoveOutcome.SUCCEEDED, record_error=GitError("push refused"))
    assert exit_code(unrecorded, None) == 3
    assert exit_code(report(error=TransientError("kvm-01 did not answer")), None) == 1
    assert exit_code(report(), None) == 0


def _rows(text: str) -> dict[str, str]:
    """exit code -> meaning, from a Markdown table or an epilog's indented lines."""
    rows = dict(re.findall(r"^\| ([0-9 /]+) \| (.+) \|$", text, re.M))
    lines = re.findall(r"^  (\d+) +(.+(?:\n {5,}.+)*)", text, re.M)
    rows |= {code: " ".join(meaning.split()) for code, meaning in lines}
    return {code.strip(): meaning for code, meaning in rows.items()}


@pytest.mark.parametrize("where", ["docs/apply.md", "apply --help"])
def test_the_documented_table_says_interrupted_only_for_130_and_143(where: str) -> None:
    rows = _rows(DOCS.read_text(encoding="utf-8") if where == "docs/apply.md" else APPLY_EPILOG)
    assert {"0", "1", "3"} <= set(rows), rows
    assert "interrupted" not in rows["3"], f"{where}: exit 3 says {rows['3']!r}"
    interrupted = [code for code, meaning in rows.items() if "interrupted" in meaning]
    assert interrupted in (["130 / 143"], ["130"]), rows
    assert "observed completely" in rows["1"], f"{where}: exit 1 says {rows['1']!r}"
