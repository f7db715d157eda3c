# Source: https://github.com/horovod/horovod/issues/708
# Bug: the input files are split by worker (files[rank::size]); with 3 workers and a file count
#      that does not divide, one worker gets more batches and waits in an allreduce the others
#      never reach. The sharded dataset is built here and handed to Trainer(args, dataset).
# Class: flow across files and objects (rank-sharded dataset passed through a constructor)
# expect: HK105 collective=trainer.py:22 branch=trainer.py:20
import glob
import sys

import horovod.torch as hvd

from trainer import Trainer, ShardDataset

hvd.init()
files = sorted(glob.glob(sys.argv[1] + "/*.tfrecord"))
dataset = ShardDataset(files[hvd.rank()::hvd.size()])
Trainer(sys.argv, dataset).train()
