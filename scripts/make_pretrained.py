"""Make the pretrained checkpoint shipped in ``src/hiddenstate/data/pretrained/demo-gru``.

The demo preset's GRU (256 units, float32) trained on the embedded Shakespeare for 1,000 steps
from seed 0, with no time limit and one BLAS thread (:func:`hiddenstate.train.pretrained.make_pretrained`);
about 70 s on one core. ``tests/test_pretrained.py`` checks that this script's code path gives
the same bytes. Usage::

    python scripts/make_pretrained.py                 # rewrite the shipped checkpoint
    python scripts/make_pretrained.py --out DIR       # write it elsewhere (e.g. to compare)
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before NumPy loads its BLAS

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from hiddenstate.train.pretrained import make_pretrained  # noqa: E402

SHIPPED = ROOT / "src" / "hiddenstate" / "data" / "pretrained" / "demo-gru"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(SHIPPED), help=f"checkpoint directory (default {SHIPPED})")
    parser.add_argument("--steps", type=int, default=1000, help="optimizer steps (default 1000, the shipped model)")
    args = parser.parse_args(argv)
    out = make_pretrained(args.out, steps=args.steps)
    sizes = {p.name: p.stat().st_size for p in sorted(out.iterdir())}
    print(f"wrote {out}: {sizes} ({sum(sizes.values()):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
