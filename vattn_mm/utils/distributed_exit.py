"""Ending the processes of a distributed run: leaving the process group
explicitly and exiting without the interpreter's final teardown, which can
abort a rank after a run that succeeded."""
from __future__ import annotations

import atexit
import os
import sys
import threading
from contextlib import contextmanager
from typing import Iterator, NoReturn

import torch.distributed as dist


@contextmanager
def distributed_teardown() -> Iterator[None]:
    """Leave the process group explicitly when a distributed run ends.

    Without it every rank exits while the others may still use the group: the
    rank that hosts the rendezvous store (rank 0) can be gone before another
    rank's gloo threads are destroyed at interpreter exit, which aborts that
    rank (SIGABRT) after a run that succeeded.  On success the ranks meet at a
    barrier, destroy the group and the process ends here
    (:func:`exit_without_finalization`); on failure the group is destroyed
    locally (no collective: the other ranks may be dead or stuck) and the
    error is re-raised.
    """
    try:
        yield
    except BaseException:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        raise
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
        exit_without_finalization(0)


def exit_without_finalization(status: int) -> NoReturn:
    """End the process after a finished distributed run, skipping only the
    interpreter's final teardown.

    A collective's worker thread (gloo, NCCL's watchdog) releases the tensors
    of a finished operation after the caller has moved on, and that release
    takes the GIL.  If the interpreter is finalizing by then the thread is
    torn down inside a C++ destructor and the rank aborts (SIGABRT), although
    the run succeeded; ``destroy_process_group`` does not prevent it (the
    process group outlives it), and it hits about one in 20 two-process CPU
    runs on a busy 2-core machine.  So everything an
    exit does that can matter is done with the interpreter intact - other
    non-daemon threads are joined, ``atexit`` handlers run (logging closes its
    files, multiprocessing ends its children), stdout and stderr are flushed -
    and then ``os._exit`` ends the process, as multiprocessing ends its own
    children.
    """
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)
