"""Machine microbenchmarks for the floor estimate: memory read bandwidth and GEMM rates.

`python benchmarks/machine.py --threads 2 --json` prints one JSON object. `bench_engine.py` runs it in
a child process so that its 1 GiB test buffers do not count towards the engine's peak RSS.

Measures (torch, best of `repeats`, the same as performance-facts.md §7):
    read_gb_s   `sum` over a float32 buffer (bytes read / s)
    copy_gb_s   `copy_` between two buffers (bytes read + written / s)
    gemv_gb_s   batch-1 `F.linear` over [4096, 1024] float32 weights (what naive decoding gets)
    fp32_gflop_s / bf16_gflop_s   square `torch.mm` (bf16 only where the CPU has native bf16 dot products)
    int8_gflop_s   the same product as an int8 dynamic-quantised linear (fbgemm: int8 weights, activations
                   quantised per call), what fast mode's int8 flow estimator runs
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F


def best_time(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: first-touch page faults and kernel selection are not what we measure
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(buffer_mb: int = 1024, gemm_n: int = 2048, repeats: int = 5) -> dict[str, float]:
    """The machine rates on the current thread setting; `buffer_mb` and `gemm_n` size the tests."""
    n = buffer_mb * 1024 * 1024 // 4
    a = torch.ones(n)
    read_s = best_time(lambda: a.sum(), repeats)
    b = torch.empty_like(a)
    copy_s = best_time(lambda: b.copy_(a), repeats)
    del b
    rows = 4096
    weights = a[: (n // (rows * 1024)) * rows * 1024].view(-1, rows, 1024)
    x = torch.randn(1, 1024)
    gemv_s = best_time(lambda: [F.linear(x, w) for w in weights], repeats)
    del a, weights
    m = torch.randn(gemm_n, gemm_n)
    flops = 2.0 * gemm_n**3
    result = {
        "threads": torch.get_num_threads(),
        "read_gb_s": n * 4 / read_s / 1e9,
        "copy_gb_s": 2 * n * 4 / copy_s / 1e9,
        "gemv_gb_s": n * 4 / gemv_s / 1e9,
        "fp32_gflop_s": flops / best_time(lambda: torch.mm(m, m), repeats) / 1e9,
        "bf16_gflop_s": 0.0,
    }
    try:
        native_bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        native_bf16 = False
    if native_bf16:
        mb = m.bfloat16()
        result["bf16_gflop_s"] = flops / best_time(lambda: torch.mm(mb, mb), repeats) / 1e9
    result["int8_gflop_s"] = flops / best_time(_int8_linear(m), repeats) / 1e9
    return result


def _int8_linear(m: torch.Tensor) -> Callable[[], object]:
    """x·mᵀ through an int8 dynamic-quantised linear (the kernel `quantize_linears_int8` installs)."""
    import warnings

    from torch.ao.quantization import quantize_dynamic

    linear = torch.nn.Linear(m.size(1), m.size(0), bias=False)
    with torch.no_grad():
        linear.weight.copy_(m)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation notice
        q = quantize_dynamic(torch.nn.Sequential(linear), {torch.nn.Linear}, dtype=torch.qint8, inplace=False)

    def run() -> object:
        with torch.inference_mode():
            return q(m)

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Memory bandwidth and GEMM rate of this machine (torch).")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--buffer-mb", type=int, default=1024)
    parser.add_argument("--gemm-n", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    result = measure(args.buffer_mb, args.gemm_n, args.repeats)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:14} {value:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
