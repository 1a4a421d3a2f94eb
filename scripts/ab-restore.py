#!/usr/bin/env python3
"""Interleaved A/B of two snapboot builds on the same board: did a change make snapshot boot
slower?

    scripts/ab-restore.py --a OLD/snapboot --b NEW/snapboot --workload shell --runs 5

Each build gets its own snapboot home under --work (the downloaded kernels and the built
restore kernel are shared by symlink from $SNAPBOOT_HOME), builds the workload's bundle with
its own device binary, and captures one image into a store of its own. Then the boots run in
rounds, each round one boot per (build, method) in a rotated order, so that the host's drift
hits every method alike:

    cold            board run W --probe (no store)
    stock           board run W --store S --probe, restored by the stock kernel
    restore-kernel  the same, restored by the restore kernel (when one is built)
    restorer        board run W --store S --restorer --probe, restored by the freestanding
                    restorer each build names (--restorer-a, --restorer-b: its ELF, passed
                    as $SNAPBOOT_RESTORER), when both are given

A build that predates the restore-kernel default gets `--restore-kernel` for the last method;
one that has the default gets `--stock-kernel` for the second (`--kernel-flags` says which
flags each build takes). Prints time to interactive (TTI) per method: median [min..max],
and B's median over A's. Exit status 1 if a boot failed.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run(cmd, env, what):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{what} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p


def home_for(work: Path, name: str, shared: Path) -> Path:
    home = work / name
    home.mkdir(parents=True, exist_ok=True)
    for entry in ("kernels", "kernel.json", "restore-kernels", "debian"):
        src, dst = shared / entry, home / entry
        if src.exists() and not dst.exists():
            dst.symlink_to(src)
    return home


def has_flag(binary: str, flag: str) -> bool:
    p = subprocess.run([binary, "board", "run", "--help"], capture_output=True, text=True)
    return flag in p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="the baseline snapboot binary")
    ap.add_argument("--b", required=True, help="the changed snapboot binary")
    ap.add_argument("--workload", default="shell")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--restorer-a", default=None, help="A's restorer ELF (adds the restorer method)")
    ap.add_argument("--restorer-b", default=None, help="B's restorer ELF")
    ap.add_argument("--work", default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--json", default=None, help="write every TTI here")
    args = ap.parse_args()

    shared = Path(os.environ.get("SNAPBOOT_HOME", Path.cwd() / ".snapboot")).resolve()
    work = Path(args.work or tempfile.mkdtemp(prefix="snapboot-ab-")).resolve()
    builds = {"A": args.a, "B": args.b}
    restorers = {"A": args.restorer_a, "B": args.restorer_b}
    with_restorer = all(restorers.values())
    plans = []  # (build, method, argv after `board run W`)
    envs = {}
    for name, binary in builds.items():
        env = dict(os.environ, SNAPBOOT_HOME=str(home_for(work, name, shared)))
        if with_restorer:
            env["SNAPBOOT_RESTORER"] = str(Path(restorers[name]).resolve())
        envs[name] = env
        run([binary, "board", "build", "--workload", args.workload], env, f"{name}: build")
        store = work / f"{name}-{args.workload}.store"
        if store.exists():
            store.unlink()
        run([binary, "board", "capture", args.workload, "--store", str(store)], env,
            f"{name}: capture")
        rk_default = has_flag(binary, "--stock-kernel")
        rk_built = any((shared / "restore-kernels").glob("*/vmlinux"))
        plans.append((name, "cold", []))
        plans.append((name, "stock", ["--store", str(store)] +
                      (["--stock-kernel"] if rk_default else [])))
        if rk_built:
            plans.append((name, "restore-kernel", ["--store", str(store)] +
                          ([] if rk_default else ["--restore-kernel"])))
        if with_restorer:
            plans.append((name, "restorer", ["--store", str(store), "--restorer"]))

    tti = {(b, m): [] for b, m, _ in plans}
    failed = 0
    for r in range(args.runs):
        order = plans[r % len(plans):] + plans[:r % len(plans)]
        for build, method, extra in order:
            tl = work / "timeline.json"
            p = subprocess.run([builds[build], "board", "run", args.workload, "--probe",
                                "--timeline", str(tl)] + extra,
                               env=envs[build], capture_output=True, text=True)
            t = json.loads(tl.read_text()).get("tti") if p.returncode == 0 else None
            if t is None:
                failed += 1
                print(f"round {r + 1}: {build} {method} failed: {p.stderr.strip()[-300:]}",
                      file=sys.stderr)
                continue
            tti[(build, method)].append(t)
        print(f"round {r + 1}/{args.runs} done", file=sys.stderr)

    print(f"{args.workload}, {args.runs} rounds, TTI median [min..max] (s)")
    print(f"{'method':<16} {'A':>24} {'B':>24} {'B/A':>6}")
    for method in dict.fromkeys(m for _, m, _ in plans):
        cells, med = [], {}
        for build in builds:
            v = tti.get((build, method), [])
            if v:
                med[build] = statistics.median(v)
                cells.append(f"{med[build]:.3f} [{min(v):.3f}..{max(v):.3f}]")
            else:
                cells.append("-")
        ratio = f"{med['B'] / med['A']:.2f}" if len(med) == 2 else "-"
        print(f"{method:<16} {cells[0]:>24} {cells[1]:>24} {ratio:>6}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {f"{b}/{m}": v for (b, m), v in tti.items()}, indent=2))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
