"""A job of the local launcher or of a Slurm worker in a fresh interpreter (`python -m sweepit.local._fresh`), where its
fork server could not start it: CUDA was initialised before that server was forked (`ForkServer.spawn`). It reads from
stdin what the driver or worker pickled (its ChildSpec, the reply's descriptor, that process's `sys.path`, the job), and
runs as a forked job."""

from __future__ import annotations

import pickle
import sys
from multiprocessing.connection import Connection

from sweepit.local._worker import ChildSpec, child_main
from sweepit.results import JobOutcome


def main() -> None:
    spec: ChildSpec
    spec, reply_fd, path, payload = pickle.load(sys.stdin.buffer)
    # The app's own folder and modules, found as the driver found them (`python app.py` puts the app's folder first).
    sys.path[:] = [*path, *(p for p in sys.path if p not in path)]

    def run() -> JobOutcome:
        # Unpickled in the job, after its output went to its logs: an app that fails to import is the job's error.
        body = pickle.loads(payload)
        return body()

    child_main(spec, Connection(reply_fd, readable=False), run)


if __name__ == "__main__":
    main()
