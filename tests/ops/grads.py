"""What the fast-path tests compare (outputs and gradients, fast vs plain)
and count (calls of a fast path)."""
import torch


def weighted_grads(out: torch.Tensor, inputs: list) -> list:
    """``out`` and the gradients of ``inputs`` under a fixed, uneven weighting
    of ``out`` (so that every output element counts differently)."""
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    return [out.detach(), *torch.autograd.grad((out * weights).sum(), inputs)]


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


def assert_grads_match(fast: list, plain: list, names: list, where: str) -> None:
    """Each tensor of ``fast`` equals ``plain``'s within (RTOL, ATOL); the
    kind of a tensor is the first word of its name (``output``, ``grad``)."""
    assert len(fast) == len(plain) == len(names)
    scale: dict = {}
    for name, b in zip(names, plain):
        kind = name.split()[0]
        scale[kind] = max(scale.get(kind, 0.), b.abs().max().item() if b.numel() else 0.)
    bad = []
    for name, a, b in zip(names, fast, plain):
        if a.shape != b.shape:
            bad.append(f'{name}: shape {tuple(a.shape)} against {tuple(b.shape)}')
            continue
        if not b.numel():
            continue
        error = (a.double() - b.double()).abs().max().item()
        bound = RTOL * b.abs().max().item() + ATOL * scale[name.split()[0]]
        if not error <= bound:   # (NaN fails too)
            bad.append(f'{name}: max error {error:.3g} > {bound:.3g}')
    assert not bad, f'{where}: {len(bad)} of {len(names)} differ from plain: {bad[:6]}'
