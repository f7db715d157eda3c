# Look-alike of https://github.com/horovod/horovod/issues/708: the dataset is sharded by a
# DistributedSampler (every worker gets the same number of batches) and handed to Trainer.
# expect: none
import sys

import horovod.torch as hvd
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from trainer import Trainer, RecordDataset

hvd.init()
dataset = RecordDataset(sys.argv[1])
sampler = DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank())
Trainer(sys.argv, DataLoader(dataset, batch_size=8, sampler=sampler)).train()
