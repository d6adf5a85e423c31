"""Peak memory and time of loading a model folder, cold (no prepared copy yet) and warm (the prepared copy
written by the cold load), each in a fresh process.

    python benchmarks/load_memory.py --family v3 --precision fast       # the full-size random folder
    python benchmarks/load_memory.py --model-dir pretrained_models/Fun-CosyVoice3-0.5B --runs 2
    python benchmarks/load_memory.py --family v3 --precision stock --no-prepared

Printed per load: seconds, peak RSS (the process's high-water mark, which counts the pages of a mapped file
it touched), the RSS of the same process before loading (Python + torch), the model tensors it holds after
loading (bench_engine.weight_bytes_in_memory), and peak RSS ÷ those tensors: the issue's measure. The folder's
prepared copies (cosyvoice/prepared.py) are deleted before the first cold run and kept for the warm runs.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def load_once(model_dir: Path, precision: str, prepared: bool) -> dict:
    """Run in the child: load, then report."""
    import cosyvoice_ui  # noqa: F401  (sets the OpenMP spin count before torch, as the app does)
    import torch

    from cosyvoice_ui.cosyvoice.loader import load_parts

    torch.set_num_threads(2)
    before = _rss_mb()
    started = time.perf_counter()
    parts = load_parts(model_dir, device="cpu", precision=precision, prepared_cache=prepared)
    load_s = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    from bench_engine import weight_bytes_in_memory

    tensors = weight_bytes_in_memory(parts) / 2**20
    return {"load_s": load_s, "peak_rss_mb": peak, "rss_before_mb": before, "tensors_mb": tensors,
            "ratio": peak / tensors, "ratio_over_start": (peak - before) / tensors,
            "precision": parts.precision.mode, "prepared": parts.precision.prepared}


def run_child(model_dir: Path, precision: str, prepared: bool) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", "--model-dir", str(model_dir), "--precision",
                          precision] + ([] if prepared else ["--no-prepared"]),
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"load failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path)
    parser.add_argument("--family", default="v3", choices=("v1", "v2", "v3"))
    parser.add_argument("--cache-dir", type=Path, help="where the full-size random folders are (bench_engine's)")
    parser.add_argument("--precision", default="fast")
    parser.add_argument("--runs", type=int, default=1, help="warm loads after the cold one")
    parser.add_argument("--no-prepared", action="store_true", help="load without the prepared copies (old path)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(load_once(args.model_dir, args.precision, not args.no_prepared)))
        return
    model_dir = args.model_dir
    if model_dir is None:
        from bench_engine import DEFAULT_CACHE, full_size_folder

        model_dir = full_size_folder(args.cache_dir or DEFAULT_CACHE, args.family)
    from cosyvoice_ui.cosyvoice.prepared import cache_dir_for

    prepared = not args.no_prepared
    if prepared:
        shutil.rmtree(cache_dir_for(model_dir), ignore_errors=True)
    cases = [("cold" if prepared else "no prepared copy", run_child(model_dir, args.precision, prepared))]
    cases += [("warm" if prepared else "again", run_child(model_dir, args.precision, prepared))
              for _ in range(args.runs)]
    print(f"{model_dir.name}, {args.precision}:")
    print(f"  {'load':<18}{'seconds':>8}{'peak RSS':>10}{'at start':>10}{'tensors':>9}{'peak÷tensors':>14}"
          f"{'(peak−start)÷tensors':>22}")
    for name, r in cases:
        print(f"  {name:<18}{r['load_s']:>8.1f}{r['peak_rss_mb']:>8.0f}MB{r['rss_before_mb']:>8.0f}MB"
              f"{r['tensors_mb']:>7.0f}MB{r['ratio']:>14.2f}{r['ratio_over_start']:>22.2f}")


if __name__ == "__main__":
    main()
