"""DESIGN.md §2: a wheel adds one top-level name, ``replicast``; the repository's folders install as
its subpackages through ``package_dir`` in setup.cfg, and that list must name every package folder
(a folder left out would be missing from the wheel while an editable install still finds it)."""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def options() -> configparser.SectionProxy:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg", encoding="utf-8")
    return config["options"]


def mapping() -> dict[str, str]:
    pairs = (line.split("=") for line in options()["package_dir"].strip().splitlines())
    return {name.strip(): folder.strip() for name, folder in pairs}


def test_every_package_installs_under_replicast():
    assert all(name == "replicast" or name.startswith("replicast.") for name in mapping())


def test_the_package_list_names_every_package_folder():
    listed = set(options()["packages"].split())
    found = set()
    for name, folder in mapping().items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *relative)))
    assert found == listed
