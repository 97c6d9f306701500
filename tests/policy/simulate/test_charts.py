"""--plot and --html: PNG charts (same bytes for the same report) and one self-contained page, opened in a real browser."""

import re
import shutil
import subprocess

import pytest

from test_cli_simulate import allot

pytest.importorskip("matplotlib")

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")


ROOT = str(__import__("pathlib").Path(__file__).resolve().parents[3])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("sim")
    p = allot("simulate", "--retry", "60", "--against", "webhook/data/simulate/against",
              "--plot", str(d / "plots"), "--html", str(d / "report.html"), cwd=ROOT)
    assert p.returncode == 0, p.stderr
    return d, p


@pytest.fixture(scope="module")
def outputs(run):
    return run[0]


def test_the_summary_says_where_charts_and_page_were_written(run):
    d, p = run
    assert p.stdout.splitlines()[-2:] == [
        f"wrote 4 charts to {d / 'plots'}: fragmentation.png, gpu-allocation.png, outcomes.png, quota.png",
        f"wrote the HTML page to {d / 'report.html'}",
    ]


def test_with_json_the_paths_go_to_stderr_and_stdout_stays_json(tmp_path):
    import json

    p = allot("simulate", "--json", "--plot", str(tmp_path / "plots"), "--html", str(tmp_path / "r.html"), cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["objects"]["arrived"] > 0
    assert f"wrote the HTML page to {tmp_path / 'r.html'}" in p.stderr and f"charts to {tmp_path / 'plots'}" in p.stderr


def test_plot_writes_the_charts_as_png(outputs):
    names = sorted(f.name for f in (outputs / "plots").iterdir())
    assert names == ["fragmentation.png", "gpu-allocation.png", "outcomes.png", "quota.png"]
    for f in (outputs / "plots").iterdir():
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f.stat().st_size > 5000


def test_charts_are_byte_identical_across_runs(outputs, tmp_path):
    p = allot("simulate", "--retry", "60", "--against", "webhook/data/simulate/against", "--plot", str(tmp_path),
              cwd=str(__import__("pathlib").Path(__file__).resolve().parents[3]))
    assert p.returncode == 0
    for f in (outputs / "plots").iterdir():
        assert (tmp_path / f.name).read_bytes() == f.read_bytes(), f.name


def test_html_is_self_contained(outputs):
    page = (outputs / "report.html").read_text()
    assert page.count("src='data:image/png;base64,") == 4
    assert not re.search(r"""(src|href)=['"](https?:|//)""", page)  # nothing fetched from anywhere
    assert "Decisions that differ" in page and "team-c-no-whole-hosts" in page


def test_html_renders_in_a_headless_browser(outputs, tmp_path):
    browser = next((b for b in BROWSERS if shutil.which(b)), None)
    if browser is None:
        pytest.skip("no chromium on this machine (docs/simulate.md has the manual check)")
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000"]
    dom = subprocess.run([*cmd, "--dump-dom", (outputs / "report.html").as_uri()], capture_output=True, text=True, timeout=90)
    body = re.search(r"<body[^>]*>", dom.stdout)
    assert body, dom.stderr[-500:]
    assert 'data-charts="4"' in body.group(0) and 'data-charts-loaded="4"' in body.group(0)  # every chart decoded
    shot = tmp_path / "shot.png"
    subprocess.run([*cmd, "--window-size=1200,1600", f"--screenshot={shot}", (outputs / "report.html").as_uri()],
                   capture_output=True, timeout=90)
    assert shot.read_bytes()[:4] == b"\x89PNG" and shot.stat().st_size > 20000
