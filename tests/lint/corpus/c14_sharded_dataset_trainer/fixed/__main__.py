# Source: https://github.com/horovod/horovod/issues/708 (fix: every worker runs the same number of steps)
# expect: none
import glob
import sys

import horovod.torch as hvd

from trainer import Trainer, ShardDataset

hvd.init()
files = sorted(glob.glob(sys.argv[1] + "/*.tfrecord"))
dataset = ShardDataset(files[hvd.rank()::hvd.size()])
Trainer(sys.argv, dataset).train()
