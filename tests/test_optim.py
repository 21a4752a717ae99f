"""LAMB against a numpy transcription of ALBERT's TF lamb_optimizer.py; schedule; parameter groups."""

import numpy as np
import pytest
import torch
from torch import nn

from litebert.training.optim import Lamb, clip_grad_norm, lr_factor, make_optimizer, make_schedule, param_groups

torch.set_num_threads(1)


def tf_lamb_step(param, grad, m, v, lr, wd, adapt, b1=0.9, b2=0.999, eps=1e-6):
    """google-research/albert lamb_optimizer.py, apply_gradients, one variable, in float64 numpy."""
    next_m = b1 * m + (1.0 - b1) * grad
    next_v = b2 * v + (1.0 - b2) * np.square(grad)
    update = next_m / (np.sqrt(next_v) + eps)
    if wd:  # _do_use_weight_decay: `if not self.weight_decay_rate: return False`, then the name regexes
        update += wd * param
    ratio = 1.0
    if adapt:  # _do_layer_adaptation
        w_norm = np.linalg.norm(param)
        g_norm = np.linalg.norm(update)
        ratio = np.where(w_norm > 0, np.where(g_norm > 0, w_norm / g_norm, 1.0), 1.0)
    next_param = param - ratio * lr * update
    return next_param, next_m, next_v


@pytest.mark.parametrize("foreach", [True, False])
def test_lamb_matches_tf_equations(foreach):
    rng = np.random.default_rng(0)
    shapes = [(7, 5), (5,), (3, 4, 2), (6,)]
    # group 0: decay + adaptation; group 1: neither (LayerNorm/bias); group 2: adaptation without decay;
    # the zero tensor exercises the ||w|| = 0 branch of the trust ratio.
    init = [rng.normal(size=s) for s in shapes]
    init[3] = np.zeros(shapes[3])
    ps = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in init]
    groups = [
        dict(params=[ps[0], ps[3]], weight_decay=0.01, exclude_from_layer_adaptation=False),
        dict(params=[ps[1]], weight_decay=0.0, exclude_from_layer_adaptation=True),
        dict(params=[ps[2]], weight_decay=0.0, exclude_from_layer_adaptation=False),
    ]
    wd = [0.01, 0.0, 0.0, 0.01]
    adapt = [True, False, True, True]
    opt = Lamb(groups, lr=0.05, foreach=foreach)
    ref = [(x.copy(), np.zeros_like(x), np.zeros_like(x)) for x in init]
    for step in range(6):
        lr = 0.05 * (step + 1) / 6  # a varying lr, as under a schedule
        for g in opt.param_groups:
            g["lr"] = lr
        grads = [rng.normal(size=s) for s in shapes]
        for p, g in zip(ps, grads):
            p.grad = torch.tensor(g)
        opt.step()
        ref = [tf_lamb_step(x, g, m, v, lr, wd[i], adapt[i]) for i, ((x, m, v), g) in enumerate(zip(ref, grads))]
    for p, (x, _, _) in zip(ps, ref):
        np.testing.assert_allclose(p.detach().numpy(), x, rtol=1e-10, atol=1e-12)
    # float32, as in training: agrees to float32 precision
    ps32 = [torch.tensor(x, dtype=torch.float32, requires_grad=True) for x in init]
    opt32 = Lamb([dict(params=ps32, weight_decay=0.01)], lr=0.01, foreach=foreach)
    ref32 = [(x.copy(), np.zeros_like(x), np.zeros_like(x)) for x in init]
    for _ in range(5):
        grads = [rng.normal(size=s) for s in shapes]
        for p, g in zip(ps32, grads):
            p.grad = torch.tensor(g, dtype=torch.float32)
        opt32.step()
        ref32 = [tf_lamb_step(x, g.astype(np.float32).astype(np.float64), m, v, 0.01, 0.01, True)
                 for (x, m, v), g in zip(ref32, grads)]
    for p, (x, _, _) in zip(ps32, ref32):
        np.testing.assert_allclose(p.detach().numpy(), x, rtol=0, atol=1e-6)


def test_foreach_equals_reference_path_bitwise():
    torch.manual_seed(0)
    a = [torch.randn(9, 4, requires_grad=True), torch.randn(4, requires_grad=True)]
    b = [p.detach().clone().requires_grad_() for p in a]
    oa, ob = Lamb(a, lr=0.1, foreach=True), Lamb(b, lr=0.1, foreach=False)
    for _ in range(3):
        for pa, pb in zip(a, b):
            pa.grad = torch.randn_like(pa)
            pb.grad = pa.grad.clone()
        oa.step()
        ob.step()
    for pa, pb in zip(a, b):
        torch.testing.assert_close(pa, pb, rtol=1e-6, atol=1e-7)


def test_schedule_matches_albert_optimization_py():
    # warmup: lr * step / warmup; afterwards polynomial decay computed from step 0 (not restarted)
    assert lr_factor(0, 10, 100) == 0.0
    assert lr_factor(5, 10, 100) == 0.5
    assert lr_factor(10, 10, 100) == pytest.approx(0.9)
    assert lr_factor(55, 10, 100) == pytest.approx(0.45)
    assert lr_factor(100, 10, 100) == 0.0
    assert lr_factor(150, 10, 100) == 0.0
    assert lr_factor(50, 0, 100, power=2.0) == pytest.approx(0.25)
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=2.0)
    sched = make_schedule(opt, warmup_steps=4, total_steps=20)
    seen = []
    for _ in range(21):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen[:5] == [0.0, 0.5, 1.0, 1.5, pytest.approx(2.0 * (1 - 4 / 20))]
    assert seen[10] == pytest.approx(2.0 * 0.5)
    assert seen[20] == 0.0


class Tiny(nn.Module):
    """HF-like names, a shared layer applied twice and a decoder tied to the embedding."""

    def __init__(self):
        super().__init__()
        self.word_embeddings = nn.Embedding(11, 4)
        self.LayerNorm = nn.LayerNorm(4)
        self.shared = nn.Linear(4, 4)
        self.layers = nn.ModuleList([self.shared, self.shared])
        self.full_layer_layer_norm = nn.LayerNorm(4)
        self.decoder = nn.Linear(4, 11)
        self.decoder.weight = self.word_embeddings.weight  # tied


def test_param_groups_exclude_layernorm_and_bias_and_count_tied_once():
    model = Tiny()
    groups = param_groups(model, weight_decay=0.01)
    decay, no_decay = groups
    assert decay["param_names"] == ["word_embeddings.weight", "shared.weight"]
    assert no_decay["param_names"] == ["LayerNorm.weight", "LayerNorm.bias", "shared.bias",
                                       "full_layer_layer_norm.weight", "full_layer_layer_norm.bias", "decoder.bias"]
    assert decay["weight_decay"] == 0.01 and not decay["exclude_from_layer_adaptation"]
    assert no_decay["weight_decay"] == 0.0 and no_decay["exclude_from_layer_adaptation"]
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len({id(p) for p in model.parameters()})
    for name in ("lamb", "adamw"):
        opt = make_optimizer(model, name, lr=1e-3)
        assert sum(len(g["params"]) for g in opt.param_groups) == len(ids)
    with pytest.raises(ValueError):
        make_optimizer(model, "sgd")


def test_clip_grad_norm_is_tf_clip_by_global_norm():
    a, b = torch.zeros(3, requires_grad=True), torch.zeros(4, requires_grad=True)
    a.grad, b.grad = torch.tensor([3.0, 0.0, 0.0]), torch.tensor([0.0, 4.0, 0.0, 0.0])
    norm = clip_grad_norm([a, b], 1.0)
    assert norm.item() == pytest.approx(5.0)
    torch.testing.assert_close(a.grad, torch.tensor([0.6, 0.0, 0.0]))
    torch.testing.assert_close(b.grad, torch.tensor([0.0, 0.8, 0.0, 0.0]))
    norm = clip_grad_norm([a, b], 10.0)  # below the threshold: unchanged
    assert norm.item() == pytest.approx(1.0)
    torch.testing.assert_close(a.grad, torch.tensor([0.6, 0.0, 0.0]))
