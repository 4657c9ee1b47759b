"""What a newcomer reads first: ``--version`` and the ``--help`` of every subcommand."""
import subprocess
import sys

import pytest

from hiddenstate import __version__
from hiddenstate.cli import _build_parser, main
from hiddenstate.version import __version__ as version_module


def help_text(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"hiddenstate {version_module}"
    assert __version__ == version_module


def test_version_through_the_entry_point():
    out = subprocess.run([sys.executable, "-m", "hiddenstate", "--version"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == f"hiddenstate {version_module}"


@pytest.mark.parametrize("command", ["train", "sample", "demo", "reproduce", "inspect", "intervene", "trace",
                                     "check-cache", "snapshot", "states", "export"])
def test_every_subcommand_has_a_description_shown_by_help(command, capsys):
    import argparse

    sub = next(a for a in _build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    description = sub.choices[command].description
    assert description is not None and len(description.split()) >= 8, description
    assert " ".join(description.split()[:8]) in help_text([command], capsys)


def test_reproduce_help_gives_the_defaults_of_seed_and_out(capsys):
    text = help_text(["reproduce"], capsys)
    assert "--seed SEED" in text and "(default 0)" in text
    assert "--out DIR directory for the figure (default reproduce)" in text


def test_inspect_help_says_what_costs_time_and_the_seed_default(capsys):
    text = help_text(["inspect"], capsys)
    assert "fixed-point search" in text and "--fixed-point-starts" in text
    assert "seed of the random input (default 0)" in text


def test_export_help_names_the_extras(capsys):
    text = help_text(["export"], capsys)
    assert "pip install 'hiddenstate[onnx]'" in text and "pip install 'hiddenstate[torch]'" in text


def test_the_readme_and_the_docs_name_each_subcommand_as_its_help_does():
    import argparse
    import re

    from tests import _docs

    sub = next(a for a in _build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: " ".join(c.help.split()) for c in sub._choices_actions}
    readme = _docs.README.read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `hiddenstate ([\w-]+)` \| ([^|]+?) \|", readme, flags=re.M))
    assert rows == helps  # the README's table of commands is the top-level --help, word for word
    install = (_docs.DOCS / "install.md").read_text(encoding="utf-8")
    assert all(f"`{name}`" in install for name in helps)


def test_the_train_guide_names_every_preset_that_train_help_offers(capsys):
    from hiddenstate.train import PRESETS
    from tests import _docs

    text = help_text(["train"], capsys)
    assert "see docs/guides/train.md" in text
    guide = (_docs.DOCS / "guides" / "train.md").read_text(encoding="utf-8")
    assert PRESETS and all(f"`{name}`" in guide and name in text for name in PRESETS)
