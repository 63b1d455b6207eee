"""index.html in a real browser: headless Chromium loads the page; its DOM has the table rows and PNG images."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from report_helpers import png_size

from sweepit.reporting import build_report
from sweepit_testing import TINY, run_train

pytestmark = pytest.mark.slow

CHROMIUM = next((p for name in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(name))), None)


@pytest.fixture
def chromium() -> str:
    """The browser's path; asked for before the sweep fixture, so a skip costs no sweep."""
    if CHROMIUM is None:
        message = "headless Chromium is not installed (Debian: apt-get install chromium)"
        if os.environ.get("SWEEPIT_REQUIRE_CHROMIUM") == "1":
            pytest.fail(f"{message}, and SWEEPIT_REQUIRE_CHROMIUM=1 requires it")
        pytest.skip(f"{message}; set SWEEPIT_REQUIRE_CHROMIUM=1 to make this a failure")
    return CHROMIUM


def _run_chromium(chromium: str, page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
            *args, page.as_uri()]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


class _Dom(HTMLParser):
    """Rows of the results table (cells as text) and the src of every <img>."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.images: list[str] = []
        self._in_body = self._in_cell = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body:
            self.rows.append([])
        elif tag == "td" and self._in_body:
            self._in_cell = True
            self.rows[-1].append("")
        elif tag == "img":
            self.images.append(dict(attrs).get("src") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "tbody":
            self._in_body = False
        elif tag == "td":
            self._in_cell = False

    def handle_data(self, data: str) -> None:
        if self._in_cell:
            self.rows[-1][-1] += data


def test_page_renders_with_table_rows_and_embedded_pngs(chromium: str, linreg_sweep: Path, tmp_path: Path) -> None:
    page = build_report(linreg_sweep) / "index.html"
    dom = _Dom()
    dom.feed(_run_chromium(chromium, page, tmp_path / "profile", "--dump-dom").stdout)

    jobs = sorted(p.name for p in linreg_sweep.iterdir() if (p / "result.json").is_file())
    assert len(dom.rows) == len(jobs) == 4
    assert [row[0] for row in dom.rows] == ["0", "1", "2", "3"]
    assert {row[3] for row in dom.rows} == {"completed"}
    assert sorted(row[-1] for row in dom.rows) == jobs  # the job_dir column (a job's note is a row of its own)

    assert len(dom.images) == 3
    for src in dom.images:
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix), src[:80]
        width, height = png_size(base64.b64decode(src[len(prefix):]))
        assert width >= 300 and height >= 200

    shot = tmp_path / "page.png"
    _run_chromium(chromium, page, tmp_path / "profile2", "--hide-scrollbars", "--window-size=1280,2000",
                  f"--screenshot={shot}")
    assert png_size(shot.read_bytes()) == (1280, 2000)


_MEASURE = """<script>
const results = document.querySelector('.table-wrap');  // the first table: the results
const wrap = results.getBoundingClientRect();
const heads = [...results.querySelectorAll('th')];
document.body.dataset.columns = heads.map(th => th.textContent).join(' ');
document.body.dataset.hidden = heads.filter(th => th.getBoundingClientRect().right > wrap.right + 0.5)
  .map(th => th.textContent).join(' ');
</script>"""


def test_a_wide_results_table_fits_1280_pixels(chromium: str, tmp_path: Path) -> None:
    """At 1280 px the table of a digits sweep (19 columns, one job on a GPU, one failed with a long note) hid wall
    time, GPU-hours and the job folder behind a scrollbar."""
    sweep = tmp_path / "sweep"
    done = run_train(["-m", "optimizer=adam,sgd", "lr=0.01,0.1", *TINY, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    on_gpus, failed = (next(sweep.glob(f"{n}_*")) / "result.json" for n in (0, 1))
    result = json.loads(on_gpus.read_text())
    on_gpus.write_text(json.dumps({**result, "device": "cuda:0", "n_gpus": 1}))  # as a job given one GPU records
    failed.write_text(json.dumps({**json.loads(failed.read_text()), "status": "failed", "objective": None,
                                  "error": f"DataMissingError: {'no such file, ' * 20}Fix: set data.root."}))
    page = build_report(sweep) / "index.html"
    measured = page.with_name("measured.html")
    measured.write_text(page.read_text().replace("</body>", f"{_MEASURE}</body>"))
    dom = _run_chromium(chromium, measured, tmp_path / "profile", "--window-size=1280,900", "--dump-dom").stdout
    columns = re.search(r'data-columns="([^"]*)"', dom)
    hidden = re.search(r'data-hidden="([^"]*)"', dom)
    assert columns is not None and hidden is not None, dom[-2000:]
    assert len(columns[1].split()) == 18 and "gpu_hours" in columns[1].split(), columns[1]  # and the note's row
    assert hidden[1] == "", f"past the right edge at 1280 px: {hidden[1]}"
    shot = tmp_path / "table.png"
    _run_chromium(chromium, page, tmp_path / "profile2", "--window-size=1280,900", f"--screenshot={shot}")
    assert png_size(shot.read_bytes()) == (1280, 900)
