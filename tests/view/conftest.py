"""A headless chromium for the view's tests, one per module, driven by selenium through Debian's
chromedriver (``apt-get install chromium chromium-driver``; ``.ci/run`` installs them)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMEDRIVER = Path("/usr/bin/chromedriver")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """A headless chromium, 1400x900, its network reachable (tests may cut it)."""
    if not CHROMEDRIVER.exists() or shutil.which("chromium") is None:
        pytest.fail(
            "the view's tests render pages in Debian's chromium: run "
            "'apt-get install -y chromium chromium-driver' (found no /usr/bin/chromedriver or "
            "no chromium on PATH)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()
