"""``torchrun`` for the tests: torch's own launcher, its rendezvous store listening on 127.0.0.1 only.

``python tests/_torchrun.py ARGS`` is ``torchrun ARGS``, except that when this node hosts the
store (``--master-addr``/``--rdzv-endpoint`` on loopback, ``--node-rank`` 0, and for the c10d
backend no ``is_host=false``) the store's server is opened first, bound to that address
(:func:`hiddenstate.train.distributed.store.loopback_store`, a tenant-shared server that the agent's
``TCPStore`` at the same port then uses). Plain torchrun's server listens on every interface;
the tests must not.
"""

from __future__ import annotations

import argparse
import os
import sys

#: The command line that starts it (what the tests call instead of ``torchrun``).
TORCHRUN = [sys.executable, os.path.abspath(__file__)]


def main(argv: list[str]) -> None:
    import torch.distributed as dist
    from torch.distributed.run import main as torchrun

    from hiddenstate.train.distributed.store import bind_loopback_gloo, is_loopback, loopback_store

    parser = argparse.ArgumentParser(add_help=False)
    for flag in ("--master-addr", "--master-port", "--rdzv-endpoint", "--rdzv-conf", "--node-rank"):
        parser.add_argument(flag)
    known, _ = parser.parse_known_args(argv)
    if known.rdzv_endpoint:
        host, _, port = known.rdzv_endpoint.rpartition(":")
        hosts = "is_host=false" not in (known.rdzv_conf or "")
    else:
        host, port, hosts = known.master_addr or "127.0.0.1", known.master_port, int(known.node_rank or 0) == 0
    store = None  # held while torchrun runs: the agent's store is a tenant of its server
    if hosts and port and is_loopback(host):
        store = loopback_store(dist, host, int(port), None, 60.0, is_master=True, multi_tenant=True)
    if is_loopback(host):
        bind_loopback_gloo()
    try:
        torchrun(argv)
    finally:
        del store


if __name__ == "__main__":
    main(sys.argv[1:])
