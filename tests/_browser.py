"""Headless Chromium for the UI's tests and `bench/ui.py`: Debian's `chromium` and
`chromium-driver`, driven by Selenium with both paths given, so nothing is downloaded."""

from __future__ import annotations

import shutil
import tempfile

MISSING = (
    "headless Chromium needs Debian's chromium and chromium-driver "
    "(apt-get install -y chromium chromium-driver) and selenium"
)


def available() -> bool:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return False
    return bool(shutil.which("chromium") and shutil.which("chromedriver"))


def chrome(width: int = 1500, height: int = 950):
    """A fresh headless Chromium (its own profile directory, no background traffic: this
    network refuses it)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    profile = tempfile.mkdtemp(prefix="provrepo-chromium-")
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
    ):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=opts)
    driver.set_page_load_timeout(60)
    driver.profile_dir = profile  # removed by close()
    return driver


def close(driver) -> None:
    try:
        driver.quit()
    finally:
        shutil.rmtree(driver.profile_dir, ignore_errors=True)


def wait_for(driver, script: str, timeout: float = 30):
    """Wait until a JavaScript expression is truthy; returns its value."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(
        lambda d: d.execute_script("return " + script)
    )
