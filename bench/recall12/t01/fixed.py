# Repository: argonne-lcf/dlio_benchmark
# Fix commit: 71e2cfa09bb866ca619a6792cf4f798a4205eea5 (PR #200), after-fix shape
# Files excerpted: dlio_benchmark/reader/tf_reader.py (TFReader.next),
#                  dlio_benchmark/data_loader/tf_data_loader.py (TFDataLoader.read / next),
#                  dlio_benchmark/main.py (DLIOBenchmark._train / run / finalize), shortened
import math

import tensorflow as tf
from mpi4py import MPI


class TFReader:
    """Reader for TFRecord files (one tf.data pipeline per rank)."""

    def __init__(self, args, file_list, batch_size):
        self._args = args
        self._file_list = file_list
        self.batch_size = batch_size

    def next(self):
        filenames = tf.data.Dataset.list_files(self._file_list, shuffle=True)
        # shard the file list if we have enough files: with len(files) % comm_size != 0
        # the first ranks get one file more than the others
        if len(self._file_list) >= self._args.comm_size:
            filenames = filenames.shard(num_shards=self._args.comm_size, index=self._args.my_rank)
        dataset = tf.data.TFRecordDataset(filenames=filenames, buffer_size=self._args.transfer_size,
                                          num_parallel_reads=self._args.read_threads)
        if len(self._file_list) < self._args.comm_size:
            dataset = dataset.shard(num_shards=self._args.comm_size, index=self._args.my_rank)
        dataset = dataset.batch(self.batch_size, drop_remainder=True)
        # repeat without bound and take the same floor() count on every rank: a rank with
        # fewer files simply wraps around, so every rank can yield max_steps batches
        dataset = dataset.repeat()
        total = math.floor(len(self._file_list) / self._args.comm_size / self.batch_size
                           * self._args.num_samples_per_file)
        return dataset.take(total * self._args.epochs).prefetch(buffer_size=self._args.prefetch_size)


class TFDataLoader:
    def __init__(self, reader):
        self._reader = reader
        self._dataset = None
        self.epoch_number = 0

    def read(self):
        self._dataset = self._reader.next()

    def next(self):
        for batch in self._dataset:
            yield batch
        self.epoch_number += 1


class DLIOBenchmark:
    def __init__(self, args, loader):
        self.args = args
        self.comm = MPI.COMM_WORLD
        self.my_rank = self.args.my_rank = self.comm.Get_rank()
        self.comm_size = self.args.comm_size = self.comm.Get_size()
        self.loader = loader
        self.num_samples = args.num_samples_per_file
        self.num_files_train = args.num_files_train
        self.batch_size = args.batch_size
        self.epochs = args.epochs

    def compute(self, batch, epoch, step):
        pass  # emulated accelerator time

    def _train(self, epoch):
        block_step = overall_step = 1
        max_steps = math.floor(self.num_samples * self.num_files_train / self.batch_size / self.comm_size)
        for batch in self.loader.next():
            self.compute(batch, epoch, block_step)
            self.comm.barrier()
            block_step += 1
            if overall_step >= max_steps:
                if self.my_rank == 0:
                    print("Maximum number of steps reached")
                break
            overall_step += 1
        self.comm.barrier()
        # (end-of-epoch checkpoint, when configured, would run here)
        self.comm.barrier()
        return overall_step

    def run(self):
        self.loader.read()
        for epoch in range(1, self.epochs + 1):
            steps = self._train(epoch)
            if self.my_rank == 0:
                print(f"epoch {epoch}: {steps} steps")

    def finalize(self):
        self.comm.barrier()
