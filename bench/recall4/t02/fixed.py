# Excerpt in the shape of struphy-hub/struphy src/struphy/main.py::run() at 2736c9e2
# (after "remove Barrier responsible for deadlock (#121)"). Unrelated code dropped.
import time

from psydac.ddm.mpi import MockMPI
from psydac.ddm.mpi import mpi as MPI

from struphy.io.output_handling import DataContainer


def run(model, *, params_path=None, env=None, time_opts=None, verbose=False):
    if isinstance(MPI, MockMPI):
        comm = None
        rank = 0
        size = 1
        Barrier = lambda: None
    else:
        comm = MPI.COMM_WORLD
        rank = comm.Get_rank()
        size = comm.Get_size()
        Barrier = comm.Barrier

    if rank == 0:
        print("")

    # synchronize MPI processes to set same start time of simulation for all processes
    Barrier()
    start_simulation = time.time()

    model_name = model.__class__.__name__
    path_out = env.path_out

    # allocate variables, propagators, ...
    model.allocate_variables(verbose=verbose)
    model.allocate_propagators()
    model.compute_plasma_params(verbose=verbose)

    if rank < 32:
        if rank == 0:
            print("")
        print(f"Rank {rank}: executing main.run() for model {model_name} ...")

    if size > 32 and rank == 32:
        print(f"Ranks > 31: executing main.run() for model {model_name} ...")

    # data object for saving
    data = DataContainer(path_out, comm=comm)

    time_state = {"value": [0.0], "index": [0]}
    dt = time_opts.dt
    Tend = time_opts.Tend

    # time loop
    while True:
        Barrier()

        # stop time loop?
        if time_state["value"][0] >= Tend:
            data.file.close()
            end_simulation = time.time()
            if rank == 0:
                print("wall-clock time of simulation [sec]: ", end_simulation - start_simulation)
            break

        time_state["value"][0] = round(time_state["value"][0] + dt, 10)
        time_state["index"][0] += 1
        model.integrate(dt, time_opts.split_algo)

    Barrier()

    if rank == 0:
        print("Struphy run finished.")
