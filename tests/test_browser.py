"""The notebooks as a person uses them: JupyterLab in a real (headless) browser, Run All, and a look at the page.

The test starts JupyterLab itself (a free port, a token, temporary settings, workspace and runtime folders,
`--no-browser`) on copies of the five notebooks carrying the quick parameters `kit demo --quick` injects, and
drives Debian's Chromium (`apt-get install -y chromium chromium-driver`) with selenium. For each notebook it
opens it, runs all cells from the Run menu, waits for the last cell, then scrolls every cell into view
(JupyterLab draws off-screen cells lazily) and checks what a person would see: no error output, every figure
a loaded `<img>` (not `<Figure size ...>` text), every widget drawn (no "Error displaying widget", no
"Loading widget" while the kernel lives), and the notebook's closing line. Notebook 05's sweep panel is then
pressed: a small grid runs, its heatmap image changes after each measured point, one point's server is
killed while it starts (as an out-of-memory kill would) and the panel names the failure and goes on, Stop
leaves no server behind, and the notebook reopened without its kernel shows the panel's restore hint.

Every notebook writes under `$KIT_RUNS_DIR` (set to the test's folder): the source tree stays as it was.
A full-page screenshot per notebook lands in the test's folder; with KIT_UPDATE_SCREENSHOTS=1 a small one
per notebook is also written to docs/screenshots/ (the README shows them).

Run: python -m pytest tests/test_browser.py -m browser   (skipped without chromium, except under CI=true)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from kit.demo import DemoConfig, declared_parameters, notebook_parameters, notebook_paths

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
SHOTS = ROOT / "docs" / "screenshots"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1000",
)
# what each notebook ends with, as a person reads it in its last cell's output
CLOSING = {
    "01_environment": r"'error': \d+, 'warning': \d+",
    "02_checkpoint_keys": r"destination_layout",
    "03_hidden_states": r"expected accept length",
    "04_launch_server": r"fixed",
    "05_acceptance_throughput": r"verdict\.|findings?",
}
# the README's screenshot of a notebook: scrolled to this heading (default: its last figure or widget)
SHOWCASE = {
    "01_environment": "2. Rules",
    "02_checkpoint_keys": "4. Simulated load",
    "04_launch_server": "7. Seed vs fix",
}
NOTEBOOKS = [p.stem for p in notebook_paths()]

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _need_browser() -> None:
    if CHROMIUM and CHROMEDRIVER:
        return
    msg = "Debian's chromium and chromium-driver are not installed (apt-get install -y chromium chromium-driver)"
    if os.environ.get("CI") == "true":
        pytest.fail(msg + "; .ci/run installs them")
    pytest.skip(msg)


def _http(url: str, method: str = "GET", timeout: float = 10.0):
    req = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        body = r.read().decode()
    return json.loads(body) if body else None


class Lab:
    """A JupyterLab server of the test's own, on copies of the notebooks with the quick parameters."""

    def __init__(self, base: Path):
        import nbformat
        from papermill.iorw import load_notebook_node
        from papermill.parameterize import parameterize_notebook

        from kit.serving.process import free_port

        self.dir, self.runs = base / "notebooks", base / "runs"
        self.dir.mkdir()
        self.runs.mkdir()
        quick = notebook_parameters(DemoConfig(quick=True), self.runs)
        quick.pop("out_dir")  # the notebooks choose their own folder, under $KIT_RUNS_DIR
        for nb in notebook_paths():
            node = load_notebook_node(str(nb))
            params = {k: v for k, v in quick.items() if k in declared_parameters(nb)}
            if params:
                node = parameterize_notebook(node, params)
            nbformat.write(node, self.dir / nb.name)
        settings = base / "lab-settings"
        notify = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
        notify.parent.mkdir(parents=True)
        notify.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
        self.port, self.token = free_port(), secrets.token_hex(16)
        env = {
            **os.environ,
            "KIT_RUNS_DIR": str(self.runs),
            "HF_HUB_OFFLINE": "1",
            "JUPYTER_RUNTIME_DIR": str(base / "lab-runtime"),
            "JUPYTER_CONFIG_DIR": str(base / "lab-config"),
            "JUPYTER_DATA_DIR": str(base / "lab-data"),
            "JUPYTERLAB_SETTINGS_DIR": str(settings),
            "JUPYTERLAB_WORKSPACES_DIR": str(base / "lab-workspaces"),
        }
        self.log = open(base / "jupyterlab.log", "w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyter",
                "lab",
                "--no-browser",
                "--allow-root",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={self.port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={self.dir}",
            ],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (base / "jupyterlab.log").read_text()[-3000:]
            try:
                _http(self.api("status"))
                return
            except OSError:
                time.sleep(0.5)
        raise AssertionError("JupyterLab did not answer within 120 s")

    def api(self, path: str) -> str:
        return f"{self.base}/api/{path}?token={self.token}"

    def kernel_of(self, name: str) -> dict | None:
        for s in _http(self.api("sessions")):
            if s["path"].endswith(name):
                return s["kernel"]
        return None

    def shutdown_kernels(self) -> None:
        for s in _http(self.api("sessions")):
            _http(self.api(f"sessions/{s['id']}"), method="DELETE")

    def servers(self) -> list:
        """`kit serve` processes started under this JupyterLab (the notebooks' and the sweep's servers)."""
        import psutil

        out = []
        for p in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                cmd = p.cmdline()
            except psutil.Error:
                continue
            if cmd[1:4] == ["-m", "kit", "serve"]:
                out.append(p)
        return out

    def close(self) -> None:
        try:
            self.shutdown_kernels()
        except OSError:
            pass
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


class Page:
    """The browser, and what a person does and sees in JupyterLab's active notebook."""

    def __init__(self, base: Path):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for flag in CHROMIUM_FLAGS:
            opts.add_argument(flag)
        opts.add_argument(f"--user-data-dir={base / 'chromium-profile'}")
        self.driver = webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))
        self.driver.set_script_timeout(30)

    def js(self, script: str, *args):
        return self.driver.execute_script(script, *args)

    def wait(self, what: str, check, timeout: float, every: float = 0.5):
        deadline = time.monotonic() + timeout
        while True:
            got = check()
            if got:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(every)

    PANEL = "document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)')"

    def open(self, lab: Lab, name: str) -> None:
        self.driver.get(f"{lab.base}/lab/tree/{name}?reset&token={lab.token}")
        self.wait(f"{name} to open", lambda: self.js(f"return !!{self.PANEL}?.querySelector('.jp-CodeCell')"), 120)
        self.wait(f"{name}'s kernel", lambda: (lab.kernel_of(name) or {}).get("execution_state") == "idle", 120)
        # the file browser folds away, as a person would to give the notebook the width
        from selenium.webdriver.common.by import By

        for tab in self.driver.find_elements(By.CSS_SELECTOR, ".jp-SideBar .lm-TabBar-tab.lm-mod-current"):
            tab.click()

    def menu(self, menu: str, item: str) -> None:
        """Click a menu bar entry, then one of its items, by their labels."""
        from selenium.webdriver.common.by import By

        self.driver.find_element(
            By.XPATH, f"//div[contains(@class,'lm-MenuBar-itemLabel') and text()='{menu}']"
        ).click()
        self.driver.find_element(
            By.XPATH,
            f"//li[contains(@class,'lm-Menu-item')][.//div[contains(@class,'lm-Menu-itemLabel') and text()='{item}']]",
        ).click()

    def prompts(self) -> list[str]:
        """The execution prompts of the code cells, in order: '[3]:', '[*]:' (running or queued), '[ ]:'."""
        return self.js(
            f"return [...{self.PANEL}.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')]"
            ".map(e => e.textContent.trim())"
        )

    def run_all(self, lab: Lab, name: str, timeout: float) -> float:
        t0 = time.monotonic()
        self.menu("Run", "Run All Cells")
        self.wait("the run to start", lambda: any(re.search(r"\*|\d", p) for p in self.prompts()), 60, every=0.2)

        def finished():
            ps = self.prompts()
            if any("*" in p for p in ps):
                return False
            if (lab.kernel_of(name) or {}).get("execution_state") != "idle":
                return False
            return True

        self.wait(f"{name} to run to its last cell", finished, timeout, every=1.0)
        return time.monotonic() - t0

    def cell_count(self) -> int:
        return self.js(f"return {self.PANEL}.querySelectorAll('.jp-Notebook .jp-Cell').length")

    def look_at_cell(self, i: int) -> dict:
        """Scroll cell i into view as a person would, then read what it shows: output text and every image."""
        self.js(f"{self.PANEL}.querySelectorAll('.jp-Notebook .jp-Cell')[arguments[0]].scrollIntoView()", i)
        time.sleep(0.2)
        shown = self.js(
            f"return [...{self.PANEL}.querySelectorAll('.jp-Notebook .jp-Cell')[arguments[0]]"
            ".querySelectorAll('.jp-OutputArea img')].map((img, j) => img.checkVisibility() ? j : -1)"
            ".filter(j => j >= 0)",
            i,
        )
        images = [self.look_at_image(i, j) for j in shown]
        text = self.js(
            f"const c = {self.PANEL}.querySelectorAll('.jp-Notebook .jp-Cell')[arguments[0]];"
            "const o = c.querySelector('.jp-OutputArea'); return o ? o.innerText : '';",
            i,
        )
        return {"text": text, "images": images}

    def look_at_image(self, i: int, j: int, timeout: float = 10.0) -> dict:
        script = (
            f"const img = {self.PANEL}.querySelectorAll('.jp-Notebook .jp-Cell')[arguments[0]]"
            ".querySelectorAll('.jp-OutputArea img')[arguments[1]];"
            "img.scrollIntoView({block: 'center'}); const r = img.getBoundingClientRect();"
            "const s = getComputedStyle(img);"
            "return {loaded: img.complete && img.naturalWidth > 0, width: r.width, height: r.height,"
            " visible: s.visibility !== 'hidden' && s.display !== 'none' && r.bottom > 0 && r.top < innerHeight,"
            " src: img.src.slice(0, 64)};"
        )
        return self.wait(
            f"image {j} of cell {i} to load and show",
            lambda: (lambda s: s if s["loaded"] and s["visible"] and s["width"] > 50 and s["height"] > 50 else None)(
                self.js(script, i, j)
            ),
            timeout,
            every=0.25,
        )

    def save(self) -> None:
        self.menu("File", "Save Notebook")

    def screenshot(self, path: Path, full: bool = True) -> None:
        """The whole notebook in one picture: the window is made as tall as the notebook's content."""
        scroller = f"{self.PANEL}.querySelector('.jp-WindowedPanel-outer')"
        height = self.js(f"return {scroller}.scrollHeight") + 200 if full else 1000
        self.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1280, "height": min(int(height), 16000), "deviceScaleFactor": 1, "mobile": False},
        )
        try:
            time.sleep(1.0)
            if full:
                self.js(f"{scroller}.scrollTop = 0")
                time.sleep(1.0)
            path.write_bytes(self.driver.get_screenshot_as_png())
        finally:
            self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})

    def close(self) -> None:
        self.driver.quit()


@pytest.fixture(scope="module")
def lab_page(tmp_path_factory):
    _need_browser()
    base = tmp_path_factory.mktemp("browser")
    before = _git_status()
    lab = Lab(base)
    page = Page(base)
    try:
        yield lab, page
    finally:
        page.close()
        lab.close()
    assert _git_status() == before, "running the notebooks changed the source tree"


def _git_status() -> list[str]:
    """`git status` of the checkout, less the screenshots this test may be asked to rewrite."""
    out = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "docs/screenshots/" not in line]


def _docs_screenshot(page: Page, i: int, stem: str) -> None:
    """A small PNG for the README: a 1280 x 1300 window scrolled to the notebook's showcase (SHOWCASE's
    heading, else cell i: its last figure or widget), downscaled and reduced to a palette."""
    from PIL import Image

    if stem in SHOWCASE:
        found = page.js(
            f"return [...{page.PANEL}.querySelectorAll('.jp-Notebook .jp-Cell')]"
            ".findIndex(c => (c.querySelector('h1, h2, h3')?.textContent || '').includes(arguments[0]))",
            SHOWCASE[stem],
        )
        assert found >= 0, f"{stem}: no heading {SHOWCASE[stem]!r}"
        i = found
    page.driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 1300, "deviceScaleFactor": 1, "mobile": False}
    )
    try:
        time.sleep(1.0)
        page.js(f"{page.PANEL}.querySelectorAll('.jp-Notebook .jp-Cell')[arguments[0]].scrollIntoView()", i)
        time.sleep(1.5)
        SHOTS.mkdir(parents=True, exist_ok=True)
        raw = SHOTS / f"{stem}.raw.png"
        raw.write_bytes(page.driver.get_screenshot_as_png())
    finally:
        page.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    img = Image.open(raw).convert("RGB")
    img = img.resize((960, round(img.height * 960 / img.width)), Image.LANCZOS)
    img.quantize(colors=128).save(SHOTS / f"{stem}.png", optimize=True)
    raw.unlink()


def check_notebook(lab: Lab, page: Page, stem: str, out: Path) -> int:
    """Everything a person checks after Run All; returns the index of the cell to show in docs."""
    n = page.cell_count()
    looks = [page.look_at_cell(i) for i in range(n)]
    texts = "\n".join(look["text"] for look in looks)
    assert "Traceback" not in texts, texts[texts.index("Traceback") - 200 :][:3000]
    assert not re.search(r"^\w*(Error|Exception): ", texts, re.M), texts[-3000:]
    assert "<Figure size" not in texts, "a figure is shown as text, not as a picture"
    assert "Error displaying widget" not in texts
    assert "Loading widget" not in texts
    closing = [look["text"] for look in looks if look["text"].strip()][-1]
    assert re.search(CLOSING[stem], closing), closing[-500:]
    prompts = page.prompts()
    assert all(re.fullmatch(r"\[\d+\]:", p) for p in prompts), prompts  # every code cell ran
    # the saved notebook agrees with the page: no error output, and every PNG it holds was seen as an image
    path = lab.dir / f"{stem}.ipynb"
    before = path.stat().st_mtime

    def written() -> dict | None:  # the file once the server has finished writing it (it may be caught half-way)
        with contextlib.suppress(OSError, ValueError):
            return json.loads(path.read_text()) if path.stat().st_mtime > before else None
        return None

    page.save()
    page.wait("the notebook to be saved", lambda: written() is not None, 30)
    saved = written()
    outputs = [o for c in saved["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error"]
    pngs = sum("image/png" in o.get("data", {}) for o in outputs)
    assert sum(len(look["images"]) for look in looks) >= pngs
    page.screenshot(out / f"{stem}.png")
    with_pictures = [i for i, look in enumerate(looks) if look["images"]]
    return with_pictures[-1] if with_pictures else n - 1


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_notebook_in_jupyterlab(lab_page, stem, tmp_path):
    lab, page = lab_page
    page.open(lab, f"{stem}.ipynb")
    took = page.run_all(lab, f"{stem}.ipynb", timeout=600)
    print(f"{stem}: Run All took {took:.0f} s")
    show = check_notebook(lab, page, stem, tmp_path)
    if stem.startswith("05"):
        show = sweep_panel(lab, page, tmp_path)
        page.screenshot(tmp_path / f"{stem}.png")  # the whole notebook again, with the panel after its runs
    if os.environ.get("KIT_UPDATE_SCREENSHOTS") == "1":
        _docs_screenshot(page, show, stem)
    if stem.startswith("05"):
        reopened_without_kernel(lab, page, stem)
    lab.shutdown_kernels()
    assert not lab.servers(), "a server outlived its notebook"
    # the notebooks wrote under $KIT_RUNS_DIR, nothing beside themselves
    left = {p.name for p in lab.dir.iterdir()} - {p.name for p in notebook_paths()} - {".ipynb_checkpoints"}
    assert not left, f"written next to the notebooks: {sorted(left)}"
    assert any(lab.runs.iterdir())


# ------------------------------------------------------------------------------------------------
# notebook 05's sweep panel
# ------------------------------------------------------------------------------------------------


def _panel_cell(page: Page) -> int:
    return page.js(
        f"return [...{page.PANEL}.querySelectorAll('.jp-Notebook .jp-Cell')]"
        ".findIndex(c => c.querySelector('.widget-button') && c.textContent.includes('Run sweep'))"
    )


def _panel_text(page: Page, i: int) -> str:
    """What the panel shows now (scrolled into view: JupyterLab does not draw cells off screen)."""
    return page.js(
        f"const o = {page.PANEL}.querySelectorAll('.jp-Notebook .jp-Cell')[arguments[0]].querySelector('.jp-OutputArea');"
        "o.scrollIntoView(); return o.innerText;",
        i,
    )


def _set_box(page: Page, i: int, label: str, value: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    cell = page.driver.find_elements(By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell")[i]
    box = cell.find_element(
        By.XPATH, f".//div[contains(@class,'widget-text')][.//label[contains(., '{label}')]]//input"
    )
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(value)
    box.send_keys(Keys.TAB)


def _press(page: Page, i: int, button: str) -> None:
    from selenium.webdriver.common.by import By

    cell = page.driver.find_elements(By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell")[i]
    cell.find_element(By.XPATH, f".//button[contains(., '{button}')]").click()


def _heatmap_src(page: Page, i: int) -> str | None:
    return page.js(
        f"const img = {page.PANEL}.querySelectorAll('.jp-Notebook .jp-Cell')[arguments[0]]"
        ".querySelector('.widget-image'); return img && img.naturalWidth > 0 ? img.src : null;",
        i,
    )


def sweep_panel(lab: Lab, page: Page, out: Path) -> int:
    """Run sweep on a small grid: the heatmap changes after each measured point; a point whose server is
    killed while it starts is named and skipped; Stop leaves no server. Returns the panel's cell index."""
    i = _panel_cell(page)
    assert i >= 0, "no sweep panel with a Run sweep button"
    page.look_at_cell(i)
    text = _panel_text(page, i)
    assert "let SGLang choose" in text and "run this cell to restore" not in text
    _set_box(page, i, "speculative_num_steps", "1 2")
    _set_box(page, i, "speculative_eagle_topk", "1")
    _set_box(page, i, "draft tokens", "0")
    _set_box(page, i, "concurrency", "1")
    _press(page, i, "Run sweep")
    # point 1: the baseline is measured, and the heatmap appears
    page.wait("the baseline row", lambda: "✓ baseline" in _panel_text(page, i), 240)
    first = page.wait("the heatmap image", lambda: _heatmap_src(page, i), 30)
    assert re.search(r"point \d/3", _panel_text(page, i)) and "elapsed" in _panel_text(page, i)
    # point 2: its server is killed while it starts (an out-of-memory kill looks the same)
    page.wait("point 1-1-2 to start", lambda: "1-1-2: starting the server" in _panel_text(page, i), 120, every=0.2)
    victims = page.wait("the server of point 1-1-2", lab.servers, 30, every=0.2)
    for p in victims:
        p.kill()
    page.wait("the panel to report the failure", lambda: "1-1-2 failed" in _panel_text(page, i), 120)
    assert "going on with the next point" in _panel_text(page, i)
    # point 3 is measured: the heatmap is redrawn, and the run ends naming the failed point
    page.wait("the last row", lambda: "✓ 2-1-3" in _panel_text(page, i), 240)
    page.wait("the heatmap to change", lambda: (_heatmap_src(page, i) or first) != first, 30)
    page.wait("the end of the run", lambda: "done in" in _panel_text(page, i), 60)
    text = _panel_text(page, i)
    assert "failed: 1-1-2" in text and text.count("2-1-3") >= 2  # the message and the table row
    for j in range(
        page.js(
            f"return {page.PANEL}.querySelectorAll('.jp-Notebook .jp-Cell')[arguments[0]]"
            ".querySelectorAll('.jp-OutputArea img').length",
            i,
        )
    ):
        page.look_at_image(i, j)
    page.js(f"{page.PANEL}.querySelectorAll('.jp-Notebook .jp-Cell')[arguments[0]].scrollIntoView()", i)
    page.screenshot(out / "05_sweep_panel.png", full=False)
    # Stop while a new point starts: the run ends before measuring, and its server is gone
    _set_box(page, i, "speculative_num_steps", "3")
    _press(page, i, "Run sweep")
    page.wait("point 3-1-4 to start", lambda: "3-1-4: starting the server" in _panel_text(page, i), 60, every=0.2)
    _press(page, i, "Stop")
    page.wait("the stop", lambda: "stopped after" in _panel_text(page, i), 240)
    assert "no server left running" in _panel_text(page, i)
    assert not lab.servers()
    return i


def reopened_without_kernel(lab: Lab, page: Page, stem: str) -> None:
    """Saved, its kernel shut down, the page reloaded: the panel's place says how to restore it."""
    page.save()
    time.sleep(2)
    lab.shutdown_kernels()
    page.driver.refresh()
    page.wait(f"{stem} to reopen", lambda: page.js(f"return !!{page.PANEL}?.querySelector('.jp-CodeCell')"), 120)
    i = page.wait(
        "the panel's cell",
        lambda: (lambda k: k if k >= 0 else None)(
            page.js(
                f"return [...{page.PANEL}.querySelectorAll('.jp-Notebook .jp-Cell')]"
                ".findIndex(c => c.textContent.includes('restore the panel'))"
            )
        ),
        60,
    )
    # the reopened page renders outputs after the cell itself: read what the output area shows once it settles
    page.wait(
        "the panel's place to show the hint",
        lambda: "run this cell to restore the panel" in page.look_at_cell(i)["text"],
        60,
    )
