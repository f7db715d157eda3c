# Source: https://github.com/allenai/allennlp/pull/4693 (every rank calls the checkpointer; the
# plain checkpointer writes on the master only)
# expect: none
import deepspeed


class Checkpointer:
    def __init__(self, rank):
        self._master = rank == 0

    def save_checkpoint(self, engine, path):
        if self._master:
            engine.save_model(path)


class DeepspeedCheckpointer(Checkpointer):
    def save_checkpoint(self, engine, path):
        engine.save_checkpoint(path)


class Trainer:
    @classmethod
    def from_params(cls, params, model, rank):
        checkpointer = params.pop("checkpointer").construct()
        return cls(model, checkpointer, rank)

    def __init__(self, model, checkpointer: Checkpointer, rank):
        self._checkpointer = checkpointer
        self.model_engine, _, _, _ = deepspeed.initialize(model=model)

    def _try_train(self, epoch):
        if self._checkpointer is not None:
            self._checkpointer.save_checkpoint(self.model_engine, "epoch_%d" % epoch)
