"""``sys.executable`` in a warm child (tests/helpers/warm.py): ``python script.py``, ``-m module`` or ``-c code``
with the child's environment runs in a child of the same warm server, with this process's standard streams, signals
and exit code; anything else runs the real interpreter. Started with ``-S``: it imports only the standard library."""

import os
import signal
import sys

import warm  # this folder is the script's, first on sys.path


def main() -> None:
    args = sys.argv[1:]
    how = warm.plan(args)
    address = os.environ.get("SQUARECHIPO_TEST_WARM")
    connection = None
    if how is not None and address:
        try:
            connection, pid = warm.request(address, how, os.getcwd(), dict(os.environ), [0, 1, 2], os.getpgid(0))
        except OSError:
            connection = None
    if connection is None:
        os.execv(sys.executable, [sys.executable, *args])
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, lambda number, _frame: os.kill(pid, number))
    code = warm.exit_code(connection, None)
    if code < 0:  # ended by a signal: end the same way
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


main()
