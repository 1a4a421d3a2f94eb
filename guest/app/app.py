#!/usr/bin/python3
"""// app.py - the `app` workload of snapboot: a real program with a heavy start-up.

// What it is for
// ---------------
// snapboot boots a Linux guest, starts an application, and snapshots the guest once the
// application says it is ready; later boots restore that snapshot instead of repeating the
// start-up.  The `shell` workload proves the mechanism works; this one makes the saving
// worth having.  Running under Debian's python3 (stdlib only) inside a small TCG-emulated
// guest it:
//
//   1. imports a broad slice of the standard library (a few hundred modules' worth of
//      .pyc loading and module initialisation),
//   2. generates a deterministic data set (seeded PRNG) as CSV text, parses it with the
//      csv module, converts fields (Decimal, datetime), indexes it in Python dicts and in
//      an in-memory sqlite3 database with secondary indexes,
//   3. derives further state (JSON cache, per-city XML summary, gzip/zip archives, an
//      e-mail style report, a block of pseudo-random "cache pages"), so the process ends
//      up with roughly 150-220 MiB resident at scale 1.0.
//
// Natively that takes ~2 s; under TCG it takes tens of seconds, which is exactly the cost
// a snapshot boot avoids.  Then it announces readiness, runs $APP_READY_CMD (normally
// `snapboot ready`, which is where the snapshot is taken and where a restored guest
// resumes) and serves one-line queries on stdin.  See README.md for the protocol.
//
// Determinism: everything except the answers to `time`, `random`, `stats` and `pong`'s
// counter is a pure function of (SEED, scale), so `checksum` must print the same value
// before a snapshot, after a restore, and in a fresh run with the same scale.
"""

import os
import signal
import sys
import time

T0 = time.monotonic()  # start of the process, for phase timings and `uptime`

# The console may have no locale configured (no LANG in the guest): force UTF-8 and never
# die on odd bytes typed on a serial line.
try:
    sys.stdout.reconfigure(encoding="utf-8", errors="replace", line_buffering=True)
    sys.stdin.reconfigure(encoding="utf-8", errors="replace")
except (AttributeError, ValueError):
    pass


def say(line):
    """Prints one console line and flushes it (stdout is a serial console)."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        pass


say("app: starting")

# A secret the application holds in memory, as a real one holds keys and tokens: built at
# run time (its text is nowhere in this file), so finding it in a store's bytes means the
# image exposes the process's memory (the encrypted-image tests look for it).
APP_SECRET = "".join(reversed("terces-ppa-toobpans-ffeeddccbbaa9876543210")).encode()

# --------------------------------------------------------------------------------------
# Phase 1: imports.  A real application pulls in much of the stdlib; each module costs
# .pyc unmarshalling and initialisation, which is slow under emulation.  Most are used
# below; a few (http.client, email parsing, ...) stand for a typical service's deps.
# --------------------------------------------------------------------------------------
import argparse
import base64
import bisect
import collections
import csv
import dataclasses
import datetime
import decimal
import email
import email.message
import email.policy
import email.utils
import email.parser
import functools
import gzip
import hashlib
import heapq
import html
import http.client
import http.server
import io
import itertools
import json
import logging
import operator
import random
import re
import shlex
import socket
import sqlite3
import statistics
import string
import struct
import subprocess
import textwrap
import threading
import typing
import unicodedata
import urllib.parse
import urllib.request
import uuid
import xml.dom.minidom
import xml.etree.ElementTree as ET
import zipfile
import zlib

SEED = 0x5A4B_0B00  # fixed: the data set must be identical in every run
BASE_RECORDS = 60_000  # records at scale 1.0
BASE_PAGES_MIB = 56  # MiB of pseudo-random "cache pages" at scale 1.0
EPOCH = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)

CITIES = [
    "Amsterdam", "Athens", "Barcelona", "Berlin", "Bratislava", "Brussels", "Bucharest",
    "Budapest", "Copenhagen", "Dublin", "Edinburgh", "Florence", "Geneva", "Hamburg",
    "Helsinki", "Krakow", "Lisbon", "Ljubljana", "London", "Lyon", "Madrid", "Marseille",
    "Milan", "Munich", "Naples", "Oslo", "Paris", "Porto", "Prague", "Riga", "Rome",
    "Rotterdam", "Seville", "Sofia", "Stockholm", "Tallinn", "Turin", "Valencia",
    "Vienna", "Vilnius", "Warsaw", "Zagreb", "Zurich", "New York", "San Francisco",
    "Los Angeles", "Buenos Aires", "Sao Paulo", "Mexico City", "Cape Town",
]
FIRST = [
    "Ada", "Alan", "Alice", "Anna", "Bob", "Carla", "Chen", "Dana", "Emil", "Eva", "Farid",
    "Grace", "Hana", "Ivan", "Jana", "Jose", "Karl", "Lena", "Linus", "Maria", "Mei",
    "Nils", "Olga", "Omar", "Paula", "Pedro", "Rosa", "Sara", "Tomas", "Uma", "Vera",
    "Wei", "Yuki", "Zoe",
]
LAST = [
    "Abara", "Berg", "Costa", "Dvorak", "Eriksen", "Fischer", "Garcia", "Horvat", "Ivanova",
    "Jansen", "Kowalski", "Larsen", "Moreau", "Novak", "Olsen", "Petrov", "Quinn", "Rossi",
    "Silva", "Tanaka", "Ueda", "Varga", "Weber", "Xu", "Young", "Zeller",
]
TAGS = [
    "alpha", "beta", "gamma", "delta", "retail", "online", "refund", "gift", "bulk",
    "priority", "express", "returning", "new", "vip", "promo", "coupon", "weekend",
    "night", "mobile", "web", "store", "partner", "export", "import", "fragile", "green",
    "flagged", "audited", "manual", "auto",
]
FIELDS = ["id", "name", "city", "timestamp", "amount", "tags"]


def parse_args():
    """Scale comes from --scale, else $APP_SCALE, else 1.0 (records and pages scale with it)."""
    ap = argparse.ArgumentParser(description="snapboot `app` workload")
    ap.add_argument("--scale", type=float, default=None, help="data size factor (default 1.0)")
    args = ap.parse_args()
    scale = args.scale
    if scale is None:
        try:
            scale = float(os.environ.get("APP_SCALE", "1.0"))
        except ValueError:
            scale = 1.0
    return max(scale, 0.001)


def rss_mib():
    """The process's resident set size in MiB, from /proc/self/status (VmRSS)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return -1


def phase(name):
    """Console breadcrumb with the time since start, handy to see where TCG spends time."""
    say(f"app: {name} t={time.monotonic() - T0:.2f}s rss={rss_mib()}")


# --------------------------------------------------------------------------------------
# Phase 2: the data set.
# --------------------------------------------------------------------------------------
def generate_csv(rng, n):
    """Generates `n` records as CSV text (what a real app would read from disk or network)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(FIELDS)
    choice, randrange, sample = rng.choice, rng.randrange, rng.sample
    for i in range(1, n + 1):
        name = f"{choice(FIRST)} {choice(LAST)}"
        # Some names carry commas/quotes so the csv module has real quoting to do.
        if i % 97 == 0:
            name = f'{name}, "jr"'
        ts = EPOCH + datetime.timedelta(seconds=randrange(0, 366 * 86400))
        cents = randrange(1, 5_000_000)
        tags = ";".join(sample(TAGS, 1 + randrange(4)))
        w.writerow([i, name, choice(CITIES), ts.isoformat(), f"{cents // 100}.{cents % 100:02d}", tags])
    return buf.getvalue()


@dataclasses.dataclass
class State:
    """Everything the application holds in memory once it is ready."""
    scale: float
    csv_text: str = ""
    records: dict = dataclasses.field(default_factory=dict)  # id -> record dict
    by_city: dict = dataclasses.field(default_factory=dict)  # city -> [ids]
    by_tag: dict = dataclasses.field(default_factory=dict)  # tag -> [ids] (inverted index)
    by_month: dict = dataclasses.field(default_factory=dict)  # "YYYY-MM" -> [ids]
    json_cache: dict = dataclasses.field(default_factory=dict)  # id -> compact JSON text
    city_stats: dict = dataclasses.field(default_factory=dict)  # city -> summary dict
    summary_xml: bytes = b""
    report_email: bytes = b""
    archive_gz: bytes = b""
    archive_zip: bytes = b""
    pages: list = dataclasses.field(default_factory=list)  # pseudo-random "cache pages"
    db: typing.Any = None


def parse_and_index(st):
    """Parses the CSV text and builds the Python-side indexes."""
    ts_parse = datetime.datetime.fromisoformat
    dec = decimal.Decimal
    intern = sys.intern
    for row in csv.DictReader(io.StringIO(st.csv_text)):
        rid = int(row["id"])
        city = intern(row["city"])
        tags = tuple(intern(t) for t in row["tags"].split(";"))
        ts = ts_parse(row["timestamp"])
        rec = {
            "id": rid,
            "name": row["name"],
            "city": city,
            "timestamp": ts,
            "amount": dec(row["amount"]),
            "tags": tags,
        }
        st.records[rid] = rec
        st.by_city.setdefault(city, []).append(rid)
        for t in tags:
            st.by_tag.setdefault(t, []).append(rid)
        st.by_month.setdefault(ts.strftime("%Y-%m"), []).append(rid)


def record_json(rec):
    """Compact, key-sorted JSON of one record (the `lookup` answer)."""
    return json.dumps(
        {
            "amount": str(rec["amount"]),
            "city": rec["city"],
            "id": rec["id"],
            "name": rec["name"],
            "tags": list(rec["tags"]),
            "timestamp": rec["timestamp"].isoformat(),
        },
        separators=(",", ":"),
        ensure_ascii=True,
    )


def build_db(st):
    """Loads the records into an in-memory sqlite3 database with secondary indexes."""
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.execute("PRAGMA cache_size = -65536")  # up to 64 MiB of page cache
    db.execute(
        "CREATE TABLE records (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL,"
        " ts INTEGER NOT NULL, cents INTEGER NOT NULL, tags TEXT NOT NULL)"
    )
    db.execute("CREATE TABLE record_tags (id INTEGER NOT NULL, tag TEXT NOT NULL)")
    rows = (
        (r["id"], r["name"], r["city"], int(r["timestamp"].timestamp()),
         int(r["amount"] * 100), ";".join(r["tags"]))
        for r in st.records.values()
    )
    with db:
        db.executemany("INSERT INTO records VALUES (?,?,?,?,?,?)", rows)
        db.executemany(
            "INSERT INTO record_tags VALUES (?,?)",
            ((r["id"], t) for r in st.records.values() for t in r["tags"]),
        )
        db.execute("CREATE INDEX records_city ON records(city, cents)")
        db.execute("CREATE INDEX records_ts ON records(ts)")
        db.execute("CREATE INDEX record_tags_tag ON record_tags(tag, id)")
    db.execute("ANALYZE")
    st.db = db


def derive(st, rng):
    """Further state a real service would keep warm: caches, reports, archives."""
    # JSON cache: pre-rendered answers for `lookup`.
    for rid, rec in st.records.items():
        st.json_cache[rid] = record_json(rec)

    # Per-city statistics computed through sqlite (exercises the indexes) and statistics.
    for (city,) in st.db.execute("SELECT DISTINCT city FROM records ORDER BY city"):
        cents = [c for (c,) in st.db.execute("SELECT cents FROM records WHERE city = ? ORDER BY cents", (city,))]
        st.city_stats[city] = {
            "count": len(cents),
            "sum": sum(cents),
            "median": statistics.median_low(cents),
            "p90": cents[(len(cents) * 9) // 10] if cents else 0,
        }

    # XML summary document.
    root = ET.Element("summary", records=str(len(st.records)))
    for city in sorted(st.city_stats):
        s = st.city_stats[city]
        ET.SubElement(root, "city", name=city, **{k: str(v) for k, v in s.items()})
    st.summary_xml = ET.tostring(root, encoding="utf-8")
    xml.dom.minidom.parseString(st.summary_xml)  # round-trip check, as a validator would

    # E-mail style report (fixed headers, no dates/ids from the clock: deterministic).
    msg = email.message.EmailMessage(policy=email.policy.SMTP)
    msg["From"] = "app@snapboot.invalid"
    msg["To"] = "ops@snapboot.invalid"
    msg["Subject"] = f"daily report: {len(st.records)} records"
    top = heapq.nlargest(20, st.city_stats.items(), key=lambda kv: (kv[1]["sum"], kv[0]))
    msg.set_content("\n".join(f"{c:<16} {s['count']:>7} {s['sum'] / 100:>14.2f}" for c, s in top))
    msg.add_attachment(st.summary_xml, maintype="application", subtype="xml", filename="summary.xml")
    msg.set_boundary("snapboot-report-boundary")  # the default boundary is random
    st.report_email = msg.as_bytes()
    email.parser.BytesParser(policy=email.policy.default).parsebytes(st.report_email)

    # Archives of the source data (fixed mtimes, so the bytes are deterministic).
    raw = st.csv_text.encode()
    st.archive_gz = gzip.compress(raw, compresslevel=1, mtime=0)
    zbuf = io.BytesIO()
    with zipfile.ZipFile(zbuf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for name, data in (("records.csv", raw), ("summary.xml", st.summary_xml)):
            z.writestr(zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0)), data)
    st.archive_zip = zbuf.getvalue()

    # "Cache pages": incompressible, deterministic memory (like a warmed cache of blobs);
    # this is what brings RSS up to the target without burning much CPU.
    page = 1 << 20
    for _ in range(max(1, round(BASE_PAGES_MIB * st.scale))):
        st.pages.append(rng.randbytes(page))


def build_state(scale):
    st = State(scale=scale)
    rng = random.Random(SEED)
    n = max(1, round(BASE_RECORDS * scale))
    st.csv_text = generate_csv(rng, n)
    phase(f"generated records={n}")
    parse_and_index(st)
    phase("parsed")
    build_db(st)
    phase("sqlite loaded")
    derive(st, rng)
    phase("derived")
    return st


# --------------------------------------------------------------------------------------
# The checksum: a sha256 over the whole state, canonicalised so it depends on content only
# (not on dict/set iteration order, hash seeds, or sqlite's page layout).
# --------------------------------------------------------------------------------------
def checksum(st):
    # Each section is rendered to one string and hashed in a single update() call: per-item
    # update() calls would triple the cost, and this runs on a slow emulated CPU.
    h = hashlib.sha256()
    upd = h.update
    upd(b"csv\0")
    upd(st.csv_text.encode())
    upd(b"records\0")
    recs = st.records
    upd("".join(
        f"{rid}\x1f{r['name']}\x1f{r['city']}\x1f{r['timestamp'].isoformat()}\x1f"
        f"{r['amount']}\x1f{';'.join(r['tags'])}\n"
        for rid, r in sorted(recs.items())
    ).encode())
    for label, index in (("by_city", st.by_city), ("by_tag", st.by_tag), ("by_month", st.by_month)):
        upd(f"{label}\0".encode())
        upd("".join(f"{key}:{','.join(map(str, sorted(index[key])))}\n" for key in sorted(index)).encode())
    upd(b"json\0")
    upd("\n".join(v for _, v in sorted(st.json_cache.items())).encode())
    upd(b"city_stats\0")
    upd(json.dumps(st.city_stats, sort_keys=True).encode())
    # sqlite: dump the tables in a defined order (page layout and rowid order don't matter).
    upd(b"sqlite\0")
    rows = st.db.execute("SELECT id, name, city, ts, cents, tags FROM records ORDER BY id")
    upd("".join("%d\x1f%s\x1f%s\x1f%d\x1f%d\x1f%s\n" % row for row in rows).encode())
    rows = st.db.execute("SELECT tag, id FROM record_tags ORDER BY tag, id")
    upd("".join("%s\x1f%d\n" % row for row in rows).encode())
    for blob in (st.summary_xml, st.report_email, st.archive_gz, st.archive_zip):
        upd(len(blob).to_bytes(8, "little"))
        upd(blob)
    upd(b"pages\0")
    for p in st.pages:
        upd(p)
    return h.hexdigest()


# --------------------------------------------------------------------------------------
# Readiness and the query loop.
# --------------------------------------------------------------------------------------
def run_ready_cmd(var="APP_READY_CMD"):
    """Runs $APP_READY_CMD (normally `snapboot ready`), passing its stdout through.

    A snapshot is taken while that command runs; when a guest is restored from the
    snapshot it continues here and the command prints `restored`. `recapture` runs
    $APP_RECAPTURE_CMD instead when it is set (under systemd: a restart of snapboot's
    capture unit)."""
    cmd = os.environ.get(var, "").strip()
    if not cmd:
        return
    try:
        proc = subprocess.Popen(cmd, shell=True, stdout=subprocess.PIPE, text=True, errors="replace")
    except OSError as e:
        say(f"app: ready command failed: {e}")
        return
    restored = False
    for line in proc.stdout:
        line = line.rstrip("\r\n")
        say(line)
        if line.strip() == "restored":
            restored = True
    rc = proc.wait()
    if rc != 0:
        say(f"app: ready command exited with status {rc}")
    if restored:
        say("app: restored from snapshot")


def run_device_cmd(var):
    """Runs $var through the shell, passing its output through line by line; returns its
    exit status (`unset` when the variable is)."""
    cmd = os.environ.get(var, "").strip()
    if not cmd:
        return "unset"
    r = subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, errors="replace")
    for line in r.stdout.splitlines():
        say(line)
    return str(r.returncode)


DEVICE_DIR = "/usr/lib/snapboot-board/device.d"
DEVICE_NAME = re.compile(r"^[a-z0-9-]+$")


def run_device_query(name):
    """`device NAME`: runs DEVICE_DIR/NAME (the board's device queries: a RAUC slot, GRUB's
    environment, an install), passing its output through line by line, and answers
    `device NAME exit N`; a badly named or absent query answers exit 127 without running."""
    path = os.path.join(DEVICE_DIR, name)
    if not DEVICE_NAME.fullmatch(name) or not os.access(path, os.X_OK):
        return f"device {name} exit 127"
    r = subprocess.run([path], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, errors="replace")
    for line in r.stdout.splitlines():
        say(line)
    return f"device {name} exit {r.returncode}"


def notify_ready():
    """Under systemd (Type=notify, $NOTIFY_SOCKET set): tells the service manager the
    application is ready, so units ordered after it (snapboot's capture) start now."""
    path = os.environ.get("NOTIFY_SOCKET", "")
    if not path:
        return
    if path.startswith("@"):
        path = "\0" + path[1:]  # abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.connect(path)
            s.sendall(b"READY=1")
    except OSError as e:
        say(f"app: cannot notify systemd: {e}")


def system_state():
    """`system`: the service manager's view (systemctl is-system-running, waiting up to
    20 s for a boot in progress) and whether the journal takes and returns a new entry."""
    try:
        r = subprocess.run(["systemctl", "is-system-running", "--wait"], capture_output=True,
                           text=True, timeout=20)
        state = r.stdout.strip() or "unknown"
    except subprocess.TimeoutExpired:
        state = "unsettled"
    except OSError as e:
        return f"error systemctl: {e}"
    failed = ""
    jobs = ""
    if state != "running":
        r = subprocess.run(["systemctl", "--failed", "--plain", "--no-legend"], capture_output=True,
                           text=True, timeout=10)
        failed = ",".join(l.split()[0] for l in r.stdout.splitlines() if l.strip()) or "none"
        # What the manager still waits for: each queued job as unit/type/state.
        r = subprocess.run(["systemctl", "list-jobs", "--plain", "--no-legend"], capture_output=True,
                           text=True, timeout=10)
        jobs = ",".join("/".join(l.split()[1:4]) for l in r.stdout.splitlines() if l.strip()) or "none"
    token = os.urandom(8).hex()
    journal = "missing"
    try:
        subprocess.run(["logger", "-t", "app-journal-check", token], timeout=10, check=True)
        for _ in range(40):
            r = subprocess.run(["journalctl", "--no-pager", "-o", "cat", "-t", "app-journal-check"],
                               capture_output=True, text=True, timeout=10)
            if token in r.stdout:
                journal = "ok"
                break
            time.sleep(0.05)
    except (OSError, subprocess.SubprocessError) as e:
        journal = f"error:{type(e).__name__}"
    out = f"system {state} journal={journal}"
    return out + (f" failed={failed} jobs={jobs}" if failed else "")


def journal_lines(word):
    """`journal WORD`: this boot's journal lines (`journalctl -b`) holding WORD: how many,
    and each of them (their text, ` | ` between them), as a device's administrator greps."""
    try:
        r = subprocess.run(["journalctl", "-b", "--no-pager", "-o", "cat"], capture_output=True,
                           text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as e:
        return f"error journalctl: {type(e).__name__}"
    lines = [l.strip() for l in r.stdout.splitlines() if word in l]
    return f"journal {len(lines)} " + " | ".join(lines)


def mount_of(path):
    """`mount PATH`: the filesystem mounted at PATH as /proc/self/mounts has it (the last
    mount there wins): its type and options."""
    found = None
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 4 and fields[1] == path:
                found = fields
    if not found:
        return f"mount {path} none"
    return f"mount {path} {found[2]} {found[3]}"


def boot_history():
    """`history`: `snapboot status --history 5` (the last boots from the store's boot log),
    its exit status and its lines, ` | ` between them."""
    try:
        r = subprocess.run(["snapboot", "status", "--history", "5"], capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return f"error snapboot: {type(e).__name__}"
    lines = [l.strip() for l in (r.stdout + r.stderr).splitlines() if l.strip()]
    return f"history exit={r.returncode} " + " | ".join(lines)


EFIVARS = "/sys/firmware/efi/efivars"
# BootOrder, under the UEFI specification's global variable GUID: every UEFI firmware has it.
BOOT_ORDER = "BootOrder-8be4df61-93ca-11d2-aa0d-00e098032b8c"
# snapboot's own variable, under a vendor GUID of its own (its first 4 bytes spell "Snap").
OWN_VARIABLE = "SnapbootCheck-536e6170-626f-4f74-8e46-31a4c0de0046"
FS_IOC_GETFLAGS = 0x80086601
FS_IOC_SETFLAGS = 0x40086602
FS_IMMUTABLE_FL = 0x10


def efi_variables(value_hex):
    """`efivar HEX`: UEFI runtime services through efivarfs, each step a firmware call: reads
    BootOrder (GetVariable), writes snapboot's own variable with the bytes HEX as non-volatile,
    boot-service and runtime-accessible (SetVariable), reads it back (GetVariable) and deletes
    it (SetVariable of no data; efivarfs makes the file immutable, so that flag goes first)."""
    import fcntl
    value = bytes.fromhex(value_hex)
    try:
        with open(os.path.join(EFIVARS, BOOT_ORDER), "rb") as f:
            boot = f.read()[4:]
    except FileNotFoundError:
        names = sorted(os.listdir(EFIVARS)) if os.path.isdir(EFIVARS) else ["(no directory)"]
        return f"efivar error no BootOrder among {len(names)} variables: {' '.join(names[:12])}"
    order = ",".join(f"{n:04X}" for (n,) in struct.iter_unpack("<H", boot[: len(boot) // 2 * 2]))
    path = os.path.join(EFIVARS, OWN_VARIABLE)
    with open(path, "wb", buffering=0) as f:
        f.write(struct.pack("<I", 0x7) + value)  # one write: attributes, then the data
    with open(path, "rb") as f:
        got = f.read()[4:]
    fd = os.open(path, os.O_RDONLY)
    try:
        flags = struct.unpack("<i", fcntl.ioctl(fd, FS_IOC_GETFLAGS, struct.pack("<i", 0)))[0]
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("<i", flags & ~FS_IMMUTABLE_FL))
    finally:
        os.close(fd)
    os.unlink(path)
    gone = "yes" if not os.path.exists(path) else "no"
    return f"efivar BootOrder={order} wrote={value.hex()} read={got.hex()} deleted={gone}"


def update_records(st, count, seed):
    """Changes `count` records (deterministic for a given seed): the amount moves by a few
    cents, in the dict, the JSON cache and sqlite alike. A small change to the state, as a
    calibration or a configuration update makes before a device re-captures."""
    rng = random.Random(seed)
    ids = sorted(st.records)
    changed = 0
    with st.db:
        for _ in range(count):
            rid = ids[rng.randrange(len(ids))]
            rec = st.records[rid]
            rec["amount"] += decimal.Decimal(rng.randrange(1, 100)).scaleb(-2)
            st.json_cache[rid] = record_json(rec)
            st.db.execute("UPDATE records SET cents = ? WHERE id = ?", (int(rec["amount"] * 100), rid))
            changed += 1
    return changed


def serve(st):
    """Answers one line per query until EOF on stdin."""
    served = 0
    n = len(st.records)
    while True:
        try:
            line = sys.stdin.readline()
        except (OSError, ValueError):
            line = ""
        if not line:
            break
        q = line.strip()
        if not q:
            continue  # blank lines (e.g. a bare Enter on the console) get no answer
        served += 1
        cmd, _, arg = q.partition(" ")
        arg = arg.strip()
        try:
            if cmd == "ping" and not arg:
                out = f"pong {served}"
            elif cmd == "checksum" and not arg:
                out = f"checksum {checksum(st)}"
            elif cmd == "time" and not arg:
                out = f"time {time.time():.6f}"
            elif cmd == "random" and not arg:
                out = f"random {os.urandom(16).hex()}"
            elif cmd == "lookup" and arg:
                try:
                    rid = int(arg)
                except ValueError:
                    rid = None
                rec = st.json_cache.get(rid)
                out = rec if rec is not None else f"error no record {arg}"
            elif cmd == "city" and arg:
                count, cents = st.db.execute(
                    "SELECT COUNT(*), COALESCE(SUM(cents), 0) FROM records WHERE city = ?", (arg,)
                ).fetchone()
                out = f"city {arg} count={count} sum={decimal.Decimal(cents).scaleb(-2)}"
            elif cmd == "squeeze" and arg:
                # Memory pressure on demand: fill (and free) this many MiB, so the kernel has
                # to reclaim, i.e. page the application's memory out to swap.
                mib = int(arg)
                buf = b"\x01" * (mib << 20)
                out = f"squeezed {len(buf) >> 20}"
                del buf
            elif cmd == "update" and arg:
                # `update N`: change N records; the seed is the query counter, so a replayed
                # session makes the same change.
                out = f"updated {update_records(st, int(arg), served)}"
            elif cmd == "recapture" and not arg:
                # Take a new snapshot of the running (e.g. restored and since changed) system:
                # the ready command captures again with the boot's capture settings. The
                # answer comes once the command returns: after a power-off that is in the
                # system restored from the new image.
                run_ready_cmd("APP_RECAPTURE_CMD" if os.environ.get("APP_RECAPTURE_CMD") else "APP_READY_CMD")
                out = "recaptured"
            elif cmd == "nextboot" and not arg:
                # Ask the boot loader for one capture boot, as a device does before a planned
                # power-off: $APP_NEXT_BOOT_CMD (the `debian` workload: `snapboot capture
                # --next-boot` with the ESP mounted, then a power-off).
                out = f"next-boot {run_device_cmd('APP_NEXT_BOOT_CMD')}"
            elif cmd == "device" and arg:
                out = run_device_query(arg)
            elif cmd == "system" and not arg:
                out = system_state()
            elif cmd == "journal" and arg:
                out = journal_lines(arg)
            elif cmd == "history" and not arg:
                out = boot_history()
            elif cmd == "mount" and arg:
                out = mount_of(arg)
            elif cmd == "efivar" and arg:
                out = efi_variables(arg)
            elif cmd == "crash" and not arg:
                # An application that dies, as one restored into a broken state would (a
                # page that fails verification, a device that did not come back): exit at
                # once with status 70, before any confirmation could prove it alive.
                say("app: crashing on request")
                os._exit(70)
            elif cmd == "hang" and not arg:
                # A system that hangs: every process but init stops (SIGSTOP to all, then to
                # itself), so nothing answers and nothing feeds a watchdog any more.
                say("app: hanging the system on request")
                os.kill(-1, signal.SIGSTOP)
                os.kill(os.getpid(), signal.SIGSTOP)
                out = "app: continued after a hang"
            elif cmd == "stats" and not arg:
                out = f"stats rss={rss_mib()} records={n} uptime={time.monotonic() - T0:.1f}"
            else:
                out = "error unknown query"
        except Exception as e:  # one bad query must not kill the service
            out = f"error {type(e).__name__}: {e}".replace("\n", " ")
        say(out)
    say("app: stdin closed")


def main():
    scale = parse_args()
    phase(f"imports done scale={scale:g}")
    st = build_state(scale)
    say(f"app: ready rss={rss_mib()} records={len(st.records)}")
    notify_ready()
    run_ready_cmd()
    serve(st)
    return 0


if __name__ == "__main__":
    sys.exit(main())
