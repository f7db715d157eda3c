# talmolab/sleap-nn @ 121f5c2d2ee5c43451cf7011101bda5ff246e3ba (parent of fix 031fd59e, PR #471)
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

        # Sync all processes after ZMQ operations
        trainer.strategy.barrier()
