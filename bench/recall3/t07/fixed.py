import math
import os

from mpi4py import MPI


class TorchDataLoader:
    def __init__(self, file_list, batch_size, rank, comm_size):
        self.files = file_list[rank::comm_size]
        self.batch_size = batch_size

    def next(self):
        num_batches = len(self.files) // self.batch_size
        for i in range(num_batches):
            yield self.files[i * self.batch_size:(i + 1) * self.batch_size]


class DLIOBenchmark(object):
    def __init__(self, args):
        self.args = args
        self.comm = MPI.COMM_WORLD
        self.my_rank = self.args.my_rank = self.comm.rank
        self.comm_size = self.args.comm_size = self.comm.size
        self.batch_size = args.batch_size
        self.num_samples = args.num_samples_per_file
        self.num_files_train = args.num_files_train
        self.epochs = args.epochs

    def initialize(self):
        fullpaths = sorted(os.path.join(self.args.data_folder, "train", f)
                           for f in os.listdir(os.path.join(self.args.data_folder, "train")))
        file_list_train = fullpaths[:self.num_files_train]

        samples_per_step_train = self.num_samples * self.batch_size * self.comm_size
        aligned_samples_train = (self.num_files_train // samples_per_step_train) * samples_per_step_train
        if self.num_files_train != aligned_samples_train:
            if self.my_rank == 0:
                print(f"Trimming number of training files ({self.num_files_train} -> {aligned_samples_train})")
            self.num_files_train = aligned_samples_train
            file_list_train = file_list_train[:self.num_files_train]
        self.loader = TorchDataLoader(file_list_train, self.batch_size,
                                      self.my_rank, self.comm_size)
        self.comm.barrier()

    def _train(self, epoch):
        overall_step = 1
        max_steps = math.floor(self.num_samples * self.num_files_train / self.batch_size / self.comm_size)
        for batch in self.loader.next():
            if overall_step > max_steps:
                break
            self.compute(batch)
            # This is the barrier to simulate allreduce.
            self.comm.barrier()
            overall_step += 1
        self.comm.barrier()
        return overall_step

    def compute(self, batch):
        pass

    def run(self):
        self.comm.barrier()
        for epoch in range(1, self.epochs + 1):
            steps = self._train(epoch)
            if self.my_rank == 0:
                print(f"epoch {epoch}: {steps} steps")

    def finalize(self):
        self.comm.barrier()
