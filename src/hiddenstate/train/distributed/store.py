"""The rendezvous store of a run on this machine, listening on the loopback address only.

torch's ``TCPStore`` server listens on every interface of the machine, whatever host it is
given (the host only tells the clients where to connect). A run whose ``MASTER_ADDR`` is a
loopback address (``127.0.0.1``, ``localhost``, ``::1``) never needs that: :func:`loopback_store`
binds the listening socket to that address itself and hands it to the server
(``master_listen_fd``), so nothing of the run can be reached from another machine, and
:func:`loopback_interface` names the interface gloo should bind its connections to. A
``MASTER_ADDR`` of a network address keeps torch's own behaviour (other machines must reach it).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket

__all__ = ["bind_loopback_gloo", "is_loopback", "loopback_interface", "loopback_store", "rendezvous"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback address (``127.0.0.0/8``, ``::1``, ``localhost``).

    Parameters
    ----------
    host : str
        A host name or an IPv4/IPv6 address.

    Returns
    -------
    bool
        False for any other name (no name but ``localhost`` is resolved).
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def loopback_interface() -> str | None:
    """The name of the loopback interface (``lo`` on Linux, ``lo0`` on macOS), or None if neither exists.

    Returns
    -------
    str or None
        What ``GLOO_SOCKET_IFNAME`` should be for gloo to connect the ranks over loopback only.
    """
    try:
        names = {name for _, name in socket.if_nameindex()}
    except OSError:
        return None
    return next((name for name in ("lo", "lo0") if name in names), None)


def bind_loopback_gloo() -> None:
    """Set ``GLOO_SOCKET_IFNAME`` to the loopback interface unless the user set it (for this process and its children).

    Called only for a run whose every rank is on this machine (``MASTER_ADDR`` loopback, or
    ``--processes``), before the process group is created.
    """
    name = loopback_interface()
    if name is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", name)


def loopback_store(dist, host: str, port: int, world_size: int | None, timeout_s: float, *, is_master: bool,
                   multi_tenant: bool = False):
    """A ``torch.distributed.TCPStore`` at ``host:port`` whose server listens on ``host`` only.

    Parameters
    ----------
    dist : module
        ``torch.distributed``.
    host : str
        A loopback address (:func:`is_loopback`).
    port : int
        The port; 0 picks a free one (the master only; read it back from ``store.port``).
    world_size : int or None
        The number of store users (None: not fixed).
    timeout_s : float
        Seconds to wait for the server (a client) or for the workers (the master), and of every
        store operation.
    is_master : bool
        True for the process that hosts the server (rank 0); the others connect as clients.
    multi_tenant : bool, default False
        Let later ``TCPStore`` objects of this process at the same port share this server (how
        torch's elastic agent, built after it, ends up using it).

    Returns
    -------
    torch.distributed.TCPStore

    Raises
    ------
    OSError
        The address could not be bound (a port in use).
    RuntimeError
        torch's store errors (a server that did not answer within the timeout).
    """
    timeout = datetime.timedelta(seconds=timeout_s)
    if not is_master:
        return dist.TCPStore(host, port, world_size, False, timeout)
    address = "127.0.0.1" if host == "localhost" else host
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(1024)
        store = dist.TCPStore(host, sock.getsockname()[1], world_size, True, timeout, multi_tenant=multi_tenant,
                              master_listen_fd=sock.fileno(), wait_for_workers=world_size is not None)
    except BaseException:
        sock.close()
        raise
    sock.detach()  # the store's server owns the listening socket from here on
    return store


def rendezvous(dist, rank: int, size: int, timeout_s: float) -> dict:
    """How a rank joins the process group: the keywords of ``init_process_group`` besides rank and size.

    ``init_method="env://"`` under torchrun (its agent hosts the store) or for a network
    ``MASTER_ADDR`` (other machines must reach it); for ranks started by hand on a loopback
    ``MASTER_ADDR``, a :func:`loopback_store` at ``MASTER_ADDR:MASTER_PORT`` (hosted by rank 0)
    and gloo bound to the loopback interface (:func:`bind_loopback_gloo`).

    Parameters
    ----------
    dist : module
        ``torch.distributed``.
    rank, size : int
        This process's rank and the world size.
    timeout_s : float
        Seconds of the store's waits.

    Returns
    -------
    dict
        ``{"init_method": "env://"}`` or ``{"store": store}``.

    Raises
    ------
    ValueError
        ``MASTER_PORT`` is not an integer.
    OSError, RuntimeError
        From :func:`loopback_store`.
    """
    host = os.environ.get("MASTER_ADDR", "")
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" or not is_loopback(host):
        return {"init_method": "env://"}
    try:
        port = int(os.environ.get("MASTER_PORT", ""))
    except ValueError:
        raise ValueError(f"MASTER_PORT must be an integer; got {os.environ.get('MASTER_PORT')!r}.") from None
    bind_loopback_gloo()
    return {"store": loopback_store(dist, host, port, size, timeout_s, is_master=rank == 0)}
