# talmolab/sleap-nn @ 031fd59e02649a1261c469a2d22a63927fd5f13f (fix commit, PR #471)
# File excerpted: sleap_nn/training/callbacks.py (TrainingControllerZMQ), trimmed
# (address/socket setup kept; __del__ and commented-out code dropped).
# The per-rank training loop that reads `trainer.should_stop` is PyTorch Lightning's (not shown).
import jsonpickle
import zmq
from lightning.pytorch.callbacks import Callback
from loguru import logger


class TrainingControllerZMQ(Callback):
    """Lightning callback to receive control commands during training via ZMQ."""

    def __init__(self, address="tcp://127.0.0.1:9000", topic="", poll_timeout=10):
        """Initialize the controller callback by connecting to the specified ZMQ PUB socket."""
        super().__init__()
        self.address = address
        self.topic = topic
        self.timeout = poll_timeout

        # Initialize ZMQ
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.SUB)
        self.socket.subscribe(self.topic)
        self.socket.connect(self.address)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        """Called at the end of each training batch."""
        if trainer.is_global_zero:
            if self.socket.poll(self.timeout, zmq.POLLIN):
                msg = jsonpickle.decode(self.socket.recv_string())
                logger.info(f"Received control message: {msg}")

                # Stop training
                if msg.get("command") == "stop":
                    trainer.should_stop = True

        # Propagate should_stop to all ranks via all_reduce so every rank
        # exits the training loop together.  trainer.strategy.barrier()
        # synchronises execution position but does not copy the value of
        # should_stop; reduce_boolean_decision performs an all_reduce so
        # every rank receives the same True/False decision.  For single-GPU
        # training this is a no-op identical to the previous behaviour.
        trainer.should_stop = trainer.strategy.reduce_boolean_decision(
            trainer.should_stop, all=False
        )
