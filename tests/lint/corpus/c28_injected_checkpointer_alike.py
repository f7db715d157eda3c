# Look-alike of https://github.com/allenai/allennlp/pull/4693: the master alone asks an
# injected writer for a metrics file; no implementation of it reaches a collective.
# expect: none
import json


class MetricsWriter:
    def write(self, metrics, path):
        with open(path, "w") as f:
            json.dump(metrics, f)


class Trainer:
    @classmethod
    def from_params(cls, params, model, rank):
        writer = params.pop("metrics_writer").construct()
        return cls(model, writer, rank)

    def __init__(self, model, writer: MetricsWriter, rank):
        self._master = rank == 0
        self._writer = writer

    def _try_train(self, epoch, metrics):
        if self._master and self._writer is not None:
            self._writer.write(metrics, "metrics_epoch_%d.json" % epoch)
