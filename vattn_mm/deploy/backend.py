"""onnxruntime as the backend of a detector's, segmentor's or classifier's
dense part (backbone, and neck where the model has one): exported once per
weights (:func:`cached_export`, a file named by the weights' hash), checked
against PyTorch whenever a process first uses it, and put in the model's
place (:func:`use_onnxruntime`); the heads stay in PyTorch.

The export has batch 1 and dynamic height and width
(:func:`~vattn_mm.deploy.export_onnx`); a batch runs image by image.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Optional, Sequence, Union

import torch
from torch import nn

from .check import OutputCheck, check_onnx, format_checks
from .onnx import DEFAULT_OPSET, export_onnx
from .runtime import OnnxModel

#: the sizes a cached export is checked at when a process first uses it: a
#: square one (the export size) and one whose sides no stride divides
DEFAULT_BACKEND_CHECK_SIZES = ((512, 512), (421, 397))


class OnnxCheckError(RuntimeError):
    """An export whose outputs differ from PyTorch's beyond the check's tolerances."""


class BackboneNeck(nn.Module):
    """The dense part of a detector / segmentor / classifier: neck(backbone(x))."""

    def __init__(self, backbone: nn.Module, neck: nn.Module):
        super().__init__()
        self.backbone, self.neck = backbone, neck

    def forward(self, x: torch.Tensor):
        return tuple(self.neck(self.backbone(x)))


def dense_part(model: nn.Module) -> nn.Module:
    """``model.backbone``, followed by ``model.neck`` where it has one (the
    OpenMMLab detectors', segmentors' and classifiers' ``extract_feat``)."""
    if not isinstance(getattr(model, 'backbone', None), nn.Module):
        raise TypeError(f'{type(model).__name__} has no backbone module to run in onnxruntime')
    neck = getattr(model, 'neck', None)
    return model.backbone if neck is None else BackboneNeck(model.backbone, neck)


def weights_key(module: nn.Module, opset: int) -> str:
    """sha256 over the module's structure (its ``repr``), every state-dict
    entry (name, dtype, shape, values), the opset and torch's version: the
    name of its cached export."""
    digest = hashlib.sha256()
    for part in (repr(module), str(opset), torch.__version__):
        digest.update(part.encode())
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(f'{name}:{tensor.dtype}:{tuple(tensor.shape)}'.encode())
        digest.update(tensor.detach().to('cpu').contiguous().reshape(-1).view(torch.uint8)
                      .numpy().tobytes())
    return digest.hexdigest()


def default_cache_dir() -> Path:
    """``torch.hub.get_dir()/onnx`` (``$TORCH_HOME/hub/onnx``), beside the
    downloaded checkpoints."""
    return Path(torch.hub.get_dir()) / 'onnx'


def cached_export(module: nn.Module, cache_dir: Union[str, os.PathLike, None] = None, *,
                  export_size: Sequence[int] = DEFAULT_BACKEND_CHECK_SIZES[0],
                  check_sizes: Sequence[Sequence[int]] = DEFAULT_BACKEND_CHECK_SIZES,
                  opset: Optional[int] = None, threads: Optional[int] = None
                  ) -> tuple[Path, list[OutputCheck], bool]:
    """The export of ``module`` in ``cache_dir`` (default
    :func:`default_cache_dir`), named by :func:`weights_key`: made if absent
    (written beside and renamed into place, so that a reader never sees a
    partial file), then checked against PyTorch at ``check_sizes``
    (:func:`~vattn_mm.deploy.check_onnx`, its default tolerances).

    Returns:
        ``(path, checks, exported)``; ``exported``: made by this call.

    Raises:
        OnnxCheckError: with the check's report, the file removed.
    """
    opset = opset or DEFAULT_OPSET
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f'{weights_key(module, opset)}.onnx'
    exported = not path.is_file()
    if exported:
        partial = path.with_name(f'{path.name}.{os.getpid()}.partial')
        try:
            export_onnx(module, partial, export_size, opset=opset)
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
    checks = check_onnx(module, path, check_sizes, threads=threads, export_size=export_size,
                        opset=opset)
    if not all(c.ok for c in checks):
        path.unlink(missing_ok=True)
        raise OnnxCheckError(f'the ONNX export of {type(module).__name__} does not match '
                             f'PyTorch (file removed from the cache):\n{format_checks(checks)}')
    return path, checks, exported


class OnnxFeatures(nn.Module):
    """An exported dense part in the model's place: ``(N, 3, H, W)`` images
    -> the tuple of maps the backbone (and neck) gave, each image run alone
    by the onnxruntime session (the export has batch 1)."""

    def __init__(self, path: Union[str, os.PathLike], threads: Optional[int] = None):
        super().__init__()
        self.path = Path(path)
        self.session = OnnxModel(path, threads)

    def forward(self, images: torch.Tensor) -> tuple:
        if images.device.type != 'cpu':
            raise RuntimeError(f'onnxruntime runs on the CPU; the images are on {images.device}')
        per_image = [self.session(image[None]) for image in images]
        return tuple(torch.cat(maps, 0).to(images.dtype) for maps in zip(*per_image))

    def extra_repr(self) -> str:
        return f'path={str(self.path)!r}'


def use_onnxruntime(model: nn.Module, cache_dir: Union[str, os.PathLike, None] = None, *,
                    threads: Optional[int] = None, **export_kwargs) -> list[OutputCheck]:
    """Run ``model``'s dense part (:func:`dense_part`) in onnxruntime from now
    on: its :func:`cached_export` (checked) replaces ``model.backbone`` and
    ``model.neck`` becomes None, so that ``extract_feat`` and the heads stay
    as they are.  The model must be on the CPU.  Returns the check."""
    params = next(model.parameters(), None)
    if params is not None and params.device.type != 'cpu':
        raise ValueError(f'the onnxruntime backend runs on the CPU; the model is on '
                         f'{params.device}')
    part = dense_part(model)
    path, checks, _ = cached_export(part, cache_dir, threads=threads, **export_kwargs)
    model.backbone = OnnxFeatures(path, threads)
    if getattr(model, 'neck', None) is not None:
        model.neck = None
    return checks
