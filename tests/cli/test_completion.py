"""``reconciler completion``: a script for each shell, that bash loads and completes with."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from reconciler.cli import COMMANDS, main

BASH = shutil.which("bash")


def _script(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["completion", shell]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return out


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_each_shell_gets_a_script_naming_every_command(
    shell: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = _script(shell, capsys)
    for command in [*COMMANDS, "undrain"]:
        assert command in text, f"{shell}: no {command}"
    assert "--state-dir" in text
    marker = {
        "bash": "complete -o bashdefault",
        "zsh": "#compdef reconciler",
        "fish": "complete -c",
    }
    assert marker[shell] in text
    tool = shutil.which(shell)
    if tool is not None:  # zsh and fish check syntax with -n, as bash does
        path = tmp_path / f"reconciler.{shell}"
        path.write_text(text)
        done = subprocess.run([tool, "-n", str(path)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr


def test_an_unknown_shell_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "tcsh"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def _complete(script: Path, line: str) -> list[str]:
    """What bash offers for ``line`` (the cursor at its end) through the sourced script."""
    assert BASH is not None
    words = line.split(" ")
    program = (
        f"source {script}\n"
        f"COMP_WORDS=({' '.join(repr(w) for w in words)})\n"
        f"COMP_CWORD={len(words) - 1}\n"
        f"COMP_LINE={line!r}\nCOMP_POINT=${{#COMP_LINE}}\n"
        "_shtab_reconciler\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        [BASH, "-c", program], capture_output=True, text=True, check=False, cwd=script.parent
    )
    assert done.returncode == 0, done.stderr
    return sorted(x for x in done.stdout.splitlines() if x)


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
def test_bash_sources_the_script_and_completes_commands_flags_and_choices(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert BASH is not None
    script = tmp_path / "reconciler.bash"
    script.write_text(_script("bash", capsys))
    syntax = subprocess.run([BASH, "-n", str(script)], capture_output=True, text=True, check=False)
    assert syntax.returncode == 0, syntax.stderr
    registered = subprocess.run(
        [BASH, "-c", f"source {script} && complete -p reconciler"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert registered.returncode == 0, registered.stderr
    assert registered.stdout.strip().endswith(" reconciler")
    assert _complete(script, "reconciler pl") == ["place", "plan"]
    assert _complete(script, "reconciler run --log-f") == ["--log-format"]
    assert _complete(script, "reconciler run --log-format ") == ["json", "text"]
    assert _complete(script, "reconciler completion ") == ["bash", "fish", "zsh"]
    (tmp_path / "clusters").mkdir()
    (tmp_path / "cluster.json").write_text("{}")
    assert _complete(script, "reconciler plan --state-dir cl") == ["clusters"]  # folders only
    assert _complete(script, "reconciler plan --snapshot cl") == ["cluster.json", "clusters"]
