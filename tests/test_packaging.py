"""The package's metadata, as setuptools builds it from pyproject.toml: an SPDX license with its
file, classifiers, one version source, and dev tools kept out of the ``test`` extra."""

from __future__ import annotations

import email
import re
import subprocess
import sys
from email.message import Message
from pathlib import Path

import pytest

import onnxflow

ROOT = Path(__file__).resolve().parents[1]

#: Builds the wheel's metadata as pip would, with every warning an error: setuptools deprecates
#: the ``license = {text = ...}`` table (it stops building it after 2027-02-18) with a warning.
BUILD_METADATA = """
import sys, setuptools.build_meta as backend
print(backend.prepare_metadata_for_build_wheel(sys.argv[1]))
"""


@pytest.fixture(scope="module")
def metadata(tmp_path_factory: pytest.TempPathFactory) -> Message:
    out = tmp_path_factory.mktemp("metadata")
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", BUILD_METADATA, str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    dist_info = out / done.stdout.strip().splitlines()[-1]
    return email.message_from_string((dist_info / "METADATA").read_text())


def test_license_is_an_spdx_expression_with_its_file(metadata: Message) -> None:
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert metadata["License"] is None  # the deprecated free-text field is gone
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_version_has_one_source(metadata: Message) -> None:
    assert metadata["Version"] == onnxflow.__version__
    project = (ROOT / "pyproject.toml").read_text().split("\n[project]\n")[1].split("\n[")[0]
    assert re.search(r"^dynamic = .*\"version\"", project, re.M)
    assert not re.search(r"^version\s*=", project, re.M)


def test_classifiers_name_the_license_free_python_versions(metadata: Message) -> None:
    classifiers = metadata.get_all("Classifier")
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert "Typing :: Typed" in classifiers
    # PEP 639: with a License-Expression, a license classifier is an error to build tools
    assert not [c for c in classifiers if c.startswith("License ::")]


def _extra(metadata: Message, name: str) -> set[str]:
    marker = f'extra == "{name}"'
    found = [r.split(";")[0] for r in metadata.get_all("Requires-Dist") if marker in r]
    return {r.split(">")[0].split("[")[0].strip() for r in found}


def test_dev_tools_sit_in_the_dev_extra(metadata: Message) -> None:
    assert {"ruff", "radon"} <= _extra(metadata, "dev")
    test = _extra(metadata, "test")
    assert "ruff" not in test
    assert {"pytest", "onnxruntime", "radon", "setuptools"} <= test  # what the tests use


def test_the_installed_version_is_the_package_version() -> None:
    from importlib.metadata import version

    assert version("onnxflow") == onnxflow.__version__
