"""The machine as the prompts describe it, read from /proc/cpuinfo and sysfs (here: files
written in a temporary folder in the kernel's formats)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.machine import _caches, _isa_flags, describe_machine

CPUINFO = """processor\t: 0
model name\t: Test CPU 9000
flags\t\t: fpu sse sse4_2 avx avx2 fma f16c bmi2 avx512f avx512bw avx512vl avx512_bf16 amx_tile
"""
ARM = "processor\t: 0\nFeatures\t: fp asimd evtstrm sve sve2 bf16 i8mm\n"


def cache(root: Path, index: int, level: int, kind: str, size: str, shared: str) -> None:
    folder = root / f"index{index}"
    folder.mkdir(parents=True)
    for name, value in (("level", level), ("type", kind), ("size", size),
                        ("shared_cpu_list", shared)):  # fmt: skip
        (folder / name).write_text(f"{value}\n")


def test_the_vector_isa_flags_a_kernel_writer_picks_paths_by(tmp_path):
    (tmp_path / "x86").write_text(CPUINFO)
    (tmp_path / "arm").write_text(ARM)
    assert _isa_flags(tmp_path / "x86") == [
        "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
        "avx512_bf16", "amx_tile",
    ]  # fmt: skip
    assert _isa_flags(tmp_path / "arm") == ["asimd", "sve", "sve2", "bf16", "i8mm"]
    assert _isa_flags(tmp_path / "missing") == []


def test_the_data_caches_with_their_sizes_and_sharing(tmp_path):
    cache(tmp_path, 0, 1, "Data", "48K", "0,64")
    cache(tmp_path, 1, 1, "Instruction", "32K", "0,64")
    cache(tmp_path, 2, 2, "Unified", "2048K", "0,64")
    cache(tmp_path, 3, 3, "Unified", "105M", "0-55,64-119")
    caches = [(c.name, c.size_kib, c.shared_by) for c in _caches(tmp_path)]
    assert caches == [("L1d", 48, 2), ("L2", 2048, 2), ("L3", 105 * 1024, 112)]


def test_this_cpu_is_described():
    machine = describe_machine("cpu")
    assert machine.device == "cpu" and machine.name and machine.cpus and machine.cpus >= 1


@pytest.mark.gpu
def test_the_gpu_is_described_by_its_architecture_and_limits():
    machine = describe_machine("cuda")
    assert machine.capability and machine.sms and machine.sms > 0
    assert machine.shared_per_block_kib and machine.shared_per_block_optin_kib
    assert machine.shared_per_block_optin_kib >= machine.shared_per_block_kib
    assert machine.l2_mib and machine.memory_gib


def test_smt_siblings_are_counted_from_the_topology(tmp_path, monkeypatch):
    from harness import machine

    topology = tmp_path / "cpu0" / "topology"
    topology.mkdir(parents=True)
    monkeypatch.setattr(machine, "CACHE_DIR", tmp_path / "cpu0" / "cache")
    for listed, count in (("0-1", 2), ("0,4", 2), ("0", 1), ("0-3", 4)):
        (topology / "thread_siblings_list").write_text(listed + "\n")
        assert machine._threads_per_core() == count
