# Source: https://github.com/deepspeedai/DeepSpeed/issues/2993 (and the doc fix https://github.com/deepspeedai/DeepSpeed/pull/801)
# Bug: DeepSpeedEngine.save_checkpoint must be called on every rank (ZeRO shards, barrier
#      inside); calling it on rank 0 only hangs the job.
# Class: library method that is collective (deepspeed engine)
# expect: HK101 collective=16 branch=15
import deepspeed


def main(args, model, params, loader):
    model_engine, optimizer, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=params)
    for step, batch in enumerate(loader):
        loss = model_engine(batch)
        model_engine.backward(loss)
        model_engine.step()
        if step % args.save_interval == 0 and args.local_rank == 0:
            model_engine.save_checkpoint(args.save_dir, tag="step%d" % step)
