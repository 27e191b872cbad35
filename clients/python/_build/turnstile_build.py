"""The build backend (PEP 517) of the turnstile client, standard library only.

pip builds a wheel for every install from source, and the backend it builds
with must be importable in the build environment. setuptools before 70.1
needs the separate `wheel` package for that, which no fresh virtual
environment has (and one of Python 3.12 or later has no setuptools at all);
where no package index can be reached, pip could not fetch either, so
`pip install ./clients/python` would fail. This backend lives beside the
package (pyproject.toml's backend-path) and needs nothing but Python, so the
install works offline, with or without build isolation.

It builds a pure-Python wheel of the `turnstile` package and an sdist, from
the static [project] table of pyproject.toml. It knows only the fields that
table uses and refuses any other, so a field added there is never silently
left out of the built metadata. Editable installs (pip install -e) are not
supported: install again after changing the client.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import time
import zipfile
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "turnstile"  # the one import package the distribution holds
# The [project] fields this backend writes into the metadata; any other is
# refused. dependencies must stay empty: the client is standard library only.
KNOWN_FIELDS = {"name", "version", "description", "requires-python", "dependencies"}
# Archive entries get one fixed time, so the same sources build the same
# bytes (SOURCE_DATE_EPOCH overrides it, as reproducible builds expect).
EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))  # 1980-01-01, the earliest a zip holds


def _read_project() -> Dict[str, Any]:
    data = _read(os.path.join(ROOT, "pyproject.toml"))
    try:
        import tomllib  # Python 3.11 and later
    except ImportError:
        project = _parse_project_table(data.decode("utf-8"))
    else:
        project = tomllib.loads(data.decode("utf-8")).get("project", {})
    unknown = sorted(set(project) - KNOWN_FIELDS)
    if unknown:
        raise ValueError(f"pyproject.toml: [project] fields the in-tree backend does not write: {unknown}")
    for key in ("name", "version"):
        if not isinstance(project.get(key), str) or not project[key]:
            raise ValueError(f"pyproject.toml: [project] needs a {key}")
    if project.get("dependencies"):
        raise ValueError("pyproject.toml: the client has no runtime dependencies; the backend writes none")
    return project


def _parse_project_table(text: str) -> Dict[str, Any]:
    """The [project] table for Pythons without tomllib: one `key = value` a
    line, each value a basic string or a one-line array of them (both read
    as JSON); anything else in the table is an error."""
    project: Dict[str, Any] = {}
    table = ""
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        header = re.fullmatch(r"\[+\s*([^\]]+?)\s*\]+", line)
        if header:
            table = header.group(1)
            if table.startswith("project."):
                raise ValueError(f"pyproject.toml line {n}: the backend does not write [{table}]")
            continue
        if table != "project":
            continue
        m = re.fullmatch(r'([A-Za-z0-9_-]+)\s*=\s*("(?:[^"\\]|\\.)*"|\[[^\]]*\])', line)
        if not m:
            raise ValueError(f"pyproject.toml line {n}: the backend reads only strings and one-line arrays there")
        project[m.group(1)] = json.loads(m.group(2))
    return project


def _dist_name(project: Dict[str, Any]) -> str:
    """The name in file names: runs of -_. become one underscore (PEP 427)."""
    return re.sub(r"[-_.]+", "_", project["name"]).lower()


def _metadata(project: Dict[str, Any]) -> bytes:
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}"]
    if project.get("description"):
        lines.append(f"Summary: {project['description']}")
    if project.get("requires-python"):
        lines.append(f"Requires-Python: {project['requires-python']}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def _package_files() -> List[Tuple[str, str]]:
    """(path in the archive, path on disk) of the package's files, sorted."""
    files = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            disk = os.path.join(dirpath, name)
            files.append((os.path.relpath(disk, ROOT).replace(os.sep, "/"), disk))
    if not files:
        raise ValueError(f"no files in {os.path.join(ROOT, PACKAGE)}")
    return files


def _dist_info(project: Dict[str, Any]) -> Tuple[str, List[Tuple[str, bytes]]]:
    name = f"{_dist_name(project)}-{project['version']}.dist-info"
    wheel = b"Wheel-Version: 1.0\nGenerator: turnstile_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    return name, [(f"{name}/METADATA", _metadata(project)), (f"{name}/WHEEL", wheel),
                  (f"{name}/top_level.txt", f"{PACKAGE}\n".encode())]


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _zip_entry(path: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(path, date_time=time.gmtime(max(EPOCH, 315532800))[:6])
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


# PEP 517 hooks.

def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: Optional[Dict[str, Any]] = None) -> str:
    name, entries = _dist_info(_read_project())
    for path, data in entries:
        disk = os.path.join(metadata_directory, *path.split("/"))
        os.makedirs(os.path.dirname(disk), exist_ok=True)
        with open(disk, "wb") as f:
            f.write(data)
    return name


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    project = _read_project()
    filename = f"{_dist_name(project)}-{project['version']}-py3-none-any.whl"
    entries = [(path, _read(disk)) for path, disk in _package_files()]
    dist_info, meta = _dist_info(project)
    entries += meta
    record = [_record_line(path, data) for path, data in entries] + [f"{dist_info}/RECORD,,"]
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    os.makedirs(wheel_directory, exist_ok=True)
    tmp = os.path.join(wheel_directory, filename + ".tmp")
    with zipfile.ZipFile(tmp, "w") as zf:
        for path, data in entries:
            zf.writestr(_zip_entry(path), data)
    os.replace(tmp, os.path.join(wheel_directory, filename))
    return filename


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    project = _read_project()
    base = f"{_dist_name(project)}-{project['version']}"
    here = os.path.abspath(__file__)
    files = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml")),
             (os.path.relpath(here, ROOT).replace(os.sep, "/"), here)] + _package_files()
    entries = [(path, _read(disk)) for path, disk in files]
    entries.append(("PKG-INFO", _metadata(project)))
    filename = base + ".tar.gz"
    os.makedirs(sdist_directory, exist_ok=True)
    tmp = os.path.join(sdist_directory, filename + ".tmp")
    with open(tmp, "wb") as raw:
        with gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=EPOCH) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for path, data in sorted(entries):
                    info = tarfile.TarInfo(f"{base}/{path}")
                    info.size, info.mtime, info.mode = len(data), EPOCH, 0o644
                    tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, os.path.join(sdist_directory, filename))
    return filename
