#!/usr/bin/env python3
"""The fast tests (`make unit`): every test target of the workspace except the few that
need the board or a browser, in the `ci` profile that `make test` builds too.

What runs: the unit and property tests of every library and binary (`#[cfg(test)]` modules,
`tests.rs`, proptest), the doc tests, and every integration test under a crate's tests/
unless it is listed in SLOW below. The list of test targets comes from `cargo metadata`, so
a new integration test runs here by default; one that needs QEMU or a browser is added to
SLOW with its reason. A name in SLOW that no longer exists stops the script, so the list
cannot silently go stale, and what is left out is printed at the start of every run.

What does not: the targets in SLOW, which `make test` runs with everything else.

Usage: scripts/unit-tests.py [TESTNAME_FILTER...]   (passed to the test binaries after --)
"""

import json
import subprocess
import sys

# (package, test target) -> why `make unit` leaves it to `make test`.
SLOW = {
    ("snapboot", "e2e"): "boots the board in QEMU (the end-to-end tests)",
    ("analyze", "html_chromium"): "renders the HTML report in headless Chromium",
}


def main(argv):
    if any(a in ("-h", "--help") for a in argv[1:]):
        print(__doc__.strip())
        return 0
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--no-deps", "--format-version", "1"],
            check=True,
            stdout=subprocess.PIPE,
        ).stdout
    )
    members = set(meta["workspace_members"])
    tests, slow_names = set(), set()
    seen_slow = set()
    for package in meta["packages"]:
        if package["id"] not in members:
            continue
        for target in package["targets"]:
            if "test" not in target["kind"]:
                continue
            key = (package["name"], target["name"])
            if key in SLOW:
                seen_slow.add(key)
                slow_names.add(target["name"])
            else:
                tests.add(target["name"])
    stale = set(SLOW) - seen_slow
    if stale:
        sys.exit(f"unit-tests.py: SLOW names test targets that do not exist: {sorted(stale)}")
    clash = tests & slow_names
    if clash:
        # `cargo test --workspace --test NAME` runs NAME in every package that has one.
        sys.exit(f"unit-tests.py: test targets {sorted(clash)} have a SLOW one's name: rename them")
    for (package, name), why in sorted(SLOW.items()):
        print(f"unit: leaving {package}'s `{name}` to `make test`: {why}", flush=True)
    cargo = ["cargo", "test", "--profile", "ci", "--workspace"]
    after = ["--"] + argv[1:] if len(argv) > 1 else []
    runs = [
        cargo + ["--lib", "--bins"] + [a for t in sorted(tests) for a in ("--test", t)] + after,
        cargo + ["--doc"] + after,
    ]
    for command in runs:
        print("unit: " + " ".join(command), flush=True)
        code = subprocess.run(command).returncode
        if code != 0:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
