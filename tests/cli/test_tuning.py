"""The ``fedad`` process's OpenMP wait policy and allocator thresholds (fedad.cli.tuning)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from fedad.cli import tuning

TUNED = ("OMP_WAIT_POLICY", "FEDAD_KEEP_OMP", "FEDAD_KEEP_MALLOC", *tuning._MALLOPT)


def _child_env(env: dict[str, str], *names: str) -> list[str]:
    """What a process that imports the command line sees in ``names``."""
    base = {k: v for k, v in os.environ.items() if k not in TUNED}
    code = "import os, sys, fedad.cli.app; print(*(os.environ.get(n, '') for n in sys.argv[1:]))"
    p = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True,
                       env={**base, **env}, timeout=120, check=True)  # fmt: skip
    return p.stdout.split("\n")[0].split(" ")


@pytest.mark.parametrize(
    ("env", "want"),
    [({}, "PASSIVE"), ({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE"), ({"FEDAD_KEEP_OMP": "1"}, "")],
)
def test_the_command_line_sets_a_passive_openmp_wait_policy_unless_told(
    env: dict[str, str], want: str
) -> None:
    """Set before torch loads (its OpenMP runtime reads it once); the user's value wins."""
    assert _child_env(env, "OMP_WAIT_POLICY") == [want]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator only")
@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({}, [str(tuning.MMAP_THRESHOLD), str(tuning.TRIM_THRESHOLD)]),
        ({"FEDAD_KEEP_MALLOC": "1"}, ["", ""]),
        ({"MALLOC_MMAP_THRESHOLD_": "65536"}, ["65536", ""]),
    ],
)
def test_the_command_line_raises_the_allocator_thresholds_for_its_children_unless_told(
    env: dict[str, str], want: list[str]
) -> None:
    """The processes a run starts (seed workers, SuperNodes) read them from the
    environment; a threshold the user set, or FEDAD_KEEP_MALLOC=1, leaves both alone."""
    assert _child_env(env, "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_") == want


def test_reusable_heap_sets_this_process_once_and_leaves_a_set_environment_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in TUNED:
        monkeypatch.delenv(name, raising=False)
    glibc = platform.libc_ver()[0] == "glibc"
    assert tuning.reusable_heap() is glibc
    assert (os.environ.get("MALLOC_MMAP_THRESHOLD_") == str(tuning.MMAP_THRESHOLD)) is glibc
    assert tuning.reusable_heap() is False  # the environment now says it: left alone
