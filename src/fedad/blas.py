"""numpy's BLAS on one thread while fedad runs: small linear algebra beside torch.

fedad's numpy linear algebra works on small matrices (FADngs's 128 x 128 covariances and
their Cholesky factors, ONLAD's OS-ELM updates, k-means and Mahalanobis distances), between
torch's convolutions, which have threads of their own (OpenMP). With OpenBLAS on two or
more threads, each such call waits for threads that torch's OpenMP workers keep busy (they
spin after every parallel region): measured on the 2-core development machine, a 128 x 128
``numpy.linalg.cholesky`` right after a convolution took 123 ms on OpenBLAS's 2 threads and
0.24 ms on one, and one FADngs round spent a third of its time in such calls. On one thread
these calls are as fast as they can be at these sizes; torch keeps its threads.

:func:`one_blas_thread` is used around a whole run (:func:`fedad.runner.run_experiment`) and
in every worker process (:mod:`fedad.fl.workers`). BLAS routines give the same results on one
thread as on several up to the last bits of floating-point sums.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """numpy's BLAS (OpenBLAS, MKL, BLIS) limited to one thread inside the block
    (threadpoolctl), restored after it."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


def limit_blas_threads() -> None:
    """numpy's BLAS on one thread for the rest of the process (worker processes)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")
