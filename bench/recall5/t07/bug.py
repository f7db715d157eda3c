# Excerpt in the shape of netket/netket at commit 14b841ce597fbe892b8762f80b5eed89496145df
# (parent of fix 82d58ad27, PR #691, which fixed issue #651). Five modules merged; unrelated code dropped.
import time

import jax
import mpi4jax
from jax.tree_util import tree_map
from mpi4py import MPI

from netket.stats import statistics

from netket.utils import node_number, n_nodes

MPI_jax_comm = MPI.COMM_WORLD.Clone()


# ---- netket/stats/_sum_inplace.py ----
def sum_inplace(x):
    if n_nodes == 1:
        return x
    token = jax.lax.create_token(0)
    res, _ = mpi4jax.allreduce(x, op=MPI.SUM, comm=MPI_jax_comm, token=token)
    return res


# ---- netket/variational/mc_state.py ----
def grad_expect_hermitian(model_apply_fun, parameters, model_state, σ, local_value_args):
    O_loc, vjp_fun = local_value_args
    Ō = statistics(O_loc)
    O_loc -= Ō.mean
    Ō_grad = vjp_fun(O_loc)[0]
    return Ō, tree_map(sum_inplace, Ō_grad)


class MCState:
    def expect_and_grad(self, Ô):
        σ = self.samples
        Ō, Ō_grad = grad_expect_hermitian(
            self._apply_fun, self.parameters, self.model_state, σ, self._local_value_args(Ô, σ)
        )
        return Ō, Ō_grad


# ---- netket/callbacks/timeout.py ----
class Timeout:
    """A simple callback to stop NetKet after some time has passed."""

    def __init__(self, timeout):
        self.__timeout = timeout
        self.__init_time = None

    def __call__(self, step, log_data, driver):
        if self.__init_time is None:
            self.__init_time = time.time()
        else:
            if time.time() - self.__init_time >= self.__timeout:
                return False
        return True


# ---- netket/driver/abstract_variational_driver.py (+ vmc.py) ----
class AbstractVariationalDriver:
    def __init__(self, variational_state, optimizer):
        self._mynode = node_number
        self._variational_state = variational_state
        self.optimizer = optimizer
        self._step_count = 0

    def _forward_and_backward(self):  # netket/driver/vmc.py (VMC)
        self.state.reset()
        self._loss_stats, self._loss_grad = self.state.expect_and_grad(self._ham)
        return self._loss_grad

    def iter(self, n_steps: int, step: int = 1):
        for _ in range(0, n_steps, step):
            for i in range(0, step):
                dp = self._forward_and_backward()
                if i == 0:
                    yield self.step_count
                self._step_count += 1
                self.update_parameters(dp)

    def run(self, n_iter, out=None, obs=None, callback=lambda *x: True):
        if self._mynode == 0:
            loggers = tuple(out) if out is not None else tuple()
        else:
            loggers = tuple()

        callbacks = callback if isinstance(callback, (list, tuple)) else (callback,)
        callback_stop = False

        for step in self.iter(n_iter):
            log_data = self.estimate(obs)

            for callback in callbacks:
                if not callback(step, log_data, self):
                    callback_stop = True

            for logger in loggers:
                logger(self.step_count, log_data, self.state)

            if callback_stop:
                break

        for logger in loggers:
            logger.flush(self.state)
        return loggers
