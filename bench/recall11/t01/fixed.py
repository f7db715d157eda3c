# Repository: konstmish/prodigy
# Fix commit: a1b4f0eff7ef988ac10d6f11f26b0da15d254588 (PR #36), after-fix shape
# File excerpted: prodigyopt/prodigy.py (Prodigy.__init__ / Prodigy.step), shortened
import math

import torch
import torch.distributed as dist


class Prodigy(torch.optim.Optimizer):
    def __init__(self, params, lr=1.0, betas=(0.9, 0.999), beta3=None,
                 eps=1e-8, weight_decay=0, decouple=True, d0=1e-6, d_coef=1.0,
                 growth_rate=float('inf'), fsdp_in_use=False, slice_p=1):
        defaults = dict(lr=lr, betas=betas, beta3=beta3, eps=eps,
                        weight_decay=weight_decay, d=d0, d0=d0, d_max=d0,
                        d_numerator=0.0, d_coef=d_coef, k=0,
                        growth_rate=growth_rate, decouple=decouple,
                        fsdp_in_use=fsdp_in_use, slice_p=slice_p)
        super().__init__(params, defaults)

    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()

        d_denom = 0.0
        group = self.param_groups[0]
        beta1, beta2 = group['betas']
        beta3 = group['beta3']
        if beta3 is None:
            beta3 = math.sqrt(beta2)
        d = group['d']
        d_max = group['d_max']
        d_coef = group['d_coef']
        lr = max(g['lr'] for g in self.param_groups)
        dlr = d * lr
        growth_rate = group['growth_rate']
        fsdp_in_use = group['fsdp_in_use']

        d_numerator = group['d_numerator']
        d_numerator *= beta3
        delta_numerator = 0.0

        for group in self.param_groups:
            d0 = group['d0']
            slice_p = group['slice_p']
            for p in group['params']:
                # with FSDP1 flat-param sharding, a rank may hold only frozen
                # (LoRA-less) shards: every p.grad is None on that rank
                if p.grad is None:
                    continue
                if hasattr(p, "_fsdp_flattened"):
                    fsdp_in_use = True
                grad = p.grad.data
                state = self.state[p]
                if 'step' not in state:
                    state['step'] = 0
                    state['s'] = torch.zeros_like(p.data.flatten()[::slice_p])
                    state['p0'] = p.flatten()[::slice_p].detach().clone()
                s = state['s']
                p0 = state['p0']
                sliced_grad = grad.flatten()[::slice_p]
                delta_numerator += (d / d0) * dlr * torch.dot(
                    sliced_grad, p0.data - p.data.flatten()[::slice_p]).item()
                s.mul_(beta3).add_(sliced_grad, alpha=((d / d0) * dlr))
                d_denom += s.abs().sum().item()

        d_hat = d

        # if we have not done any progres, return
        if d_denom == 0 and not fsdp_in_use:
            return loss

        if lr > 0.0:
            if fsdp_in_use:
                dist_tensor = torch.zeros(2).cuda()
                dist_tensor[0] = delta_numerator
                dist_tensor[1] = d_denom
                dist.all_reduce(dist_tensor, op=dist.ReduceOp.SUM)
                global_d_numerator = d_numerator + dist_tensor[0]
                global_d_denom = dist_tensor[1]
            else:
                global_d_numerator = d_numerator + delta_numerator
                global_d_denom = d_denom

            d_hat = d_coef * global_d_numerator / global_d_denom
            d_max = max(d_max, d_hat)
            d = min(d_max, d * growth_rate)

        for group in self.param_groups:
            group['d_numerator'] = global_d_numerator
            group['d'] = d
            group['d_max'] = d_max
            group['d_hat'] = d_hat
            group['k'] = group['k'] + 1
        return loss
