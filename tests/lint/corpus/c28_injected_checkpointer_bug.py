# Source: https://github.com/allenai/allennlp/pull/4693 (the discussion of the hang in it)
# Bug: the trainer asks its checkpointer to save on the master only; the checkpointer the
#      configuration injects for DeepSpeed delegates to the engine's save_checkpoint, which
#      ends in a barrier the other ranks never reach.
# Class: a collective behind a method of an injected object (the class that runs comes from
#      the configuration: the call is on the base class's name, the override reaches it)
# expect: HK101 collective=18|34 branch=33
import deepspeed


class Checkpointer:
    def save_checkpoint(self, engine, path):
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
        self._master = rank == 0
        self._checkpointer = checkpointer
        self.model_engine, _, _, _ = deepspeed.initialize(model=model)

    def _try_train(self, epoch):
        if self._master and self._checkpointer is not None:
            self._checkpointer.save_checkpoint(self.model_engine, "epoch_%d" % epoch)
