"""Freed memory stays in the process (litebert.runtime.allocator): a buffer freed and allocated again costs no page faults.

Each case runs in a fresh interpreter, since the setting is process-wide and one-way."""

import ctypes.util
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, resource, sys, torch
if sys.argv[1] == "retain":
    from litebert.runtime.allocator import retain_freed_memory
    assert retain_freed_memory()
faults = []
for _ in range(8):  # training steps in miniature: activations kept through the forward, freed by the backward
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    saved = [torch.ones(10 * 2**20) for _ in range(4)]  # 4 x 40 MiB, above glibc's largest mmap threshold
    del saved
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps(faults))
"""
STEP_PAGES = 4 * 40 * 2**20 // resource.getpagesize()

glibc = pytest.mark.skipif(not sys.platform.startswith("linux") or "libc.so" not in str(ctypes.util.find_library("c")),
                           reason="mallopt is glibc's")


def minor_faults_per_iteration(mode: str) -> list[int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)


@glibc
def test_freed_buffers_are_reused_without_page_faults():
    default = minor_faults_per_iteration("default")
    retained = minor_faults_per_iteration("retain")
    assert min(default[1:]) >= STEP_PAGES * 0.9, default  # glibc unmaps them: every page faults in again
    # kept in the heap: after a few steps of settling (the blocks find their places), reused as they are
    assert max(retained[4:]) < STEP_PAGES * 0.02, retained


@glibc
def test_litebert_commands_turn_it_on():
    code = ("import sys; from unittest import mock; from litebert import cli\n"
            "with mock.patch('litebert.runtime.allocator.retain_freed_memory', return_value=True) as on:\n"
            "    cli.main(['params', '--json'])\n"
            "print(on.call_count)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "1"
