"""A PEP 517 build backend for the meshtrain client that needs nothing but the standard library:
pip's isolated build environment has no setuptools offline, and this package is pure Python. It
builds the wheel (and an sdist) from pyproject.toml's [project] table and the files of
meshtrain/ (*.py and py.typed)."""
from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import zipfile
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "meshtrain"


def _project() -> Dict[str, object]:
    import tomllib
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        project: Dict[str, object] = tomllib.load(f)["project"]
    return project


def _metadata() -> str:
    p = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}",
             f"Summary: {p['description']}", f"Requires-Python: {p['requires-python']}"]
    lines += [f"Requires-Dist: {d}" for d in p.get("dependencies", [])]  # type: ignore[attr-defined]
    for extra, deps in p.get("optional-dependencies", {}).items():  # type: ignore[attr-defined]
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {d}; extra == "{extra}"' for d in deps]
    with open(os.path.join(HERE, str(p["readme"])), encoding="utf-8") as f:
        readme = f.read()
    lines.append("Description-Content-Type: text/markdown")
    return "\n".join(lines) + "\n\n" + readme


def _files() -> List[Tuple[str, str]]:
    root = os.path.join(HERE, PACKAGE)
    return [(os.path.join(root, n), f"{PACKAGE}/{n}") for n in sorted(os.listdir(root))
            if n.endswith(".py") or n == "py.typed"]


def _dist_info() -> str:
    p = _project()
    return f"{p['name']}-{p['version']}.dist-info"


def _wheel_name() -> str:
    p = _project()
    return f"{p['name']}-{p['version']}-py3-none-any.whl"


def _record(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, str]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, str]] = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: Optional[Dict[str, str]] = None) -> str:
    info = os.path.join(metadata_directory, _dist_info())
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return _dist_info()


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, str]] = None,
                metadata_directory: Optional[str] = None) -> str:
    info = _dist_info()
    entries: List[Tuple[str, bytes]] = []
    for path, name in _files():
        with open(path, "rb") as f:
            entries.append((name, f.read()))
    entries.append((f"{info}/METADATA", _metadata().encode()))
    entries.append((f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: meshtrain_build\n"
                    b"Root-Is-Purelib: true\nTag: py3-none-any\n"))
    entries.append((f"{info}/top_level.txt", f"{PACKAGE}\n".encode()))
    record = [_record(n, d) for n, d in entries] + [f"{info}/RECORD,,"]
    entries.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    out = os.path.join(wheel_directory, _wheel_name())
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries:
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return _wheel_name()


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, str]] = None) -> str:
    p = _project()
    base = f"{p['name']}-{p['version']}"
    out = os.path.join(sdist_directory, base + ".tar.gz")
    with tarfile.open(out, "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "backend/meshtrain_build.py"]:
            t.add(os.path.join(HERE, rel), f"{base}/{rel}")
        for path, name in _files():
            t.add(path, f"{base}/{name}")
        pkg_info = _metadata().encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(pkg_info)
        t.addfile(info, io.BytesIO(pkg_info))
    return base + ".tar.gz"
