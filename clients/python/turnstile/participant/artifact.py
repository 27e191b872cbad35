"""The checkpoint artifact format of turnstile (Go package artifact), written
and validated with the standard library only.

A checkpoint directory holds named sections of (key, data) records:

    manifest.json              written last; a directory without it is no checkpoint
    <section>.index.jsonl      one line per record: {key, shard, member, size, sha256}
    <section>-00000.tar ...    deterministic ustar shards, <= 512 records and 64 MiB each

The Go coordinator opens what a participant commits with artifact.Open and
refuses anything it could not have written itself, so every byte here is
what Go writes for the same sections: the same sections give the same files,
whatever order they came in. `python -m turnstile.participant artifact`
writes or checks one checkpoint, for the tests that compare it with the Go
implementation:

    python3 -m turnstile.participant artifact write DIR CHECKPOINT_ID < sections.json
    python3 -m turnstile.participant artifact check DIR CHECKPOINT_ID
"""

import hashlib
import os
import re
import sys

from . import wire

SCHEMA_VERSION = 1
MAX_SHARD_RECORDS = 512
MAX_SHARD_BYTES = 64 << 20
MANIFEST = "manifest.json"
_SECTION_RE = re.compile(r"[a-z0-9][a-z0-9._-]*")
_LEFTOVER_RE = re.compile(r"(\.tmp-.*|[a-z0-9][a-z0-9._-]*(-[0-9]{5}\.tar|\.index\.jsonl))")
_HEX_RE = re.compile(r"[0-9a-f]{64}")


class InvalidCheckpoint(Exception):
    """The checkpoint (or the input to write) is malformed, corrupt, torn or
    not the one asked for."""


class Conflict(Exception):
    """The directory holds something else; nothing was overwritten."""


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def shard_name(section, n):
    return f"{section}-{n:05d}.tar"


def index_name(section):
    return section + ".index.jsonl"


def member_name(key):
    return sha256_hex(key.encode("utf-8")) + ".rec"


# --- the deterministic tar shard -----------------------------------------

def _octal(value, width):
    """A numeric field as Go's tar writer fills it: zero-padded octal and a
    NUL in the last byte."""
    return (format(value, "o").rjust(width - 1, "0") + "\0").encode()


def tar_header(name, size):
    """The 512-byte ustar header Go's archive/tar writes for a regular file
    with mode 0644, owner 0, mtime 0 and no user or group names."""
    h = bytearray(512)
    h[0:len(name)] = name.encode()
    h[100:108] = _octal(0o644, 8)
    h[108:116] = _octal(0, 8)
    h[116:124] = _octal(0, 8)
    h[124:136] = _octal(size, 12)
    h[136:148] = _octal(0, 12)
    h[148:156] = b" " * 8  # the checksum is taken with its own field blank
    h[156:157] = b"0"
    h[257:263] = b"ustar\0"
    h[263:265] = b"00"
    h[329:337] = _octal(0, 8)
    h[337:345] = _octal(0, 8)
    h[148:155] = _octal(sum(h), 7)
    return bytes(h)


def tar_bytes(records):
    out = bytearray()
    for key, data in records:
        out += tar_header(member_name(key), len(data))
        out += data
        out += b"\0" * (-len(data) % 512)
    out += b"\0" * 1024
    return bytes(out)


def tar_size(sizes):
    return 1024 + sum(512 + (s + 511) // 512 * 512 for s in sizes)


# --- writing ----------------------------------------------------------------

def plan(sections, max_shard_records=MAX_SHARD_RECORDS):
    """Validates names and keys, sorts, and cuts each section into shards of
    at most max_shard_records records (and MAX_SHARD_BYTES bytes):
    [(name, [[(key, data), ...], ...]), ...] sorted by name."""
    if type(max_shard_records) is not int or not 1 <= max_shard_records <= MAX_SHARD_RECORDS:
        raise InvalidCheckpoint(f"max_shard_records {max_shard_records!r}: want 1 to {MAX_SHARD_RECORDS}")
    out = []
    for name in sorted(sections):
        if not _SECTION_RE.fullmatch(name) or ".." in name or len(name) > 128:
            raise InvalidCheckpoint(f"section name {name!r}")
        recs = sorted(sections[name], key=lambda r: r[0].encode("utf-8"))
        shards, cur, cur_bytes = [], [], 0
        for i, (key, data) in enumerate(recs):
            if not key or len(key.encode("utf-8")) > 1024:
                raise InvalidCheckpoint(f"section {name}: bad record key {key[:40]!r}")
            if i > 0 and recs[i - 1][0] == key:
                raise InvalidCheckpoint(f"section {name}: record key {key!r} given twice")
            if len(data) > MAX_SHARD_BYTES:
                raise InvalidCheckpoint(f"section {name}: record {key!r} is larger than a shard")
            if cur and (len(cur) == max_shard_records or cur_bytes + len(data) > MAX_SHARD_BYTES):
                shards.append(cur)
                cur, cur_bytes = [], 0
            cur.append((key, data))
            cur_bytes += len(data)
        if cur:
            shards.append(cur)
        out.append((name, shards))
    return out


def index_bytes(name, shards):
    lines = []
    for n, recs in enumerate(shards):
        for key, data in recs:
            lines.append(wire.dumps({"key": key, "shard": shard_name(name, n), "member": member_name(key),
                                     "size": len(data), "sha256": sha256_hex(data)}) + b"\n")
    return b"".join(lines)


def files_of(checkpoint_id, labels, sections, max_shard_records=MAX_SHARD_RECORDS):
    """Every file of the checkpoint, in the order they are written (the
    manifest last), and the manifest: ([(name, bytes)], manifest dict)."""
    files = []
    manifest = {"schema": SCHEMA_VERSION, "checkpoint_id": checkpoint_id}
    if labels:
        manifest["labels"] = {k: labels[k] for k in sorted(labels)}
    sms, total = [], 0
    for name, shards in plan(sections, max_shard_records):
        sm = {"name": name, "records": 0, "index": None, "shards": []}
        for n, recs in enumerate(shards):
            data = tar_bytes(recs)
            files.append((shard_name(name, n), data))
            sm["shards"].append({"name": shard_name(name, n), "size": len(data), "sha256": sha256_hex(data),
                                 "records": len(recs)})
            sm["records"] += len(recs)
        idx = index_bytes(name, shards)
        files.append((index_name(name), idx))
        sm["index"] = {"name": index_name(name), "size": len(idx), "sha256": sha256_hex(idx)}
        sms.append(sm)
        total += sm["records"]
    manifest["records"] = total
    manifest["sections"] = sms
    mb = encode_manifest(manifest)
    files.append((MANIFEST, mb))
    return files, manifest


def encode_manifest(m):
    """Canonical manifest bytes with its digest set (and sets m["digest"])."""
    m["digest"] = ""
    m["digest"] = sha256_hex(_canonical_manifest(m))
    return _canonical_manifest(m)


def _canonical_manifest(m):
    """The one encoding a manifest may have: Go's field order, whatever
    order the dict holds its keys in."""
    out = {"schema": m["schema"], "checkpoint_id": m["checkpoint_id"]}
    if m.get("labels"):
        out["labels"] = {k: m["labels"][k] for k in sorted(m["labels"])}
    out["records"] = m["records"]
    out["sections"] = [{
        "name": sm["name"], "records": sm["records"],
        "index": {k: sm["index"][k] for k in ("name", "size", "sha256")},
        "shards": [{k: sh[k] for k in ("name", "size", "sha256", "records")} for sh in sm["shards"]],
    } for sm in m["sections"]]
    out["digest"] = m["digest"]
    return wire.dumps_indent(out) + b"\n"


def _write_atomic(dir_, name, data):
    tmp = os.path.join(dir_, f".tmp-{name}-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(dir_, name))
    _sync_dir(dir_)


def _sync_dir(dir_):
    fd = os.open(dir_, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _prepare_dir(dir_):
    """Creates dir_ or removes the leftovers of a torn commit; refuses a
    directory that holds anything else."""
    os.makedirs(dir_, exist_ok=True)
    names = os.listdir(dir_)
    for n in names:
        path = os.path.join(dir_, n)
        if not os.path.isfile(path) or os.path.islink(path) or not _LEFTOVER_RE.fullmatch(n):
            raise Conflict(f"directory holds {n!r}, which is no checkpoint file; refusing to write there")
    for n in names:
        os.remove(os.path.join(dir_, n))
    if names:
        _sync_dir(dir_)


def write(dir_, checkpoint_id, labels, sections, max_shard_records=MAX_SHARD_RECORDS):
    """Commits sections ({name: [(key, bytes)]}) as checkpoint checkpoint_id
    into dir_ and returns the manifest. max_shard_records below the default
    (512) cuts smaller shards, as the Go Options.MaxShardRecords does. Each file is written to a temporary
    name, fsynced and renamed; the manifest comes last. A directory that
    already holds a manifest is never written: the same content validates
    and returns the same manifest (a retried commit), anything else raises
    Conflict."""
    if not checkpoint_id or len(checkpoint_id.encode()) > 256:
        raise InvalidCheckpoint(f"checkpoint id {checkpoint_id[:40]!r}")
    files, manifest = files_of(checkpoint_id, labels, sections, max_shard_records)
    if os.path.lexists(os.path.join(dir_, MANIFEST)):
        with open(os.path.join(dir_, MANIFEST), "rb") as f:
            if f.read() != files[-1][1]:
                raise Conflict(f"{dir_} holds another checkpoint (digest {manifest['digest']} wanted)")
        open_checkpoint(dir_, checkpoint_id)
        return manifest
    _prepare_dir(dir_)
    for name, data in files:
        _write_atomic(dir_, name, data)
    return manifest


def size_of(dir_, manifest):
    n = os.stat(os.path.join(dir_, MANIFEST)).st_size
    for sm in manifest["sections"]:
        n += sm["index"]["size"] + sum(sh["size"] for sh in sm["shards"])
    return n


# --- reading ----------------------------------------------------------------

def _bad(dir_, name, msg):
    return InvalidCheckpoint(f"{dir_}: {name}: {msg}")


def _read_regular(dir_, name, limit=None):
    path = os.path.join(dir_, name)
    if os.path.islink(path) or not os.path.isfile(path):
        raise _bad(dir_, name, "missing or not a regular file")
    with open(path, "rb") as f:
        data = f.read() if limit is None else f.read(limit + 1)
    return data


def open_checkpoint(dir_, want_id):
    """Validates the checkpoint in dir_ completely and returns its records:
    (manifest, {section: [(key, bytes)]}). Anything a writer of this
    format could not have produced raises InvalidCheckpoint naming the file
    and the problem."""
    mb = _read_regular(dir_, MANIFEST, 64 << 20) if os.path.lexists(os.path.join(dir_, MANIFEST)) else None
    if mb is None:
        raise _bad(dir_, MANIFEST, "no manifest: not a checkpoint (its commit tore before the end or never ran)")
    m = _parse_manifest(dir_, mb, want_id)
    want = {MANIFEST}
    for sm in m["sections"]:
        want.add(sm["index"]["name"])
        want.update(sh["name"] for sh in sm["shards"])
    for n in os.listdir(dir_):
        if n not in want:
            raise _bad(dir_, n, "unexpected entry, not listed in the manifest")
    out = {}
    for sm in m["sections"]:
        idx = _read_exact(dir_, sm["index"])
        entries = _parse_index(dir_, sm, idx)
        out[sm["name"]] = _read_shards(dir_, sm, entries)
    return m, out


def _parse_manifest(dir_, mb, want_id):
    try:
        m = wire.loads(mb)
    except ValueError as e:
        raise _bad(dir_, MANIFEST, f"not valid JSON: {e}")
    if not isinstance(m, dict) or m.get("schema") != SCHEMA_VERSION:
        raise _bad(dir_, MANIFEST, f"unknown schema (this reader reads {SCHEMA_VERSION})")
    try:
        copy = dict(m)
        canon = encode_manifest(copy)
    except (KeyError, TypeError, ValueError) as e:
        raise _bad(dir_, MANIFEST, f"malformed: {e}")
    if canon != mb or copy["digest"] != m.get("digest"):
        raise _bad(dir_, MANIFEST, "not in canonical form or its digest does not match (edited or corrupt)")
    if m["checkpoint_id"] != want_id:
        raise _bad(dir_, MANIFEST, f"checkpoint id {m['checkpoint_id']!r}, want {want_id!r}")
    names = [sm.get("name") for sm in m["sections"]]
    if names != sorted(set(names)):
        raise _bad(dir_, MANIFEST, "sections not sorted or duplicate")
    for sm in m["sections"]:
        if sm["index"]["name"] != index_name(sm["name"]) or not _HEX_RE.fullmatch(sm["index"]["sha256"]):
            raise _bad(dir_, MANIFEST, f"section {sm['name']}: bad index entry")
        for j, sh in enumerate(sm["shards"]):
            if sh["name"] != shard_name(sm["name"], j) or sh["records"] < 1 or not _HEX_RE.fullmatch(sh["sha256"]):
                raise _bad(dir_, MANIFEST, f"section {sm['name']}: bad shard entry {j}")
        if sum(sh["records"] for sh in sm["shards"]) != sm["records"]:
            raise _bad(dir_, MANIFEST, f"section {sm['name']}: record counts disagree")
    if sum(sm["records"] for sm in m["sections"]) != m["records"]:
        raise _bad(dir_, MANIFEST, "record counts disagree")
    return m


def _read_exact(dir_, ref):
    data = _read_regular(dir_, ref["name"])
    if len(data) != ref["size"] or sha256_hex(data) != ref["sha256"]:
        raise _bad(dir_, ref["name"], f"{len(data)} bytes with sha256 {sha256_hex(data)}, "
                                      f"manifest says {ref['size']} bytes with sha256 {ref['sha256']}")
    return data


def _parse_index(dir_, sm, idx):
    name = sm["index"]["name"]
    if idx and not idx.endswith(b"\n"):
        raise _bad(dir_, name, "last line not terminated")
    bounds = []
    for n, sh in enumerate(sm["shards"]):
        bounds += [sh["name"]] * sh["records"]
    lines = idx.split(b"\n")[:-1] if idx else []
    if len(lines) != len(bounds):
        raise _bad(dir_, name, f"{len(lines)} entries, manifest says {len(bounds)} records")
    entries = []
    for i, line in enumerate(lines):
        try:
            e = wire.loads(line)
            canon = wire.dumps({k: e[k] for k in ("key", "shard", "member", "size", "sha256")})
        except (ValueError, KeyError, TypeError) as err:
            raise _bad(dir_, name, f"line {i + 1}: {err}")
        if canon != line or len(e) != 5:
            raise _bad(dir_, name, f"line {i + 1}: not in canonical form")
        if entries and entries[-1]["key"].encode() >= e["key"].encode():
            raise _bad(dir_, name, f"line {i + 1}: keys must be unique and sorted")
        if e["member"] != member_name(e["key"]) or e["shard"] != bounds[i]:
            raise _bad(dir_, name, f"line {i + 1}: member or shard does not match")
        entries.append(e)
    return entries


def _read_shards(dir_, sm, entries):
    out, first = [], 0
    for sh in sm["shards"]:
        data = _read_exact(dir_, sh)
        part = entries[first:first + sh["records"]]
        first += sh["records"]
        if len(data) != tar_size([e["size"] for e in part]):
            raise _bad(dir_, sh["name"], "not a deterministic archive of its members")
        off = 0
        for e in part:
            if data[off:off + 512] != tar_header(e["member"], e["size"]):
                raise _bad(dir_, sh["name"], f"member {e['member']}: header not in the deterministic form")
            body = data[off + 512:off + 512 + e["size"]]
            if sha256_hex(body) != e["sha256"]:
                raise _bad(dir_, sh["name"], f"member {e['member']} (key {e['key']!r}): sha256 mismatch")
            out.append((e["key"], body))
            off += 512 + (e["size"] + 511) // 512 * 512
        if any(data[off:]):
            raise _bad(dir_, sh["name"], "trailing data after the members")
    return out


def _main(argv):
    if len(argv) != 3 or argv[0] not in ("write", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    cmd, dir_, cid = argv
    try:
        if cmd == "write":
            doc = wire.loads(sys.stdin.buffer.read())
            sections = {s["name"]: [(r["key"], r["data"].encode("utf-8")) for r in s["records"]] for s in doc["sections"]}
            m = write(dir_, cid, doc.get("labels") or {}, sections)
        else:
            m, _ = open_checkpoint(dir_, cid)
    except (InvalidCheckpoint, Conflict) as e:
        print(f"{cmd}: {e}", file=sys.stderr)
        return 1
    print(m["digest"])
    return 0

