"""Sources of evidence beyond stacks: NCCL RAS, Flight Recorder, nvidia-smi."""
