"""`megasim sweep --scheduler ADDRESS` where no Dask scheduler answers is one line, within the probe's
deadline: a server that accepts and says nothing (an HTTP server) hung distributed's client past 60 s,
and one that answers other bytes ended in a traceback ('Unable to allocate 3.07 EiB')."""

from __future__ import annotations

import http.server
import socket
import threading

import pytest

pytest.importorskip("distributed", reason="dask[distributed] is not installed")

import megasim.sweep.cluster as cluster  # noqa: E402
from megasim.cli.main import main  # noqa: E402

TINY = 'problems = ["N=2,C=8,K=8,H=8,W=8"]\ngpus = ["H100"]\n[[runs]]\nalgorithm = "winograd"\nschedules = ["nonfused"]\n'


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def http_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"tcp://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def junk_server():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"HTTP/1.0 400 Bad request\r\n\r\n" * 4)
    threading.Thread(target=serve, daemon=True).start()
    yield f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


@pytest.mark.parametrize("server, needle", [("http_server", "Dask scheduler"), ("junk_server", "not a Dask scheduler")])
def test_an_address_without_a_dask_scheduler_is_one_line(capsys, monkeypatch, tmp_path, request, server, needle):
    address = request.getfixturevalue(server)
    monkeypatch.setattr(cluster, "SCHEDULER_TIMEOUT_S", 2.0, raising=False)
    (tmp_path / "s.toml").write_text(TINY)
    done: dict[str, int] = {}
    run = threading.Thread(target=lambda: done.update(code=main(["sweep", str(tmp_path / "s.toml"), "--scheduler",
                                                                 address, "--out", str(tmp_path / "t.csv")])),
                           daemon=True)
    run.start()
    run.join(60)         # before the probe, the HTTP server's case never ended
    assert not run.is_alive(), "megasim sweep --scheduler still waits after 60 s"
    code = done["code"]
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("megasim: error:"), err
    assert address in err and needle in err, err


def test_a_dask_scheduler_passes_the_probe():
    from distributed import LocalCluster
    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as local:
        cluster.probe_scheduler(local.scheduler_address, timeout_s=10)
