#!/usr/bin/env python3
"""Check that docs/design.md's crate map lists exactly the workspace's crates.

Run from anywhere inside the repository (python3, standard library only):

    scripts/crate-map.py            # exit 0: the map matches; 1: it does not; 2: cannot check

What it compares:

  * the crates: every workspace member that `cargo metadata --no-deps --format-version 1`
    reports (run in the repository's root), plus each crate directory in EXTRA_CRATE_DIRS
    that is not (yet) a member (crates/restorer is its own workspace today);
  * the map: the one fenced block in docs/design.md whose info string is `crate-map`.

The map's format, one crate per line:

    ```crate-map
    NAME  SIDE  IDEA...
    ```

  NAME  the package name exactly as in its Cargo.toml (`snapboot-device`, not the lib name);
  SIDE  one of SIDES below: host, device, both (std, linked by host and device), no_std
        (no_std + alloc, shared with the freestanding restorer);
  IDEA  the crate's one idea, free text (at least one word).

Fields are separated by whitespace; blank lines and lines starting with `#` are ignored.
A crate missing from the map, a crate in the map that is not in the workspace, a name listed
twice, a line with an unknown side or no idea: each is named, and the exit status is 1.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

DESIGN = Path("docs/design.md")
# Crate directories that are checked even when the workspace does not list them as members.
EXTRA_CRATE_DIRS = [Path("crates/restorer")]
SIDES = ("host", "device", "both", "no_std")
FENCE_OPEN = re.compile(r"^```crate-map\s*$")
FENCE_CLOSE = re.compile(r"^```\s*$")


def repo_root() -> Path:
    here = Path(__file__).resolve().parent
    out = subprocess.run(
        ["git", "-C", str(here), "rev-parse", "--show-toplevel"],
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip()) if out.returncode == 0 else here.parent


def workspace_crates(root: Path) -> set:
    try:
        out = subprocess.run(
            ["cargo", "metadata", "--no-deps", "--format-version", "1"],
            cwd=root,
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        sys.exit("crate-map: cargo not found on PATH: cannot list the workspace's crates")
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        sys.exit(2)
    meta = json.loads(out.stdout)
    members = set(meta["workspace_members"])
    return {p["name"] for p in meta["packages"] if p["id"] in members}


def package_name(manifest: Path):
    """The [package] name of a Cargo.toml, without needing tomllib (Python < 3.11)."""
    in_package = False
    for line in manifest.read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            in_package = line == "[package]"
        elif in_package:
            m = re.match(r'name\s*=\s*"([^"]+)"', line)
            if m:
                return m.group(1)
    return None


def read_map(root: Path, design: Path):
    """(entries, problems): entries is [(line number, name, side, idea)]; `design` is
    relative to `root`, as the messages name it."""
    lines = (root / design).read_text().splitlines()
    opens = [i for i, l in enumerate(lines) if FENCE_OPEN.match(l)]
    if len(opens) != 1:
        sys.exit(
            f"crate-map: {design} must have exactly one ```crate-map block, it has {len(opens)}"
        )
    entries, problems = [], []
    i = opens[0] + 1
    while i < len(lines) and not FENCE_CLOSE.match(lines[i]):
        text = lines[i].strip()
        lineno = i + 1
        i += 1
        if not text or text.startswith("#"):
            continue
        fields = text.split(None, 2)
        if len(fields) < 3:
            problems.append(f"{design}:{lineno}: want NAME SIDE IDEA, got {text!r}")
            continue
        name, side, idea = fields
        if side not in SIDES:
            problems.append(
                f"{design}:{lineno}: {name}: side {side!r} is none of {', '.join(SIDES)}"
            )
        entries.append((lineno, name, side, idea))
    if i == len(lines):
        problems.append(f"{design}: the ```crate-map block is not closed")
    return entries, problems


def main() -> int:
    root = repo_root()
    expected = workspace_crates(root)
    for d in EXTRA_CRATE_DIRS:
        manifest = root / d / "Cargo.toml"
        if manifest.is_file():
            name = package_name(manifest)
            if name is None:
                sys.exit(f"crate-map: {manifest} has no [package] name")
            expected.add(name)

    entries, problems = read_map(root, DESIGN)
    seen = {}
    for lineno, name, _, _ in entries:
        if name in seen:
            problems.append(f"{DESIGN}:{lineno}: {name} is listed twice (first on line {seen[name]})")
        seen.setdefault(name, lineno)
    listed = set(seen)
    missing = sorted(expected - listed)
    extra = sorted(listed - expected)
    if missing:
        problems.append(
            f"missing from {DESIGN}'s crate map (in the workspace): {', '.join(missing)}"
        )
    if extra:
        problems.append(
            f"in {DESIGN}'s crate map but not a crate of the workspace: {', '.join(extra)}"
        )
    if problems:
        for p in problems:
            print(f"crate-map: {p}", file=sys.stderr)
        return 1
    print(f"crate-map: {DESIGN} lists the {len(expected)} crates: {', '.join(sorted(expected))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
