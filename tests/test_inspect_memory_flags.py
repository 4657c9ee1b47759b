"""``hiddenstate inspect DIR --max-bytes SIZE --record-dtype float32``: the cap and the records' dtype from the command line."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hiddenstate.cli import main  # noqa: E402
from hiddenstate.core.resources import parse_bytes  # noqa: E402
from hiddenstate.interop import families  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def mamba_dir(tmp_path_factory):
    torch.manual_seed(0)
    family = families.find_family("mamba")
    model = getattr(transformers, family.classes[0])(family.tiny_config()).eval()
    path = tmp_path_factory.mktemp("m") / "mamba"
    model.save_pretrained(path)
    return model, path


def error_line(capsys):
    err = [line for line in capsys.readouterr().err.strip().splitlines()
           if "falling back" not in line and not line.startswith("hiddenstate: inspect:")]
    assert len(err) == 1, err
    return err[0]


def test_parse_bytes_reads_decimal_and_binary_units():
    assert parse_bytes("8G") == 8 * 10 ** 9 and parse_bytes("8Gi") == parse_bytes("8GiB") == 8 * 2 ** 30
    assert parse_bytes("512") == 512 and parse_bytes("1.5Ki") == 1536 and parse_bytes("2m") == 2 * 10 ** 6
    assert parse_bytes("1e3K") == 10 ** 6
    for bad in ("", "G", "-1", "8X", "nan", "inf", "1e999", "8 Gii"):
        with pytest.raises(ValueError, match=r"^--max-bytes must be a number of bytes >= 0, optionally with a unit"):
            parse_bytes(bad, name="--max-bytes")


@pytest.mark.parametrize("flags, message", [
    (["--max-bytes", "8X"], r"^hiddenstate: error: --max-bytes must be a number of bytes >= 0, optionally with a unit "
                            r".*; got '8X'\.$"),
    (["--max-bytes", "1K"], r"would take about .* over the cap of 1000 bytes: record fewer layers"),
    (["--record-dtype", "float16"], r"--record-dtype: invalid choice: 'float16'"),
])
def test_the_flags_are_refused_in_one_line(mamba_dir, tmp_path, capsys, flags, message):
    _, path = mamba_dir
    np.save(tmp_path / "ids.npy", np.arange(8) % 50)
    with pytest.raises(SystemExit) if "float16" in flags else _nothing():
        code = main(["inspect", os.fspath(path), "--ids", os.fspath(tmp_path / "ids.npy"), *flags, "--out",
                     os.fspath(tmp_path / "r.html")])
        assert code == 2
    assert re.search(message, error_line(capsys)), message
    assert not (tmp_path / "r.html").exists()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_the_flags_apply_to_a_model_directory_only(tmp_path, capsys):
    (tmp_path / "x.safetensors").write_bytes(b"")
    assert main(["inspect", os.fspath(tmp_path / "x.safetensors"), "--max-bytes", "8G", "--out",
                 os.fspath(tmp_path / "r.html")]) == 2
    assert "--max-bytes applies to a save_pretrained model directory" in error_line(capsys)


def test_a_larger_cap_and_float32_records_inspect_the_directory(mamba_dir, tmp_path, capsys):
    _, path = mamba_dir
    np.save(tmp_path / "ids.npy", np.arange(40) % 50)
    assert main(["inspect", os.fspath(path), "--ids", os.fspath(tmp_path / "ids.npy"), "--max-bytes", "8Gi",
                 "--record-dtype", "float32", "--save-states", os.fspath(tmp_path / "s.safetensors"), "--out",
                 os.fspath(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").exists() and (tmp_path / "s.safetensors").exists()
    from hiddenstate.interop.states_file import load_states

    states = load_states(tmp_path / "s.safetensors")
    assert states  # the float32 records were saved


def test_every_stage_of_a_directory_inspection_prints_one_line_on_stderr(mamba_dir, tmp_path, capsys):
    _, path = mamba_dir
    np.save(tmp_path / "ids.npy", np.arange(40) % 50)
    assert main(["inspect", os.fspath(path), "--ids", os.fspath(tmp_path / "ids.npy"), "--save-states",
                 os.fspath(tmp_path / "s.safetensors"), "--out", os.fspath(tmp_path / "r.html")]) == 0
    lines = [line[len("hiddenstate: inspect: "):] for line in capsys.readouterr().err.splitlines()
             if line.startswith("hiddenstate: inspect: ")]
    expected = [r"loaded the MambaForCausalLM from '.*mamba' in \d+\.\d s",
                r"estimated peak .* beside the model's own forward pass",
                r"the MambaForCausalLM's forward pass on N=1 x T=40 tokens, 2 recurrent layer\(s\) hooked",
                r"recomputing layer 0 \(MambaMixer\) in float64, 1 of 2",
                r"recomputing layer 1 \(MambaMixer\) in float64, 2 of 2",
                r"analysing layer 0, 1 of 2", r"analysing layer 1, 2 of 2",
                r"writing the report .*r\.html", r"writing the states .*s\.safetensors"]
    assert len(lines) == len(expected), lines
    for line, pattern in zip(lines, expected):
        assert re.fullmatch(pattern, line), (line, pattern)


def test_the_directory_check_holds_float32_records_to_the_cap_as_float32(mamba_dir, tmp_path):
    # a new user's find: from a directory the cap was held to float64 records whatever --record-dtype said
    import hiddenstate as hs
    from hiddenstate.interop.families.hooks import estimate_bytes

    model, path = mamba_dir
    ids = np.random.default_rng(0).integers(0, model.config.vocab_size, (1, 48))
    totals = {}
    for dtype in ("float64", "float32"):
        per = estimate_bytes(model, 48, 1, record_dtype=dtype)
        totals[dtype] = sum(per.values()) + max(per.values())  # what the directory check holds to the cap
    assert totals["float32"] < totals["float64"]
    cap = (totals["float32"] + totals["float64"]) // 2
    with pytest.raises(ValueError, match=r"every step's state, float64; .* over the cap"):
        hs.inspect_model(str(path), ids, max_bytes=cap)
    an = hs.inspect_model(str(path), ids, max_bytes=cap, record_dtype="float32")
    assert an.layers and an.layers[0].record.ssm.dtype == np.float32
