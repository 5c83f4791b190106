"""``make runner-disk`` (tools/runner_disk.py): an image job refuses a runner without the free disk
the images and the model need, naming the figure, before any work (issue 31, item 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures import fixture_root
from tools import runner_disk


@pytest.fixture(autouse=True)
def frozen_prod(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """``make runner-disk ENV=prod`` reads the frozen prod (tests/fixtures/configs)."""
    root = fixture_root(tmp_path_factory.mktemp("repo"))
    monkeypatch.setattr(runner_disk, "REPO_ROOT", root)


def test_the_figure_is_the_sum_of_its_terms(prod_cfg) -> None:
    need, terms = runner_disk.needed_gb(prod_cfg)
    assert need == pytest.approx(sum(float(t.rsplit(" ", 2)[-2]) for t in terms), abs=0.2)
    assert need > 14  # a standard hosted runner's whole SSD cannot hold it
    assert terms[0].startswith("the vLLM base, compressed and unpacked 21.2 GB")


def test_a_hosted_runner_is_refused_naming_the_figure(tmp_path: Path, capsys) -> None:
    rc = runner_disk.main(["--env", "prod"], places=[tmp_path], free=lambda _: 14.0)
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith(f"::error title=runner disk (prod)::{tmp_path} has 14.0 GB free; the "
                          "image job needs about 47 GB (")  # fmt: skip
    assert "repository variable IMAGE_RUNNER" in err


def test_enough_disk_passes_and_one_filesystem_is_checked_once(tmp_path: Path, capsys) -> None:
    asked: list[Path] = []

    def free(path: Path) -> float:
        asked.append(path)
        return 200.0

    missing = tmp_path / "docker" / "not-yet"  # Docker's root before the first pull
    assert runner_disk.main(["--env", "prod"], places=[tmp_path, missing], free=free) == 0
    assert asked == [tmp_path]
    assert "about 47 GB needed" in capsys.readouterr().out
