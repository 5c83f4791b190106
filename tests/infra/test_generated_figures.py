"""The golden test of the shipped figures (issue 43: figures are outputs): docs/generated/<env>/
is what config/<env>.yaml and today's code give, and fails naming the command that regenerates
them (tools/figures.py; `make -o .venv/.stamp figures`).

The fast files (the plan and the alarms from one synth, the quotas, the capacity line) are
regenerated here and compared byte for byte; the simulator replays (simulate, blast radius,
routing) take minutes, so their inputs' digests (inputs.json: the config and the packages that
compute a figure) stand for them. Behaviour is tested on tests/fixtures/configs, never here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fixtures import config_fixture
from tools import figures
from tools.doc_blocks import documents, find_blocks

FAST = [f.name for f in figures.FIGURES if not f.slow]


@pytest.mark.parametrize("env", figures.ENVS)
def test_the_generated_figures_are_what_the_config_gives_now(
    env: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    fresh = figures.generate(env, tmp_path_factory.mktemp(env), names=[*FAST, figures.INPUTS])
    stale = figures.differences(env, fresh)
    assert stale == [], (
        f"docs/generated/{env}/ is not what config/{env}.yaml gives now: run "
        f"`{figures.COMMAND}` and review the diff\n\n" + "\n\n".join(stale)
    )


def test_every_figure_has_its_committed_file() -> None:
    for env in figures.ENVS:
        for name in [f.name for f in figures.FIGURES] + [figures.INPUTS]:
            assert (figures.GENERATED / env / name).is_file(), f"run `{figures.COMMAND}`"


def test_a_changed_number_fails_naming_the_file_and_the_command(tmp_path: Path) -> None:
    """The check can fail: files generated from a config, then one number of that config changed
    (the primary's ceiling), differ in the quotas and in the inputs' digest, each with its diff."""
    config = tmp_path / "prod.yaml"
    config.write_text(config_fixture("prod").read_text())
    names = ["quotas.txt", figures.INPUTS]
    committed = tmp_path / "generated"
    (committed / "prod").mkdir(parents=True)
    for name, text in figures.generate("prod", tmp_path, names, config=config).items():
        (committed / "prod" / name).write_text(text)
    assert (
        figures.differences("prod", figures.generate("prod", tmp_path, names, config), committed)
        == []
    )

    text = config.read_text()
    primary = re.search(r"(?ms)^scaling:.*?^    primary:.*?max_capacity: (\d+)", text)
    assert primary
    config.write_text(text[: primary.start(1)] + "60" + text[primary.end(1) :])
    stale = figures.differences(
        "prod", figures.generate("prod", tmp_path, names, config), committed
    )
    assert [s.splitlines()[0] for s in stale] == [
        f"--- {committed}/prod/{figures.INPUTS} (committed)",
        f"--- {committed}/prod/quotas.txt (committed)",
    ]
    # the endpoint's instance quota follows the ceiling up (a deploy holds two fleets at max)
    quota = re.compile(r"^([-+])  ml\.\S+ for endpoint usage: (\d+)$", re.M)
    counts = {sign: int(n) for sign, n in quota.findall(stale[1])}
    assert counts["+"] > counts["-"], stale[1]


def outside_blocks(doc: Path) -> str:
    """``doc``'s text without its generated blocks."""
    lines = doc.read_text().splitlines()
    for block in reversed(find_blocks(doc, lines)):
        del lines[block.start : block.end]
    return "\n".join(lines)


def test_no_page_copies_prods_monthly_cost_by_hand() -> None:
    """Prod's monthly cost (the plan's cost line) appears in the docs only inside generated
    blocks: a copy by hand is the stale claim issue 43 removes."""
    plan = (figures.GENERATED / "prod" / "plan.txt").read_text()
    cost = re.search(r"^  cost    (\$[\d,]+)/month", plan, re.M)
    assert cost, "the plan has no cost line"
    copied = [str(d.name) for d in documents() if cost[1] in outside_blocks(d)]
    assert copied == [], f"{cost[1]}/month copied by hand (quote docs/generated/prod/plan.txt)"
