"""What this CPU can do, read once from /proc/cpuinfo: its model and the instruction sets that decide which
kernels are fast (AVX-512, AMX, VNNI, bf16)."""

from __future__ import annotations

import functools
import platform

import torch


@functools.cache
def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo ({} where there is none)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def cpu_flags() -> set[str]:
    return set(_cpuinfo().get("flags", "").split())


def cpu_model() -> str:
    """The CPU as people name it, with vendor/family/model (a VM may show only "AMD EPYC")."""
    info = _cpuinfo()
    name = info.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in info:
        name += f" ({info.get('vendor_id', '?')} family {info['cpu family']} model {info.get('model', '?')})"
    return name


def isa() -> list[str]:
    """The instruction-set extensions that decide which GEMM kernels exist: avx2, avx512f, avx512_bf16, amx."""
    flags = cpu_flags()
    found = [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "avx_ne_convert", "avx512_vnni",
                         "avx_vnni") if f in flags]
    return found + (["amx"] if {"amx_tile", "amx_bf16"} <= flags else [])


def int8_products_exact() -> bool:
    """Whether int8 GEMMs on this CPU sum uint8 x int8 products exactly. x86 without VNNI multiplies them with
    vpmaddubsw, which adds each pair of neighbouring products in int16 and saturates there; VNNI's vpdpbusd
    and AMX accumulate in int32, as ARM's dot-product instructions do. An x86 CPU whose flags cannot be read
    counts as inexact."""
    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686", "x86"):
        return True
    return bool({"avx512_vnni", "avx_vnni", "amx_int8"} & cpu_flags())


def bf16_supported(device: torch.device | str = "cpu") -> bool:
    """Whether this device has bf16 matmul kernels (not merely a slow reference fallback). On CPU: oneDNN's own
    probe, which needs AVX512BW/VL/DQ (AVX512-BF16, AMX) or AVX-NE-CONVERT."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and torch.backends.mkldnn.is_available() and \
        bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
