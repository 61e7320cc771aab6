"""What the fast-path tests compare (outputs and gradients, fast vs plain)
and count (calls of a fast path)."""
from typing import Callable, Optional

import torch


def weighted_grads(out, inputs: list) -> list:
    """``out`` (a tensor or a sequence of them) and the gradients of
    ``inputs`` under a fixed, uneven weighting of each output (so that every
    output element counts differently)."""
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    weights = [torch.linspace(-1, 1, o.numel(), dtype=o.dtype).view_as(o) for o in outs]
    return [o.detach() for o in outs] + list(torch.autograd.grad(outs, inputs, weights))


def move_off_init(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with every parameter moved off its initial value: LITv2's
    offsets start at zero, where every deformable sample sits on a pixel, the
    kink of bilinear sampling, whose one-sided offset gradient two correct
    kernels may take from either side."""
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param), alpha=0.01)
    return model


def result_names(outputs: int, model: torch.nn.Module, grads: bool = True) -> list:
    """Names of ``outputs`` outputs and (``grads``) of the gradients of the
    input and of every parameter of ``model``, in that order: the kinds
    :func:`assert_grads_match` scales by."""
    names = [f'output {i}' for i in range(outputs)]
    if grads:
        names += ['grad input'] + [f'grad {name}' for name, _ in model.named_parameters()]
    return names


def assert_all_close(ours: list, theirs: list, tol: float) -> None:
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def counted(monkeypatch, owner, name: str) -> list:
    """Count the calls of ``owner.name`` (still called): one entry per call."""
    calls, original = [], getattr(owner, name)

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)
    monkeypatch.setattr(owner, name, counting)
    return calls


#: float32 tolerance of a fast path against plain PyTorch, per tensor:
#: ``max |fast - plain| <= RTOL * max |plain| + ATOL * (the largest |plain|
#: among tensors of its kind)``: the absolute part covers gradients that are
#: zero up to rounding (a bias feeding a norm) beside large ones
RTOL, ATOL = 1e-4, 1e-6
#: how much further from float64 than plain float32 a fast path's result may
#: be (see :func:`assert_grads_match`)
NOISE = 10


def assert_grads_match(fast: list, plain: list, names: list, where: str,
                       reference: Optional[Callable[[], list]] = None) -> None:
    """Each tensor of ``fast`` equals ``plain``'s within (RTOL, ATOL); the
    kind of a tensor is the first word of its name (``output``, ``grad``).

    ``reference``: where given, a tensor outside the bound still passes when
    its distance from the float64 results ``reference()`` gives (the same
    computation, plain PyTorch, in float64) is within the bound or within
    NOISE times plain float32's own distance: in a gradient that is zero up to
    rounding (a bias feeding a norm) float32 sums in two orders carry
    rounding errors of different size, either one up to tens of times the
    other's, none of them a defect."""
    assert len(fast) == len(plain) == len(names)
    scale: dict = {}
    for name, b in zip(names, plain):
        kind = name.split()[0]
        scale[kind] = max(scale.get(kind, 0.), b.abs().max().item() if b.numel() else 0.)
    bad, bounds = {}, {}
    for i, (name, a, b) in enumerate(zip(names, fast, plain)):
        if a.shape != b.shape:
            bad[i] = f'{name}: shape {tuple(a.shape)} against {tuple(b.shape)}'
            continue
        if not b.numel():
            continue
        error = (a.double() - b.double()).abs().max().item()
        bounds[i] = RTOL * b.abs().max().item() + ATOL * scale[name.split()[0]]
        if not error <= bounds[i]:   # (NaN fails too)
            bad[i] = f'{name}: max error {error:.3g} > {bounds[i]:.3g}'
    if bad and reference is not None:
        exact = reference()
        for i in [i for i in bad if i in bounds]:
            ours = (fast[i].double() - exact[i]).abs().max().item()
            theirs = (plain[i].double() - exact[i]).abs().max().item()
            if ours <= max(NOISE * theirs, bounds[i]):
                del bad[i]
            else:
                bad[i] += f' (from float64: {ours:.3g}, plain float32 {theirs:.3g})'
    bad = list(bad.values())
    assert not bad, f'{where}: {len(bad)} of {len(names)} differ from plain: {bad[:6]}'
