"""The command line under malformed input: one line on stderr, exit status 2, never a traceback.

Hypothesis builds command lines for ``train``, ``sample``, ``inspect`` and ``reproduce`` in which at
least one flag has a value its rule refuses (text for a number, NaN, infinities, negative or zero
sizes, fractions for integers, sizes far beyond memory, missing or wrong paths, a directory where a
file is needed, a text of NUL bytes), mixed with valid flags, and runs ``hiddenstate.cli.main`` in
this process. Every case must end with status 2 and exactly one line on stderr that names a flag or
argument the user typed, with no traceback, and must not create the run directory.
"""

from __future__ import annotations

import collections
import contextlib
import io
import pathlib
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hiddenstate import cli

# flag -> values its rule refuses (each is refused whatever the other flags are)
BAD_TRAIN = {
    "--hidden-size": ["x", "", "0", "-3", "2.5", "nan", "1000000000"],
    "--num-layers": ["0", "-1", "1.5", "two"],
    "--seq-len": ["0", "-64", "abc"],
    "--batch-size": ["0", "-1", "3.0", "100000"],
    "--steps": ["0", "-5", "1e3", "many"],
    "--lr": ["0", "-1", "nan", "inf", "-inf", "fast", "1e999"],
    "--clip": ["0", "-2", "nan", "inf"],
    "--seed": ["-1", "0.5", "seed"],
    "--dropout": ["1", "1.0", "-0.1", "nan", "2"],
    "--weight-drop": ["1", "-0.5", "nan"],
    "--ema": ["0", "1", "1.5", "-0.2", "nan"],
    "--max-minutes": ["0", "-1", "nan", "inf"],
    "--eval-every": ["0", "-1", "x"],
    "--save-every": ["0", "-2"],
    "--embedding-dim": ["0", "-4", "e"],
    "--cell": ["transformer", "GRU", ""],
    "--dtype": ["float16", "int64", ""],
    "--preset": ["huge", ""],
}
GOOD_TRAIN = {"--hidden-size": "8", "--steps": "2", "--seq-len": "8", "--batch-size": "2", "--lr": "0.01",
              "--cell": "gru", "--dtype": "float64", "--quiet": None}
BAD_SAMPLE = {"--length": ["-1", "x", "1000000000000", "2.5"], "--temperature": ["-1", "nan", "inf", "hot"],
              "--seed": ["-3", "x"]}
BAD_REPRODUCE = {"--seed": ["-1", "x", "0.5"]}


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz_cli")
    nul = root / "nul.txt"
    nul.write_bytes(b"\0" * 5000)
    tiny = root / "tiny.txt"
    tiny.write_text("ab", encoding="utf-8")
    latin = root / "latin1.txt"
    latin.write_bytes("caf\xe9".encode("latin-1") * 100)
    folder = root / "a_folder"
    folder.mkdir()
    user = root / "user_dir"
    user.mkdir()
    (user / "notes.txt").write_text("mine", encoding="utf-8")
    return {"root": root, "nul": nul, "tiny": tiny, "latin": latin, "folder": folder, "user": user,
            "missing": root / "does" / "not" / "exist"}


def run_cli(argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = cli.main(argv)
        except SystemExit as exit_:  # argparse's usage errors
            status = exit_.code
    return status, err.getvalue()


@st.composite
def malformed_command(draw, paths):
    command = draw(st.sampled_from(["train", "train", "train", "sample", "inspect", "reproduce"]))
    out = str(paths["root"] / f"run{draw(st.integers(0, 10**6))}")
    if command == "train":
        bad = draw(st.lists(st.sampled_from(sorted(BAD_TRAIN)), min_size=0, max_size=2, unique=True))
        argv = ["train", "--out", out]
        for flag, value in GOOD_TRAIN.items():
            if flag not in bad and draw(st.booleans()):
                argv += [flag] if value is None else [flag, value]
        for flag in bad:
            argv += [flag, draw(st.sampled_from(BAD_TRAIN[flag]))]
        path_case = draw(st.sampled_from(["none", "data-missing", "data-folder", "data-nul", "data-tiny",
                                          "data-latin", "resume-missing", "out-user-dir", "out-file"]))
        if not bad and path_case == "none":
            path_case = "data-missing"  # every case must hold something malformed
        if path_case.startswith("data-"):
            argv += ["--data", str(paths[path_case[5:]])]
        elif path_case == "resume-missing":
            argv += ["--resume", str(paths["missing"])]
        elif path_case == "out-user-dir":
            argv[2] = str(paths["user"])
        elif path_case == "out-file":
            argv[2] = str(paths["tiny"])
        return argv, out
    if command == "sample":
        flag = draw(st.sampled_from(sorted(BAD_SAMPLE)))
        where = draw(st.sampled_from(["missing", "folder", "user"]))
        return ["sample", str(paths[where]), flag, draw(st.sampled_from(BAD_SAMPLE[flag]))], out
    if command == "inspect":
        where = draw(st.sampled_from(["missing", "folder", "user", "nul"]))
        argv = ["inspect", str(paths[where])]
        if draw(st.booleans()):
            argv += ["--text", str(paths[draw(st.sampled_from(["missing", "folder", "nul"]))])]
        return argv, out
    name = draw(st.sampled_from(["elman-xor", "copy", "nonsense", ""]))
    argv = ["reproduce", name, "--quick", "--out", out]
    if name in ("elman-xor", "copy"):
        flag = "--seed"
        argv += [flag, draw(st.sampled_from(BAD_REPRODUCE[flag]))]
    return argv, out


OUTCOMES = collections.Counter()


@pytest.mark.slow
def test_malformed_command_lines_get_one_line_and_status_2(paths):
    @settings(max_examples=250, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(case=malformed_command(paths))
    def check(case):
        argv, out = case
        status, err = run_cli(argv)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        OUTCOMES[(argv[0], status)] += 1
        assert status == 2, (argv, status, err)
        assert len(lines) == 1, (argv, err)
        assert "Traceback" not in err and "internal error" not in err, (argv, err)
        assert lines[0].startswith("hiddenstate"), (argv, err)
        # it names what the user typed: a flag, the NAME or CKPT argument (a checkpoint path)
        assert re.search(r"--[a-z]|NAME|CKPT|checkpoint|argument", lines[0]), (argv, err)
        assert not pathlib.Path(out).exists(), (argv, "a refused command created its --out")

    check()
    print(f"fuzz_cli: {sum(OUTCOMES.values())} malformed command lines; outcomes {dict(OUTCOMES)}")
    assert sum(OUTCOMES.values()) >= 200
