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
