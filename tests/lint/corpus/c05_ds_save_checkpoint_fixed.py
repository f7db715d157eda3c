# Source: https://github.com/deepspeedai/DeepSpeed/pull/801 (all processes must call save_checkpoint)
# expect: none
import deepspeed


def main(args, model, params, loader):
    model_engine, optimizer, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=params)
    for step, batch in enumerate(loader):
        loss = model_engine(batch)
        model_engine.backward(loss)
        model_engine.step()
        if step % args.save_interval == 0:
            model_engine.save_checkpoint(args.save_dir, tag="step%d" % step)
