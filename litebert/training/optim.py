"""LAMB as ALBERT trains with it, the parameter groups it needs, and ALBERT's learning-rate schedule.

Reference: google-research/albert `lamb_optimizer.py` and `optimization.py`. Two details differ from the
LAMB paper and from most PyTorch ports, and ALBERT's recipe depends on them:
  * no bias correction of m and v (so the first steps are small; the warmup covers it);
  * LayerNorm weights and all biases are excluded from weight decay AND from the trust ratio.
The exclusion is expressed as parameter groups (`param_groups`), not name matching inside the optimizer,
so `Lamb` works on any iterable of parameters like every torch optimizer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

# Substrings of parameter names excluded from decay and layer adaptation. ALBERT passes the regexes
# ["LayerNorm", "layer_norm", "bias"] to re.search, i.e. "contains"; with HF names "bias" only ever ends a name.
NO_DECAY = ("LayerNorm", "layer_norm", "bias")


class Lamb(torch.optim.Optimizer):
    """Layer-wise adaptive moments (You et al., 2019), exactly as ALBERT's TF `LAMBOptimizer`.

    Per parameter w with gradient g (the gradient is already clipped by the caller):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g^2
        u = m / (sqrt(v) + eps)                      # no bias correction
        u += weight_decay * w                        # if the group's weight_decay != 0
        r = ||w|| / ||u|| if both > 0 else 1         # 1 if the group sets exclude_from_layer_adaptation
        w -= lr * r * u
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.01, exclude_from_layer_adaptation: bool = False,
                 foreach: bool = True):
        if lr < 0 or eps < 0 or weight_decay < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"invalid Lamb hyper-parameters: lr={lr} betas={betas} eps={eps} wd={weight_decay}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        exclude_from_layer_adaptation=exclude_from_layer_adaptation, foreach=foreach)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads, ms, vs = [], [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Lamb does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                params.append(p)
                grads.append(p.grad)
                ms.append(state["exp_avg"])
                vs.append(state["exp_avg_sq"])
            if params:
                update = _lamb_foreach if group["foreach"] else _lamb_reference
                update(params, grads, ms, vs, lr=group["lr"], beta1=group["betas"][0], beta2=group["betas"][1],
                       eps=group["eps"], weight_decay=group["weight_decay"],
                       adapt=not group["exclude_from_layer_adaptation"])
        return loss


def _lamb_reference(params, grads, ms, vs, *, lr, beta1, beta2, eps, weight_decay, adapt):
    """One tensor at a time: the TF code line by line. Kept as the readable definition (and tested)."""
    for w, g, m, v in zip(params, grads, ms, vs):
        m.mul_(beta1).add_(g, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        u = m / (v.sqrt() + eps)
        if weight_decay != 0:
            u.add_(w, alpha=weight_decay)
        ratio = 1.0
        if adapt:
            w_norm, u_norm = torch.linalg.vector_norm(w), torch.linalg.vector_norm(u)
            ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
        w.sub_(u * (ratio * lr))


def _lamb_foreach(params, grads, ms, vs, *, lr, beta1, beta2, eps, weight_decay, adapt):
    """The same arithmetic as `_lamb_reference` with multi-tensor kernels (few launches, no host syncs)."""
    torch._foreach_mul_(ms, beta1)
    torch._foreach_add_(ms, grads, alpha=1 - beta1)
    torch._foreach_mul_(vs, beta2)
    torch._foreach_addcmul_(vs, grads, grads, value=1 - beta2)
    denom = torch._foreach_sqrt(vs)
    torch._foreach_add_(denom, eps)
    updates = torch._foreach_div(ms, denom)
    del denom
    if weight_decay != 0:
        torch._foreach_add_(updates, params, alpha=weight_decay)
    if adapt:
        w_norms = torch.stack(torch._foreach_norm(params))
        u_norms = torch.stack(torch._foreach_norm(updates))
        ratios = torch.where((w_norms > 0) & (u_norms > 0), w_norms / u_norms, torch.ones_like(w_norms))
        torch._foreach_mul_(updates, list((ratios * -lr).unbind()))
        torch._foreach_add_(params, updates)
    else:
        torch._foreach_add_(params, updates, alpha=-lr)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: decayed + layer-adapted, and (LayerNorm, biases) with neither, as ALBERT excludes them.

    `named_parameters()` yields each tensor once, so parameters shared across layers and the MLM decoder
    weight (which *is* the word embedding) are optimized once, under their first name.
    """
    decay, no_decay = ([], []), ([], [])
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        names, tensors = no_decay if any(s in name for s in NO_DECAY) else decay
        names.append(name)
        tensors.append(p)
    groups = [
        dict(params=decay[1], param_names=decay[0], weight_decay=weight_decay, exclude_from_layer_adaptation=False),
        dict(params=no_decay[1], param_names=no_decay[0], weight_decay=0.0, exclude_from_layer_adaptation=True),
    ]
    return [g for g in groups if g["params"]]


def make_optimizer(model: nn.Module, name: str = "lamb", lr: float = 1e-3, weight_decay: float = 0.01,
                   betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6) -> torch.optim.Optimizer:
    """LAMB (ALBERT pretraining) or torch's AdamW (fine-tuning), both over `param_groups(model, ...)`.

    Note AdamW here is torch's, which bias-corrects; ALBERT's TF AdamWeightDecayOptimizer does not.
    """
    groups = param_groups(model, weight_decay)
    if name == "lamb":
        return Lamb(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    if name == "adamw":
        # The fused kernel (CPU and CUDA) is one pass over each tensor: ~2x faster than foreach on CPU.
        fused = all(p.device.type in ("cpu", "cuda") for g in groups for p in g["params"])
        kind = dict(fused=True) if fused else dict(foreach=True)
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, **kind)
    raise ValueError(f"unknown optimizer {name!r}; expected 'lamb' or 'adamw'")


def lr_factor(step: int, warmup_steps: int, total_steps: int, power: float = 1.0) -> float:
    """ALBERT's multiplier of the peak lr for the update made at `step` (0-based, = TF's global_step).

    optimization.py computes polynomial decay from step 0, lr * (1 - min(step, total) / total) ** power, and
    during the first `warmup_steps` replaces it by the linear ramp lr * step / warmup. So the decay is not
    restarted after warmup: at step == warmup the lr is already lr * (1 - warmup / total) ** power.
    """
    if step < warmup_steps:
        return step / warmup_steps
    if total_steps <= 0:
        return 1.0
    return (1.0 - min(step, total_steps) / total_steps) ** power


def make_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int,
                  power: float = 1.0) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup then polynomial decay to 0 (`lr_factor`); call `.step()` once per optimizer step.

    A negative power is refused here: the factor at the last step would be 0 ** power, a ZeroDivisionError."""
    if warmup_steps < 0 or total_steps < 0 or not (math.isfinite(power) and power >= 0):
        raise ValueError(f"invalid schedule: warmup_steps={warmup_steps} total_steps={total_steps} power={power}")
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, warmup_steps, total_steps, power))


@torch.no_grad()
def clip_grad_norm(parameters: Iterable[torch.Tensor], max_norm: float) -> torch.Tensor:
    """tf.clip_by_global_norm: scale all gradients by max_norm / max(norm, max_norm); return the norm.

    (torch's clip_grad_norm_ divides by norm + 1e-6 instead; this matches ALBERT exactly.) max_norm <= 0
    only measures. A non-finite norm is returned as is and the caller must not step.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)).float())
    if max_norm > 0:
        scale = max_norm / torch.clamp(norm, min=max_norm)
        torch._foreach_mul_(grads, scale.to(grads[0].dtype))
    return norm
