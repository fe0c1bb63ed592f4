"""The chat page at / in headless Chromium (Debian `chromium` +
`chromium-driver`, `selenium` from PyPI; skipped when any is missing): type
a message, see the reply stream in, then a second turn."""
import shutil
import time

import pytest

from test_server import Server

webdriver = pytest.importorskip("selenium.webdriver")


def _browser():
    chrome = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chrome or not driver:
        pytest.skip("chromium / chromedriver not installed")
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service(driver), options=opts)


def test_chat_page_streams_a_reply(vllm_bin):
    from selenium.webdriver.common.by import By
    s = Server(vllm_bin)
    b = None
    try:
        b = _browser()
        b.get(s.base + "/?max_tokens=12")
        # Every text the page gives an assistant reply (one per SSE delta it
        # renders), recorded by a MutationObserver: polling the DOM could
        # miss the steps of a reply that streams in less than a poll period.
        b.execute_script(
            "window.__states = [];"
            "new MutationObserver(rs => { for (const r of rs) for (const n of r.addedNodes)"
            " if (n.nodeType === 3 && n.parentElement && n.parentElement.classList.contains('assistant'))"
            " window.__states.push(n.data); })"
            ".observe(document.getElementById('log'), {subtree: true, childList: true});")
        for turn in range(2):
            b.execute_script("window.__states = [];")
            box = b.find_element(By.ID, "msg")
            box.send_keys("Tell me about the sea" if turn == 0 else "And the sky?")
            b.find_element(By.ID, "send").click()
            deadline = time.time() + 90
            while time.time() < deadline:
                errs = b.find_elements(By.CSS_SELECTOR, "#log .error")
                assert not errs, errs[0].text
                # The page pushes the reply into its history when the stream ends.
                if b.execute_script("return conv.length") == 2 * (turn + 1):
                    break
                time.sleep(0.05)
            assert b.execute_script("return conv.length") == 2 * (turn + 1)
            final = b.execute_script("return conv[conv.length - 1].content")
            assert final and final.strip() == b.find_elements(By.CSS_SELECTOR, "#log .assistant")[-1].text.strip()
            seen = b.execute_script("return window.__states")
            assert seen and seen[-1] == final, f"last rendered text {seen[-1:]} != {final!r}"
            assert len(set(seen)) >= 2, f"reply did not stream: {seen}"  # grew in steps
        assert len(b.find_elements(By.CSS_SELECTOR, "#log .user")) == 2
    finally:
        if b:
            b.quit()
        s.stop()
